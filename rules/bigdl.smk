# BigDL: the Java runtime its Spark cluster needs. Training runs are the `train` rule's
# (train.smk), which takes the Java marker as an input for BigDL runs.

JAVA_MARKER = EXTRA_INPUTS["java"]


rule java:
    """A Java runtime for Spark/BigDL: checked, and installed only where missing: with apt
    as root (openjdk-17-jre-headless), else the JDK from PyPI of envs/java.lock into the
    machine cache (scripts/ensure-java.sh). The marker records the chosen `java -version`.
    """
    output:
        marker=JAVA_MARKER,
    log:
        "results/logs/envs/java.log",
    localrule: True
    conda:
        "../envs/bigdl.yaml"
    params:
        script=str(dlenvs.JAVA_SCRIPT),
        python=workflow_python(),
    shell:
        "bash {params.script:q} {params.python:q} {output.marker:q} > {log:q} 2>&1"
