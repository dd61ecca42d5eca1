# Site check (make check-site): one small 2-node job that verifies, across nodes, what the
# study's frameworks need before the study spends node-hours (dlscale.host.sitecheck: shared
# file system, each venv importable on every node, TCP between nodes by node name, MPI
# with PMIx for Caffe, Java for BigDL). Not part of `all`: ask for it by name.


rule check_site:
    """Verify the cluster for this study's frameworks; fails naming the check and the node."""
    output:
        "results/site/check.json",
    log:
        "results/site/check.log",
    # A check that failed names what is wrong; the profile's retry would only submit the
    # same 2-node job again and report the same failure one allocation later.
    retries: 0
    conda:
        "../envs/workflow.yaml"
    resources:
        nodes=2,
        tasks=2,
        cpus_per_task=1,
        mem_mb=1000,
        runtime=10,
        mpi="srun",
    params:
        frameworks=",".join(STUDY["frameworks"]),
        envs_dir=os.path.abspath(ENVS_DIR),
        shared="results/site/shared",
        python=sys.executable,
    shell:
        "{params.python:q} -m dlscale.host.sitecheck --frameworks {params.frameworks}"
        " --envs-dir {params.envs_dir:q} --shared {params.shared:q} --out {output:q}"
        " > {log:q} 2>&1"
