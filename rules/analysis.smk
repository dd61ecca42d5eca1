# Events -> tables, findings, figures, the scaling model; the repeat checks of
# `repeats: auto`. Helpers: rules/helpers/analysis.smk; outputs and captions:
# dlscale.outputs.


include: "helpers/analysis.smk"


rule aggregate:
    """Every run's events -> the runs and iterations tables and the findings."""
    input:
        events=all_run_events,
        # The host's matmul peak: runs.csv's roofline fraction (rules/tune.smk).
        peak="results/host/matmul_peak.json",
    output:
        **{
            name: (
                report(
                    f"results/{filename}",
                    caption=f"../report/{AGGREGATE_REPORTED[name][0]}",
                    category=AGGREGATE_REPORTED[name][1],
                )
                if name in AGGREGATE_REPORTED
                else f"results/{filename}"
            )
            for name, filename in AGGREGATE_FILES.items()
        },
    log:
        "results/logs/aggregate.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        same_work_only=STUDY["same_work_only"],
    script:
        "../scripts/aggregate.py"


use rule train as parity_reference with:
    """The reference framework's 1-rank run of a global batch the study trains on more
    nodes, for the parity check (dlscale.study.matrix.parity_reference_runs)."""
    input:
        unpack(parity_reference_input),
    output:
        events=f"{PARITY_REFERENCE_DIR}/{runid.RUN_ID_TEMPLATE}/events.jsonl",
    log:
        f"{PARITY_REFERENCE_DIR}/{runid.RUN_ID_TEMPLATE}/run.log",
    params:
        spec=parity_reference_spec,
        spec_sha=parity_reference_sha,
        # A failed reference is a parity row saying so, not redone on every invocation.
        failed_attempts=0,
        requirements=train_requirements,
        python=train_python,
        markers=train_markers,


rule parity:
    """The parity check (config init: shared): every framework's first losses against the
    reference framework's at the same global batch (dlscale.analysis.parity), the study's
    multi-node runs against the references planned for them."""
    input:
        events=all_run_events,
        references=PARITY_REFERENCE_EVENTS,
    output:
        parity=report(
            "results/parity.csv",
            caption="../report/parity.rst",
            category=CATEGORY_FINDINGS,
        ),
    log:
        "results/logs/parity.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/parity.py"


rule figures:
    """Throughput, speedup, time breakdown, loss curves, held-out quality and the two
    efficiencies (html, svg, png), drawn from the aggregation's tables on disk and each
    checked panel by panel against them (dlscale.figures.study, dlscale.figures.shown).
    """
    input:
        runs="results/runs.parquet",
        iterations="results/iterations.parquet",
        cells="results/cells.csv",
        evals="results/evals.csv",
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
    localrule: True
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/figures.py"


rule how_many_nodes:
    """How many nodes to a trained model beyond the measured node counts: the scaling
    model's step times x the fitted steps to target (dlscale.perfmodel.nodes_projection),
    and the figures of steps and time to target, each read back panel by panel against
    its tables (dlscale.figures.nodes)."""
    input:
        target_runs="results/target_runs.csv",
        steps="results/steps_to_target.csv",
        fits="results/batch_fit.csv",
        by_nodes="results/nodes_to_target.csv",
        projection="results/perfmodel/projection.csv",
        host_model="results/perfmodel/host_model.csv",
    output:
        **{
            name.removeprefix("time_to_target_"): report(
                f"results/perfmodel/{name}.csv",
                caption=f"../report/{caption}",
                category=CATEGORY_NODES,
            )
            for name, caption in NODES_TABLES.items()
        },
        **{
            f"{name}_{fmt}": (
                report(
                    f"results/figures/{name}.{fmt}",
                    caption=f"../report/{caption}",
                    category=CATEGORY_NODES,
                )
                if fmt == "svg"
                else f"results/figures/{name}.{fmt}"
            )
            for name, caption in NODES_FIGURE_CAPTIONS.items()
            for fmt in FIGURE_FORMATS
        },
    log:
        "results/logs/how_many_nodes.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        warmup=STUDY["warmup"],
        formats=list(FIGURE_FORMATS),
    script:
        "../scripts/how_many_nodes.py"


rule perfmodel:
    """Scaling model: fit the micro-benchmarks and host runs, predict the held-out
    emulated-network runs, project with a bootstrap band (dlscale.perfmodel); and the
    published record (published/*.yaml) replayed through the projection's code: predicted
    against measured efficiency of every system, the median and worst error per
    communication pattern (dlscale.perfmodel.replay; the network-level model alone). One
    job, not two: the replay is seconds of a process the model's job already has."""
    input:
        runs="results/runs.parquet",
        iterations="results/iterations.parquet",
        commbench=commbench_files(),
        pooled_runs=jobs.pooled_study_files(STUDY, "runs"),
        pooled_iterations=jobs.pooled_study_files(STUDY, "iterations"),
        systems=PUBLISHED_SYSTEMS,
    output:
        **{
            name: report(
                f"results/perfmodel/{name}.csv",
                caption=f"../report/{PERFMODEL_CAPTIONS[name]}",
                category=CATEGORY_PERFMODEL,
            )
            for name in PERFMODEL_REPORTED_TABLES
        },
        **{name: f"results/perfmodel/{name}.csv" for name in PERFMODEL_DATA_TABLES},
        **{
            f"{name}_{fmt}": (
                report(
                    f"results/figures/{name}.{fmt}",
                    caption=f"../report/{PERFMODEL_FIGURE_CAPTIONS[name]}",
                    category=CATEGORY_PERFMODEL,
                )
                if fmt == "svg"
                else f"results/figures/{name}.{fmt}"
            )
            for name in PERFMODEL_ALL_FIGURES
            for fmt in FIGURE_FORMATS
        },
        **{
            name: report(
                f"results/perfmodel/{name}.csv",
                caption=f"../report/{REPLAY_CAPTION}",
                category=CATEGORY_PERFMODEL,
                subcategory=SUBCATEGORY_REPLAY,
            )
            for name in REPLAY_TABLES
        },
        **{
            f"replay_figure_{fmt}": (
                report(
                    f"results/figures/{REPLAY_FIGURE}.{fmt}",
                    caption=f"../report/{REPLAY_CAPTION}",
                    category=CATEGORY_PERFMODEL,
                    subcategory=SUBCATEGORY_REPLAY,
                )
                if fmt == "svg"
                else f"results/figures/{REPLAY_FIGURE}.{fmt}"
            )
            for fmt in FIGURE_FORMATS
        },
    log:
        "results/logs/perfmodel.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        network=STUDY["projection"]["network"],
        max_nodes=STUDY["projection"]["max_nodes"],
        ranks_per_node=STUDY["ranks_per_node"],
        num_ps=STUDY["tensorflow"]["num_ps"],
        bootstrap=STUDY["projection"]["bootstrap"],
        seed=STUDY["projection"]["seed"],
        pool_studies=STUDY["projection"]["pool_studies"],
        latency_us=jobs.projection_preset(STUDY, "latency_us"),
        bandwidth_gbit=jobs.projection_preset(STUDY, "bandwidth_gbit"),
        source=jobs.projection_preset(STUDY, "source"),
        systems=len(PUBLISHED_SYSTEMS),
        band_note=TH_EXPRESS2.band_note(),
        basis=TH_EXPRESS2.basis,
        th_express2_source=TH_EXPRESS2.source,
    script:
        "../scripts/perfmodel.py"


rule compare:
    """This study (NEW) against the study of config key compare_with (BASE): each matched
    cell's ratios with intervals, the verdicts that changed, what differs (dlscale.compare.comparison).
    """
    input:
        runs="results/runs.csv",
        findings="results/findings.csv",
        claims="results/claims.csv",
    output:
        **{
            name: (
                report(
                    f"{COMPARE_DIR}/{filename}",
                    caption="../report/compare.rst",
                    category=CATEGORY_COMPARE,
                )
                if name in COMPARE_REPORTED
                else f"{COMPARE_DIR}/{filename}"
            )
            for name, filename in COMPARE_FILES.items()
        },
    log:
        "results/logs/compare.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        base=STUDY["compare_with"] or "",
    script:
        "../scripts/compare.py"


checkpoint repeat_check:
    """repeats: auto: is a cell's interval tight enough after its first {done} repeats?"""
    input:
        events=repeat_check_input,
    output:
        runid.cell_pattern("results/repeats", "after{done}.json"),
    log:
        runid.cell_pattern("results/logs/repeats", "after{done}.log"),
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        target=STUDY["repeats_auto"]["target_rel_halfwidth"],
        cap=STUDY["repeats_auto"]["cap"],
    script:
        "../scripts/repeat_check.py"
