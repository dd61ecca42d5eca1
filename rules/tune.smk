# The tuning stage (dlscale/tune/grid.py; config key `tune`): before the study's runs, each
# tuned framework trains each of its models at 1 node under every setting of its grid,
# `tune.repeats` times, with the training rule itself (same launcher, same events), under
# results/tune/<framework>/<model>/<setting id>/r<k>/; then it races (checkpoint tune_race,
# dlscale.tune.choice.race): rounds of one more run of the default and of each setting still
# in contention until one wins or the budget (`tune.budget`) is spent, a clearly worse
# setting measured no more. A checkpoint per (framework, model) chooses the setting; the
# study's runs of that framework and model wait for it and carry the choice in their spec
# (rules/helpers/train.smk: train_input, run_spec). The stage's helpers:
# rules/helpers/tune.smk.


include: "helpers/tune.smk"


use rule train as tune_run with:
    input:
        unpack(run_input),
    output:
        events="results/tune/{framework}/{model}/{setting}/r{repeat}/events.jsonl",
    log:
        "results/tune/{framework}/{model}/{setting}/r{repeat}/run.log",
    threads: tune_cpus
    resources:
        **jobs.tune_resources(STUDY),
    params:
        spec=tune_run_spec,
        spec_sha=tune_run_spec_sha,
        # A failed tuning run is a result (a setting that cannot start), not redone on
        # every invocation: delete its folder and the choice.json to retry it.
        failed_attempts=0,
        requirements=train_requirements,
        python=train_python,
        markers=train_markers,


checkpoint tune_race:
    """One (framework, model) after {done} rounds: another round, and of which settings?"""
    input:
        events=tune_race_input,
        previous=tune_race_previous,
    output:
        "results/tune/{framework}/{model}/race/after{done}.json",
    log:
        "results/tune/{framework}/{model}/race/after{done}.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        settings=tune_choice_settings,
        budget=tune_race_budget,
    script:
        "../scripts/tune_race.py"


checkpoint tune_choice:
    """One (framework, model): every setting's throughput with its interval, the choice."""
    input:
        events=tune_choice_input,
        race=tune_choice_race,
        peak="results/host/matmul_peak.json",
    output:
        choice="results/tune/{framework}/{model}/choice.json",
    log:
        "results/tune/{framework}/{model}/choice.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        settings=tune_choice_settings,
        left_out=tune_choice_left_out,
    script:
        "../scripts/tune_choice.py"


rule tune_report:
    """Every choice of the study in one table (the report's tuning section)."""
    input:
        choices=tune_choice_files(),
    output:
        table=report(
            TUNING_TABLE,
            caption="../report/tuning.rst",
            category=CATEGORY_TUNING,
        ),
    log:
        "results/logs/tune_report.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/tune_report.py"


rule matmul_peak:
    """This host's float32 matmul peak at 1..cores threads (and the study's threads per
    rank): the denominator of runs.csv's roofline fraction (dlscale.host.roofline). Measured
    under the contention probe; a thread count still contended after its redos is
    recorded as refused (the rule succeeds, its fractions are NaN and flagged)."""
    output:
        peak="results/host/matmul_peak.json",
    log:
        "results/logs/matmul_peak.log",
    conda:
        "../envs/workflow.yaml"
    # Timed: nothing else runs beside it (see timed_threads). Not a local rule: on a
    # cluster it measures a compute node, where the runs ran, as one batch job.
    threads: timed_threads(STUDY["threads_per_rank"])
    resources:
        runtime=30,
        nodes=1,
        tasks=1,
        cpus_per_task=STUDY["threads_per_rank"],
    params:
        threads_per_rank=STUDY["threads_per_rank"],
        python=workflow_python(),
    shell:
        "{params.python:q} -m dlscale.host.roofline peak --threads-per-rank {params.threads_per_rank}"
        " --out {output.peak:q} > {log:q} 2>&1"
