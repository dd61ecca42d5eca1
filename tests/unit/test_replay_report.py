"""The report's section "Against the published record" (issue 31, items 5 and 6): the summary
per communication pattern from a small replay frame, the replay's figure written from a tiny
frame, the outputs and caption the rule declares, the TH Express-2 preset's band, and the
replay rule in the workflow's DAG (a dry run)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.paths import REPO
from helpers.workflow import planned_jobs

from dlscale import outputs
from dlscale.networks import PRESETS
from dlscale.perfmodel import figures, replay


def frame(rows: list[tuple[str, str, int, int, float]]) -> pd.DataFrame:
    """A replay table of (name, pattern, nodes, anchor, error) rows, the other columns filled."""
    table = pd.DataFrame(rows, columns=["name", "pattern", "nodes", "anchor", "error"])
    table["measured_efficiency"] = 1.0 - 0.05 * np.log2(table["nodes"] / table["anchor"])
    table["predicted_efficiency"] = table["measured_efficiency"] + table["error"]
    for column in replay.REPLAY_COLUMNS:
        if column not in table:
            table[column] = np.nan
    return table[list(replay.REPLAY_COLUMNS)]


SMALL = frame(
    [
        ("ring-a", "ring", 1, 1, 0.0), ("ring-a", "ring", 2, 1, 0.02), ("ring-a", "ring", 4, 1, -0.10),
        ("ring-b", "ring", 2, 2, 0.0), ("ring-b", "ring", 8, 2, 0.04),
        ("ps-a", "ps", 1, 1, 0.0), ("ps-a", "ps", 2, 1, 0.01), ("ps-a", "ps", 4, 1, 0.03),
        ("spark", "bigdl", 16, 16, 0.0), ("spark", "bigdl", 32, 16, 0.2),
    ]
)  # fmt: skip


def test_the_summary_per_pattern_leaves_out_the_anchors_and_names_the_worst() -> None:
    summary = replay.summary(SMALL).set_index("pattern")
    assert list(summary.index) == ["bigdl", "ps", "ring"]
    assert summary.loc["ring", "communication"] == "ring all-reduce"
    assert summary.loc["ps", "communication"] == "parameter server"
    assert summary.loc["bigdl", "communication"] == "BigDL shuffle"
    assert summary.loc["ring", "systems"] == 2 and summary.loc["ring", "points"] == 3  # anchors out
    assert summary.loc["ring", "median_abs_error"] == pytest.approx(0.04)
    assert summary.loc["ring", "max_abs_error"] == pytest.approx(0.10)
    assert summary.loc["ring", "worst"] == "ring-a at 4"
    assert summary.loc["ps", "median_abs_error"] == pytest.approx(0.02)
    assert bool(summary.loc["ps", "meets"]) and bool(summary.loc["ring", "meets"])  # 0.04 / 0.10
    assert not bool(summary.loc["bigdl", "meets"])  # 0.2 > 0.15
    assert list(replay.summary(SMALL.iloc[0:0]).columns) == list(replay.SUMMARY_COLUMNS)


def test_the_replay_figure_is_written_in_every_format(tmp_path: Path) -> None:
    banded = SMALL.assign(
        efficiency_lower=SMALL["predicted_efficiency"] - 0.05,
        efficiency_upper=SMALL["predicted_efficiency"] + 0.05,
    )
    out = {fmt: str(tmp_path / f"replay.{fmt}") for fmt in outputs.FIGURE_FORMATS}
    figures.make_replay_figure(out, banded, replay.summary(banded), "a note")
    assert b"<svg" in (tmp_path / "replay.svg").read_bytes()[:2000]
    assert (tmp_path / "replay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (tmp_path / "replay.html").read_text()
    assert "vega" in html and "ring all-reduce" in html and "a note" in html
    spec = figures.replay_chart(SMALL, replay.summary(SMALL)).to_dict()
    assert any("ring all-reduce" in line for line in spec["title"]["text"])
    empty = figures.replay_chart(SMALL.iloc[0:0]).to_dict()
    assert "no system file" in str(empty["title"])
    with pytest.raises(ValueError):
        figures.make_replay_figure({"svg": str(tmp_path / "replay.png")}, SMALL)


def test_the_rule_s_outputs_and_caption_are_in_the_one_list() -> None:
    files = outputs.replay_files()
    assert files[:2] == ["results/perfmodel/replay.csv", "results/perfmodel/replay_summary.csv"]
    assert files[2:] == outputs.figure_paths([outputs.REPLAY_FIGURE])
    assert outputs.SUBCATEGORY_REPLAY == "Against the published record"
    caption = (REPO / "report" / outputs.REPLAY_CAPTION).read_text()
    assert "snakemake.params.basis" in caption and "TH Express-2" in caption
    assert (REPO / outputs.PUBLISHED_DIR).is_dir()


def test_th_express2_is_a_widened_band_around_its_unchanged_point() -> None:
    th = PRESETS["th-express2"]
    assert (th.latency_s, th.bandwidth_Bps) == (1.6e-6, 12e9)  # the projection's numbers stay
    assert th.basis == "widened band"
    (lat_lo, lat_hi), (bw_lo, bw_hi) = th.latency_band_s, th.bandwidth_band_Bps
    assert lat_lo <= 1.0e-6 and 1.57e-6 <= lat_hi and lat_lo <= th.latency_s <= lat_hi  # TH-2A, TH-2
    assert bw_lo <= 6.34e9 and 14e9 <= bw_hi and bw_lo <= th.bandwidth_Bps <= bw_hi
    assert "widened band" in th.band_note() and "1-1.6 us" in th.band_note()
    assert "Dongarra" in th.source and "approximate" not in th.source
    for preset in PRESETS.values():
        if preset.name != "th-express2":
            assert preset.basis == "typical" and preset.latency_band_s is None
            assert preset.band_note().endswith("(typical figures)")
    assert math.isfinite(th.bandwidth_gbit)


def test_the_replay_is_in_the_dag(tmp_path: Path) -> None:
    """A dry run of the default target plans the replay, in the scaling model's job (about
    3 s: no job runs)."""
    (tmp_path / "study.yaml").write_text("frameworks: [torch]\nmodels: [lenet]\nnodes: [1]\nrepeats: 1\n")
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
        str(tmp_path), "--configfile", str(tmp_path / "study.yaml"), "--cores", "1", "--dry-run",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs.get("perfmodel") == 1 and "replay" not in jobs, jobs
    for path in outputs.replay_files():
        assert path in proc.stdout
