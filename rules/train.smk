# One rule per framework; everything framework-neutral lives in common.smk and
# dlscale.launch. The rule's job always writes events.jsonl: a failed run is a record
# with status failed, and its attempt count (a parameter) makes the next invocation redo it.


rule train_torch:
    """PyTorch: DDP over gloo, n nodes x p ranks."""
    input:
        **train_input("torch"),
    output:
        events="results/runs/torch/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}/events.jsonl",
    log:
        "results/runs/torch/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}/run.log",
    conda:
        "../envs/torch.yaml"
    threads: train_cpus
    resources:
        **train_resources(),
    params:
        spec=train_spec("torch"),
        spec_sha=train_spec_sha("torch"),
        failed_attempts=failed_attempts("torch"),
        requirements=requirements_sha("torch"),
        python=env_python("torch"),
        repo=workflow.basedir,
    shell:
        "PYTHONPATH={params.repo:q} {params.python:q} -m dlscale.launch"
        " --spec-json {params.spec:q} --data {input.data:q} --events {output.events:q}"
        " --python {params.python:q} --config-sha256 {params.spec_sha} > {log:q} 2>&1"


rule train_tensorflow:
    """TensorFlow: MultiWorkerMirroredStrategy (ring all-reduce) or parameter servers."""
    input:
        **train_input("tensorflow"),
    output:
        events="results/runs/tensorflow/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}/events.jsonl",
    log:
        "results/runs/tensorflow/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}/run.log",
    conda:
        "../envs/tensorflow.yaml"
    threads: train_cpus
    resources:
        **train_resources(),
    params:
        spec=train_spec("tensorflow"),
        spec_sha=train_spec_sha("tensorflow"),
        failed_attempts=failed_attempts("tensorflow"),
        requirements=requirements_sha("tensorflow"),
        python=env_python("tensorflow"),
        repo=workflow.basedir,
    shell:
        "PYTHONPATH={params.repo:q} {params.python:q} -m dlscale.launch"
        " --spec-json {params.spec:q} --data {input.data:q} --events {output.events:q}"
        " --python {params.python:q} --config-sha256 {params.spec_sha} > {log:q} 2>&1"


rule train_caffe:
    """Caffe: pycaffe SGD, gradients summed with MPI Allreduce (Caffe-oMPI), n nodes x p ranks."""
    input:
        **train_input("caffe"),
        caffe=ancient(CAFFE_BUILD_MARKER),
    output:
        events="results/runs/caffe/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}/events.jsonl",
    log:
        "results/runs/caffe/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}/run.log",
    conda:
        "../envs/caffe.yaml"
    threads: train_cpus
    resources:
        **train_resources(),
    params:
        spec=train_spec("caffe"),
        spec_sha=train_spec_sha("caffe"),
        failed_attempts=failed_attempts("caffe"),
        requirements=requirements_sha("caffe"),
        python=env_python("caffe"),
        repo=workflow.basedir,
    shell:
        "DLSCALE_CAFFE_MARKER={input.caffe:q} PYTHONPATH={params.repo:q} {params.python:q} -m dlscale.launch"
        " --spec-json {params.spec:q} --data {input.data:q} --events {output.events:q}"
        " --python {params.python:q} --config-sha256 {params.spec_sha} > {log:q} 2>&1"


rule train_bigdl:
    """BigDL: DistriOptimizer on a Spark standalone cluster the job starts and stops itself."""
    input:
        **train_input("bigdl"),
        java=ancient(JAVA_MARKER),
    output:
        events="results/runs/bigdl/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}/events.jsonl",
    log:
        "results/runs/bigdl/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}/run.log",
    conda:
        "../envs/bigdl.yaml"
    threads: train_cpus
    resources:
        **train_resources(),
    params:
        spec=train_spec("bigdl"),
        spec_sha=train_spec_sha("bigdl"),
        failed_attempts=failed_attempts("bigdl"),
        requirements=requirements_sha("bigdl"),
        python=env_python("bigdl"),
        repo=workflow.basedir,
    shell:
        "PYTHONPATH={params.repo:q} {params.python:q} -m dlscale.launch"
        " --spec-json {params.spec:q} --data {input.data:q} --events {output.events:q}"
        " --python {params.python:q} --config-sha256 {params.spec_sha} > {log:q} 2>&1"
