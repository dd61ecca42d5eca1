rule framework_env:
    """One virtual environment per framework, from envs/<framework>.txt.

    Frameworks pin incompatible numpy/protobuf ranges, so they never share a venv. The
    marker records the installed versions; a changed requirements file (either of
    requirement_files: the --no-deps list too) rebuilds it.
    """
    input:
        requirements=os.path.join(workflow.basedir, "envs/{framework}.txt"),
        nodeps=lambda wc: requirement_files(wc.framework)[1:],
    output:
        marker=os.path.join(ENVS_DIR, "{framework}", "dlscale-env.json"),
    log:
        "results/logs/envs/{framework}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        venv=lambda wc: os.path.join(ENVS_DIR, wc.framework),
    script:
        "../scripts/make_venv.py"
