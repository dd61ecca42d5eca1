# One training rule for every framework of the catalog (the {framework} wildcard is
# constrained to its names). Everything framework-specific is in the runner folder,
# reached through dlscale.launch. The job always writes events.jsonl: a failed run is a
# record with status failed, and its attempt count (a parameter) makes the next invocation
# redo it. Its inputs, spec and resources: rules/helpers/train.smk and dlscale.study.jobs.


include: "helpers/train.smk"


rule train:
    """One run: n nodes x p ranks of one framework training one model (dlscale.launch)."""
    input:
        unpack(train_input),
    output:
        events=runid.run_pattern("events.jsonl"),
    log:
        runid.run_pattern("run.log"),
    conda:
        "../envs/{framework}.yaml"
    threads: train_cpus
    resources:
        **jobs.train_resources(STUDY),
    params:
        spec=train_spec,
        spec_sha=train_spec_sha,
        failed_attempts=failed_attempts,
        requirements=train_requirements,
        python=train_python,
        markers=train_markers,
    # exec: the launcher is the job's process, not a child of bash. A SIGTERM to the job's
    # process group (SLURM's time limit, `timeout`) kills a bash waiting on a redirected
    # command at once; Snakemake then takes the job for a crash and deletes its events.jsonl,
    # the record the launcher writes of that very signal (bash waits out a SIGINT instead).
    shell:
        "DLSCALE_ENV_MARKER={input.env:q} {params.markers} exec {params.python:q} -m dlscale.launch"
        " --spec-json {params.spec:q} --data {input.data:q} --events {output.events:q}"
        " --python {params.python:q} --config-sha256 {params.spec_sha} > {log:q} 2>&1"
