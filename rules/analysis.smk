rule aggregate:
    """Every run's events -> the runs and iterations tables and the findings."""
    input:
        events=run_events(),
    output:
        runs_csv=report(
            "results/runs.csv", caption="../report/runs.rst", category="5. All runs"
        ),
        runs_parquet="results/runs.parquet",
        iterations_parquet="results/iterations.parquet",
        findings_csv=report(
            "results/findings.csv",
            caption="../report/findings.rst",
            category="1. Findings",
        ),
    log:
        "results/logs/aggregate.log",
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/aggregate.py"


rule figures:
    """Throughput, speedup, time breakdown and loss curves (html, svg, png)."""
    input:
        runs="results/runs.parquet",
        iterations="results/iterations.parquet",
    output:
        **{
            f"{name}_{fmt}": (
                report(
                    f"results/figures/{name}.{fmt}",
                    caption=f"../report/{name}.rst",
                    category=FIGURE_CATEGORIES[name],
                )
                if fmt == "svg"
                else f"results/figures/{name}.{fmt}"
            )
            for name in FIGURES
            for fmt in FIGURE_FORMATS
        },
    log:
        "results/logs/figures.log",
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/figures.py"


rule perfmodel:
    """Scaling model: calibrate on host runs, check on emulated-network runs, project."""
    input:
        runs="results/runs.parquet",
    output:
        **{
            name: report(
                f"results/perfmodel/{name}.csv",
                caption=PERFMODEL_CAPTIONS[name],
                category="6. Scaling model",
            )
            for name in PERFMODEL_TABLES
        },
        **{
            f"{name}_{fmt}": (
                report(
                    f"results/figures/{name}.{fmt}",
                    caption=PERFMODEL_CAPTIONS[name],
                    category="6. Scaling model",
                )
                if fmt == "svg"
                else f"results/figures/{name}.{fmt}"
            )
            for name in PERFMODEL_FIGURES
            for fmt in FIGURE_FORMATS
        },
    log:
        "results/logs/perfmodel.log",
    conda:
        "../envs/workflow.yaml"
    params:
        network=STUDY["projection"]["network"],
        max_nodes=STUDY["projection"]["max_nodes"],
        ranks_per_node=STUDY["ranks_per_node"],
        num_ps=STUDY["tensorflow"]["num_ps"],
        latency_us=projection_preset("latency_us"),
        bandwidth_gbit=projection_preset("bandwidth_gbit"),
        source=projection_preset("source"),
    script:
        "../scripts/perfmodel.py"
