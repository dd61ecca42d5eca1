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
