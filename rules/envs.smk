rule framework_env:
    """One virtual environment per framework, from envs/<framework>.txt (+ .nodeps.txt).

    Frameworks pin incompatible numpy/protobuf ranges, so they never share a venv. The
    marker's name carries the requirements' hash (dlscale.envs.env_marker), so changed
    requirements are a new marker: that framework's venv and runs are redone, in the same
    invocation, and nothing else. The requirement files are parameters, not inputs: their
    content is in the name, and a fresh checkout's newer mtimes must not rebuild anything.
    """
    output:
        marker=os.path.join(ENVS_DIR, "{framework}", "dlscale-env-{requirements}.json"),
    log:
        "results/logs/envs/{framework}-{requirements}.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        venv=lambda wc: os.path.join(ENVS_DIR, wc.framework),
        spec_dir=ENVS_SPEC_DIR,
    script:
        "../scripts/make_venv.py"
