# BigDL: the Java runtime its Spark cluster needs. Training runs are the `train` rule's
# (train.smk), which takes the Java marker as an input for BigDL runs.

JAVA_MARKER = EXTRA_INPUTS["java"]


rule java:
    """A Java runtime for Spark/BigDL: checked, and installed with apt only where missing
    (openjdk-17-jre-headless, scripts/ensure-java.sh). The marker records `java -version`.
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
    shell:
        # The Java the runner takes: java on PATH, else JAVA_HOME's (a user's without root).
        'bash {params.script:q} > {log:q} 2>&1 && "$(command -v java || echo "$JAVA_HOME/bin/java")"'
        " -version 2> {output.marker:q}"
