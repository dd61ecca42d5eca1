# The learning-rate sweep (config `lr_scaling: {rule: tuned}`, dlscale/tune/rates.py): for
# every global batch a tuned model trains at, the reference framework trains it at 1 rank
# at each swept rate (the training rule itself, under results/lr_tuning/<rate id>/<run id>/),
# a checkpoint per (model, global batch) chooses the rate (dlscale.tune.rate_choice), and
# every framework's runs at that batch carry it in their spec (rules/helpers/train.smk:
# train_input, run_spec). The stage's helpers: rules/helpers/lr_tuning.smk.


include: "helpers/lr_tuning.smk"


use rule train as lr_sweep_run with:
    input:
        unpack(run_input),
    output:
        events=f"{dlrates.SWEEP_DIR}/{{rate}}/{runid.RUN_ID_TEMPLATE}/events.jsonl",
    log:
        f"{dlrates.SWEEP_DIR}/{{rate}}/{runid.RUN_ID_TEMPLATE}/run.log",
    wildcard_constraints:
        rate=r"x[0-9.e+-]+",
    params:
        spec=lr_sweep_spec,
        spec_sha=lr_sweep_spec_sha,
        # A diverged or failed sweep run is a result (a rate that cannot train), not
        # redone on every invocation: delete its folder and the choice to retry it.
        failed_attempts=0,
        requirements=train_requirements,
        python=train_python,
        markers=train_markers,


checkpoint lr_choice:
    """One (model, global batch): every swept rate's steps to target, and the rate chosen."""
    input:
        events=lr_choice_input,
    output:
        choice=f"{dlrates.SWEEP_DIR}/choices/{{model}}/b{{global_batch}}.json",
    log:
        f"{dlrates.SWEEP_DIR}/choices/{{model}}/b{{global_batch}}.log",
    wildcard_constraints:
        global_batch=r"\d+",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        factors=lr_choice_factors,
    script:
        "../scripts/lr_choice.py"


rule lr_tuning_table:
    """Every swept rate of the study, its steps to target and the choices, in one table."""
    input:
        choices=dlrates.choice_files(STUDY),
    output:
        table=report(
            dlrates.SWEEP_TABLE,
            caption="../report/lr_tuning.rst",
            category=CATEGORY_NODES,
        ),
    log:
        "results/logs/lr_tuning_table.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/lr_tuning_table.py"
