# BigDL: the Java runtime its Spark cluster needs. Training runs are in train.smk
# (train_bigdl); they take the Java marker as an input.

JAVA_MARKER = os.path.join(ENVS_DIR, "java-version.txt")


rule java:
    """A Java runtime for Spark/BigDL: checked, and installed with apt only where missing
    (openjdk-17-jre-headless, scripts/ensure-java.sh). The marker records `java -version`.
    """
    input:
        script=os.path.join(workflow.basedir, "scripts/ensure-java.sh"),
    output:
        marker=JAVA_MARKER,
    log:
        "results/logs/envs/java.log",
    conda:
        "../envs/bigdl.yaml"
    shell:
        "bash {input.script:q} > {log:q} 2>&1 && java -version 2> {output.marker:q}"
