# The environments: one venv per framework (rule framework_env), and what a framework's
# runs need besides (catalog extra_inputs: the Caffe build, rules/caffe.smk; Java,
# rules/bigdl.smk), each named by a marker file whose name is the hash of what it is built
# from (dlscale.envs). Where each framework's python is: rules/common.smk.

CAFFE_HOME = STUDY["caffe"]["home"]
#: Rule outputs a framework's runs may need besides venv and data (catalog extra_inputs).
EXTRA_INPUTS = {
    "caffe": str(dlenvs.caffe_build_marker(ENVS_DIR, CAFFE_HOME, ENVS_SPEC_DIR)),
    "java": str(dlenvs.java_marker(ENVS_DIR)),
}
#: The BLAS implementations the one Caffe build may load (caffe option ``blas``; rule
#: caffe_blas installs each once, rules/caffe.smk).
CAFFE_BLAS_MARKERS = {
    blas: str(dlenvs.caffe_blas_marker(ENVS_DIR, blas, ENVS_SPEC_DIR))
    for blas in dlenvs.CAFFE_BLAS
}


rule framework_env:
    """One virtual environment per framework, from envs/<framework>.lock (+ .nodeps.lock).

    Frameworks pin incompatible numpy/protobuf ranges, so they never share a venv. pip
    installs the lock with --require-hashes (every package at its locked version and
    file hash; `make lock` makes the locks from envs/<framework>.txt). The marker's name
    carries the lock's hash (dlscale.envs.env_marker) and the marker the full lock_sha256
    and the installed packages, so a changed lock is a new marker: that framework's venv
    and runs are redone, in the same invocation, and nothing else. The lock files are
    parameters, not inputs: their content is in the name, and a fresh checkout's newer
    mtimes must not rebuild anything.
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
