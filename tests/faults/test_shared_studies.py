"""One row of the fault table per case of a study handed between sites that is not an
archive (issue 33, item 8; the archive classes are tests/faults/test_verify_hostile.py's
rows, the events' in tests/faults/test_hostile_table.py). Each case is tested in full
elsewhere (tests/unit/test_escaping.py, test_clear_errors.py, test_perfmodel_headlines.py,
test_config_scalars.py, tests/slurm/test_slurm_teardown.py); here a representative of each
goes through the real entry point again and the class becomes one row."""

from __future__ import annotations

import errno
import math
import os
from pathlib import Path
from unittest import mock

import altair as alt
import numpy as np
import pandas as pd
import pytest
from helpers.faults import judge
from helpers.markup import BREAKOUT, HOSTILE, IMG, SVG, live_markup

from dlscale import catalog
from dlscale import perfmodel as pm
from dlscale.base import atomic
from dlscale.catalog import CONFIG_SCHEMA
from dlscale.compare import page as compare_page
from dlscale.figures import charts as figures
from dlscale.study import preflight
from dlscale.study.matrix import expand_runs, run_spec
from dlscale.study.validation import load_schema, validate_config

pytestmark = pytest.mark.faults


def test_markup_in_run_strings_is_shown_as_text(tmp_path: Path) -> None:
    shown = pd.DataFrame({"hosts": HOSTILE["hosts"], "versions": [SVG, BREAKOUT], "throughput": [1.0, 2.0]})
    chart = (
        alt.Chart(shown, title=IMG).mark_point().encode(x="throughput:Q", y="hosts:N", tooltip=["versions"])
    )

    def drawn(suffix: str):
        def run() -> str | None:
            target = tmp_path / f"strings{suffix}"
            figures.save_chart(chart, target)
            text = target.read_text(encoding="utf-8")
            if "onerror=alert(1)" not in text:
                return "the strings are not in the figure"
            return "; ".join(live_markup(text)) or None

        return run

    def compared() -> str | None:
        page = compare_page.table_html(shown)
        return "; ".join(live_markup(page)) or (None if "onerror=alert(1)" in page else "strings not shown")

    judge(
        "markup in run strings",
        "figures",
        {"a figure's HTML": drawn(".html"), "a figure's SVG": drawn(".svg"), "the comparison page": compared},
        handled="shown as text",
    )


def test_a_full_disk_while_writing_names_the_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    def full(code: int):
        def run() -> str | None:
            target = tmp_path / f"runs-{code}.csv"
            target.write_text("old")

            def fsync(fd: int) -> None:
                raise OSError(code, os.strerror(code))

            with mock.patch.object(atomic.os, "fsync", fsync):
                try:
                    atomic.write_text(target, "new")
                except atomic.WriteError as err:
                    if not str(err).startswith(f"cannot write {target}: the file system is full"):
                        return f"unclear: {err}"
                else:
                    return "written on a full disk"
            left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
            return None if target.read_text() == "old" and not left else f"old table lost or {left} left"

        return run

    judge(
        "full disk or quota while writing",
        "analysis",
        {"ENOSPC": full(errno.ENOSPC), "EDQUOT": full(errno.EDQUOT)},
        handled="failed cleanly",
    )


def test_a_stale_snakemake_lock_is_explained(tmp_path: Path) -> None:
    def stale() -> str | None:
        locks = tmp_path / ".snakemake" / "locks"
        locks.mkdir(parents=True)
        (locks / "0.output.lock").write_text("results/runs.csv\n")
        advice = preflight.stale_lock_advice(
            tmp_path, ["snakemake", "--profile", "profiles/local"], running=[]
        )
        if advice is None:
            return "not named"
        unlock = advice.splitlines()[1].strip()
        return None if unlock == "snakemake --profile profiles/local --unlock" else f"unclear: {advice}"

    judge(
        "stale Snakemake lock after a kill", "workflow", {"lock of a killed run": stale}, handled="explained"
    )


def test_a_curve_that_dips_and_recovers_keeps_an_honest_headline() -> None:
    nodes = np.arange(1, 10, dtype="float64")

    def headline(curve: list[float], expected: float, ranges: tuple[tuple[int, int], ...]):
        def run() -> str | None:
            values = np.array(curve)
            found = (pm.stays_below_half(nodes, values), pm.below_half_ranges(nodes, values))
            return None if found == (expected, ranges) else f"headline {found}, expected {(expected, ranges)}"

        return run

    judge(
        "efficiency curve that dips and recovers",
        "perfmodel",
        {
            "dips twice, then stays below": headline(
                [1.0, 0.69, 0.45, 0.61, 0.55, 0.49, 0.52, 0.40, 0.30], 8.0, ((3, 3), (6, 6), (8, 9))
            ),
            "dips, then recovers to the end": headline(
                [1.0, 0.69, 0.45, 0.61, 0.55, 0.49, 0.52, 0.51, 0.50], math.inf, ((3, 3), (6, 6))
            ),
        },
        handled="both crossings named",
    )


def test_one_value_for_every_model_is_the_map_written_out() -> None:
    schema = load_schema(CONFIG_SCHEMA)

    def same(key: str, value: float):
        def run() -> str | None:
            base = {"models": ["lenet", "autoencoder"], "nodes": [1, 2]}
            one = validate_config({**base, key: value}, schema)
            spelled = validate_config({**base, key: dict.fromkeys(catalog.MODEL_NAMES, value)}, schema)
            hashes = [[run_spec(study, r).sha256 for r in expand_runs(study)] for study in (one, spelled)]
            return (
                None if one == spelled and hashes[0] == hashes[1] else f"{key}: {value} differs from its map"
            )

        return run

    judge(
        "one value for every model",
        "config",
        {"iterations: 30": same("iterations", 30), "learning_rate: 0.05": same("learning_rate", 0.05)},
        handled="accepted as the map",
    )
