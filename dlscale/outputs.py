"""The study's figures and tables by name: what the rules declare and the report groups.

One list, read by the rules (outputs, report captions and categories, rule all's targets),
by the aggregation and the archive (the tables), and by dlscale.figures.charts (what it can
draw); standard library only, since Snakemake imports
it when it builds the DAG.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

#: Every figure is written in each of these formats (svg goes into the report).
FIGURE_FORMATS: tuple[str, ...] = ("html", "svg", "png")

#: The study's figures (rule figures) -> report category.
FIGURE_CATEGORIES: Mapping[str, str] = MappingProxyType(
    {
        "throughput": "2. Computing speed and scaling",
        "speedup": "2. Computing speed and scaling",
        "breakdown": "3. Communication",
        "loss": "4. Training",
        "quality": "4. Training",
        "efficiencies": "2. Computing speed and scaling",
    }
)
FIGURES: tuple[str, ...] = tuple(FIGURE_CATEGORIES)

#: The scaling model's tables the report shows (rule perfmodel; targets of rule all), and the
#: figures of it rule all asks for (drawing them draws the others).
PERFMODEL_REPORTED_TABLES: tuple[str, ...] = (
    "calibration", "validation", "validation_summary", "projection", "efficiency50",
)  # fmt: skip
PERFMODEL_TARGET_FIGURES: tuple[str, ...] = ("projection", "validation")
PERFMODEL_CAPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "calibration": "calibration.rst",
        "validation": "validation.rst",
        "validation_summary": "validation.rst",
        "projection": "projection.rst",
        "efficiency50": "projection.rst",
    }
)
#: The scaling model's tables the report leaves out (rule perfmodel writes them too).
PERFMODEL_DATA_TABLES: tuple[str, ...] = (
    "commbench", "commbench_fits", "commbench_checks", "latency_sensitivity", "host_model",
)  # fmt: skip
#: Every figure rule perfmodel draws (dlscale.perfmodel.figures), with its report caption
#: (PERFMODEL_TARGET_FIGURES first).
PERFMODEL_FIGURE_CAPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "projection": "projection.rst",
        "validation": "validation.rst",
        "latency_sensitivity": "projection.rst",
        "commbench": "calibration.rst",
    }
)
PERFMODEL_ALL_FIGURES: tuple[str, ...] = tuple(PERFMODEL_FIGURE_CAPTIONS)
#: Every table rule perfmodel writes (dlscale.perfmodel.pipeline), reported ones first.
PERFMODEL_ALL_TABLES: tuple[str, ...] = (*PERFMODEL_REPORTED_TABLES, *PERFMODEL_DATA_TABLES)

#: The published record replayed through the projection (rule perfmodel, dlscale.perfmodel.replay):
#: its tables and figure, in the report's section "Against the published record" (a
#: subcategory of CATEGORY_PERFMODEL), from the system files in PUBLISHED_DIR.
PUBLISHED_DIR = "published"
REPLAY_TABLES: tuple[str, ...] = ("replay", "replay_summary")
REPLAY_FIGURE = "replay"
REPLAY_CAPTION = "replay.rst"
SUBCATEGORY_REPLAY = "Against the published record"

#: The tuning stage's table (rule tune_report).
TUNING_TABLE = "results/tune/tuning.csv"

#: Report categories, numbered in the order the report shows them (each number once).
CATEGORY_FINDINGS = "1. Findings"
#: Which framework, on how many nodes, trains the model to its target fastest and cheapest
#: (dlscale.analysis.nodes_to_target; the projection: dlscale.perfmodel.nodes_projection):
#: a finding of its own, shown right after the findings (the report sorts by name).
CATEGORY_NODES = "1.1 How many nodes"
#: Where the study's wall time goes, per framework (dlscale.analysis.wallsplit).
CATEGORY_WALL = "1.2 Where the time goes"
CATEGORY_RUNS = "5. All runs"
CATEGORY_PERFMODEL = "6. Scaling model"
CATEGORY_CAFFE_LAYERS = "7. Caffe per-layer time"
#: The tuning stage's table (rules/tune.smk) and the host's matmul peak (roofline).
CATEGORY_TUNING = "8. Tuning: each framework at its best"
#: The comparison with another study (config key compare_with; dlscale.compare.comparison).
CATEGORY_COMPARE = "9. Compared with another study"

#: The file at the top of a study's archive that lists every other (dlscale.archive.artifact):
#: what marks a folder as an unpacked archive, for verify, compare and the config check.
ARCHIVE_MANIFEST = "MANIFEST.json"

#: The aggregation's tables (rule aggregate's outputs, dlscale.analysis.aggregate's
#: ``OUTPUT_FILES``, what the archive hands over and verify recomputes): output name -> file
#: name under results/, in the order the aggregation writes them.
AGGREGATE_FILES: Mapping[str, str] = MappingProxyType(
    {
        "runs_csv": "runs.csv",
        "runs_parquet": "runs.parquet",
        "iterations_parquet": "iterations.parquet",
        "cells_csv": "cells.csv",
        "findings_csv": "findings.csv",
        "claims_csv": "claims.csv",
        "evals_csv": "evals.csv",
        "time_to_target_csv": "time_to_target.csv",
        "target_runs_csv": "target_runs.csv",
        "steps_to_target_csv": "steps_to_target.csv",
        "batch_fit_csv": "batch_fit.csv",
        "nodes_to_target_csv": "nodes_to_target.csv",
        "wall_split_csv": "wall_split.csv",
    }
)
#: The aggregation's tables the report shows: output name -> (caption under report/, category).
AGGREGATE_REPORTED: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "runs_csv": ("runs.rst", CATEGORY_RUNS),
        "findings_csv": ("findings.rst", CATEGORY_FINDINGS),
        "cells_csv": ("cells.rst", CATEGORY_FINDINGS),
        "claims_csv": ("claims.rst", CATEGORY_FINDINGS),
        "time_to_target_csv": ("time_to_target.rst", CATEGORY_FINDINGS),
        "steps_to_target_csv": ("steps_to_target.rst", CATEGORY_NODES),
        "batch_fit_csv": ("batch_fit.rst", CATEGORY_NODES),
        "nodes_to_target_csv": ("nodes_to_target.rst", CATEGORY_NODES),
        "wall_split_csv": ("wall_split.rst", CATEGORY_WALL),
    }
)

#: The comparison's files (python -m dlscale.compare, rule compare): output name -> file name.
COMPARE_DIR = "results/compare"
COMPARE_FILES: Mapping[str, str] = MappingProxyType(
    {
        "comparison": "comparison.csv",
        "verdict_changes": "verdict_changes.csv",
        "differences": "differences.csv",
        "unmatched": "unmatched.csv",
        "page": "comparison.html",
        **{f"figure_{fmt}": f"ratios.{fmt}" for fmt in FIGURE_FORMATS},
    }
)


def figure_paths(names: Iterable[str]) -> list[str]:
    """``results/figures/<name>.<format>`` of each figure in ``names``, in every format."""
    return [f"results/figures/{name}.{fmt}" for name in names for fmt in FIGURE_FORMATS]


def figure_files() -> list[str]:
    """The study's figures (rule figures), every format."""
    return figure_paths(FIGURES)


def perfmodel_files() -> list[str]:
    """The scaling model's tables and rule all's figures of it (targets of rule all)."""
    return [f"results/perfmodel/{name}.csv" for name in PERFMODEL_REPORTED_TABLES] + figure_paths(
        PERFMODEL_TARGET_FIGURES
    )


#: How many nodes to a trained model beyond the measured node counts (rule how_many_nodes):
#: the projection's tables under results/perfmodel/ -> their captions, and the two figures.
NODES_TABLES: Mapping[str, str] = MappingProxyType(
    {
        "time_to_target_projection": "time_to_target_projection.rst",
        "time_to_target_summary": "time_to_target_projection.rst",
    }
)
NODES_FIGURE_CAPTIONS: Mapping[str, str] = MappingProxyType(
    {"steps_to_target": "steps_to_target_figure.rst", "nodes_to_target": "nodes_to_target_figure.rst"}
)


def nodes_files() -> list[str]:
    """The projection of time to target and the two figures (targets of rule all)."""
    return [f"results/perfmodel/{name}.csv" for name in NODES_TABLES] + figure_paths(NODES_FIGURE_CAPTIONS)


def replay_files() -> list[str]:
    """The replay's tables and figure (rule perfmodel; targets of rule all)."""
    return [f"results/perfmodel/{name}.csv" for name in REPLAY_TABLES] + figure_paths([REPLAY_FIGURE])


def caffe_layer_files(models: Iterable[str]) -> list[str]:
    """The per-layer time figure of each model inside Caffe (rule caffe_layer_figure)."""
    return figure_paths(f"caffe_layers_{model}" for model in models)
