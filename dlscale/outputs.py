"""The study's figures and tables by name: what the rules declare and the report groups.

One list, read by the rules (outputs and report categories) and by dlscale.figures (what
it can draw); standard library only, since Snakemake imports it when it builds the DAG.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    }
)
FIGURES: tuple[str, ...] = tuple(FIGURE_CATEGORIES)

#: The scaling model's tables and figures (rule perfmodel), and their report captions.
PERFMODEL_TABLES: tuple[str, ...] = (
    "calibration", "validation", "validation_summary", "projection", "efficiency50",
)  # fmt: skip
PERFMODEL_FIGURES: tuple[str, ...] = ("projection", "validation")
PERFMODEL_CAPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "calibration": "calibration.rst",
        "validation": "validation.rst",
        "validation_summary": "validation.rst",
        "projection": "projection.rst",
        "efficiency50": "projection.rst",
    }
)

#: Report categories, numbered in the order the report shows them (each number once).
CATEGORY_FINDINGS = "1. Findings"
CATEGORY_RUNS = "5. All runs"
CATEGORY_PERFMODEL = "6. Scaling model"
CATEGORY_CAFFE_LAYERS = "7. Caffe per-layer time"
#: The tuning stage's table (rules/tune.smk) and the host's matmul peak (roofline).
CATEGORY_TUNING = "8. Tuning: each framework at its best"
