# Caffe: the build (or a user's install), `caffe time` per model, the per-layer figures.
# Training runs are the `train` rule's (train.smk), which takes the build marker as an
# input for Caffe runs.

from dlscale.outputs import CATEGORY_CAFFE_LAYERS, caffe_layer_files

CAFFE = STUDY["caffe"]
CAFFE_BUILD_MARKER = EXTRA_INPUTS["caffe"]


# The per-layer time figures (in rule all and the report) when the study includes Caffe.
CAFFE_FIGURE_FILES = (
    caffe_layer_files(STUDY["models"]) if "caffe" in STUDY["frameworks"] else []
)


rule caffe_build:
    """CPU Caffe + pycaffe, built from the BVLC source once per machine (cached outside
    the repo by source hash and build options), or a user's install (config caffe.home).
    One build for every BLAS: linked to the generic libblas.so.3 (rule caffe_blas).

    The marker names the install and is itself named by what the build depends on
    (dlscale.envs.caffe_build_marker): runs take it as an ordinary input.
    """
    input:
        env=env_marker("caffe"),
    output:
        marker=CAFFE_BUILD_MARKER,
    log:
        "results/logs/envs/caffe-build.log",
    localrule: True
    conda:
        "../envs/caffe.yaml"
    # Untimed: it may use every core, since no timed run can share the host with it.
    threads: workflow.cores
    params:
        python=env_python("caffe"),
        home=CAFFE_HOME or "",
        script=str(dlenvs.CAFFE_BUILD_SCRIPT),
    message:
        (
            f"Using the Caffe install at {CAFFE_HOME} (config caffe.home)"
            if CAFFE_HOME
            else "Building Caffe from source (once per machine, cached; 10-25 minutes):"
            " progress in results/logs/envs/caffe-build.log"
        )
    shell:
        "DLSCALE_CAFFE_JOBS={threads} DLSCALE_CAFFE_HOME={params.home:q} bash {params.script:q} {params.python:q}"
        " {output.marker:q} > {log:q} 2>&1"


rule caffe_blas:
    """One BLAS implementation the one Caffe build loads at run time (caffe option
    ``blas``): Debian's OpenBLAS or BLIS, installed when missing, or MKL's libmkl_rt from
    the wheels pinned in envs/caffe-mkl.lock, installed once into the build cache. No
    compile: a run links libblas.so.3 to it (dlscale/runners/caffe/blas.py)."""
    input:
        env=env_marker("caffe"),
        lock=lambda wc: (
            [os.path.join(ENVS_SPEC_DIR, "caffe-mkl.lock")] if wc.blas == "mkl" else []
        ),
    output:
        marker=os.path.join(ENVS_DIR, "caffe-blas-{blas}-{key}.json"),
    log:
        "results/logs/envs/caffe-blas-{blas}-{key}.log",
    wildcard_constraints:
        blas="|".join(dlenvs.CAFFE_BLAS),
        key="[0-9a-f]{16}",
    localrule: True
    conda:
        "../envs/caffe.yaml"
    params:
        python=env_python("caffe"),
        script=str(dlenvs.CAFFE_BLAS_SCRIPT),
    message:
        "Making BLAS {wildcards.blas} available to Caffe (once per machine)"
    shell:
        "bash {params.script:q} {wildcards.blas} {params.python:q} {output.marker:q} > {log:q} 2>&1"


rule caffe_time:
    """`caffe time`: each layer's forward and backward time at the model's per-rank batch,
    with the study's BLAS (caffe.blas)."""
    input:
        caffe=CAFFE_BUILD_MARKER,
        blas=CAFFE_BLAS_MARKERS[CAFFE["blas"]],
        env=env_marker("caffe"),
    output:
        net="results/caffe/time/{model}.prototxt",
        log="results/caffe/time/{model}.log",
        events="results/caffe/time/{model}.jsonl",
    log:
        "results/logs/caffe/time_{model}.log",
    conda:
        "../envs/caffe.yaml"
    threads: timed_threads(STUDY["threads_per_rank"])
    params:
        python=env_python("caffe"),
        batch=lambda wc: STUDY["batch_per_rank"][wc.model],
        iterations=CAFFE["time_iterations"],
        threads=STUDY["threads_per_rank"],
        blas=CAFFE["blas"],
    shell:
        "DLSCALE_CAFFE_MARKER={input.caffe:q}"
        " {params.python:q} -m dlscale.runners.caffe.timing --model {wildcards.model}"
        " --blas {params.blas}"
        " --batch {params.batch} --iterations {params.iterations} --threads {params.threads}"
        " --python {params.python:q} --net {output.net:q} --log {output.log:q}"
        " --events {output.events:q} > {log:q} 2>&1"


rule caffe_layer_figure:
    """Per-layer time of one model inside Caffe (html, svg, png), from `caffe time`."""
    input:
        events="results/caffe/time/{model}.jsonl",
    output:
        html="results/figures/caffe_layers_{model}.html",
        svg=report(
            "results/figures/caffe_layers_{model}.svg",
            caption="../report/caffe_layers.rst",
            category=CATEGORY_CAFFE_LAYERS,
            labels={"model": "{model}"},
        ),
        png="results/figures/caffe_layers_{model}.png",
    log:
        "results/logs/caffe/figure_{model}.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        python="python" if USE_CONDA else sys.executable,
    shell:
        "{params.python:q} -m dlscale.figures.layers"
        " --events {input.events:q} --model {wildcards.model}"
        " --out {output.html:q} {output.svg:q} {output.png:q} > {log:q} 2>&1"
