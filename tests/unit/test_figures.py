"""dlscale.figures.charts: every figure in every format, offline, from small tables written
by the aggregation and read back from disk (dlscale.figures.study)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dlscale.analysis import aggregate
from dlscale.events import write_atomic
from dlscale.figures import charts
from dlscale.figures.study import StudyTables, read_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REMOTE_SCRIPT = re.compile(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", re.IGNORECASE)


def write_run(
    root: Path,
    framework: str,
    model: str,
    nodes: int,
    step: float,
    *,
    compute: float | None = None,
    repeat: int = 0,
    status: str = "ok",
    iterations: int = 5,
    input_s: float | None = None,
    contention: dict[str, Any] | None = None,
) -> Path:
    """A run of ``nodes`` single-rank nodes with steady steps and a falling loss."""
    run_id = f"{framework}/{model}/n{nodes}x1/b32/r{repeat}"
    events: list[dict[str, Any]] = [
        {
            "event": "run_start",
            "run_id": run_id,
            "framework": framework,
            "model": model,
            "dataset": "mnist",
            "nodes": nodes,
            "ranks_per_node": 1,
            "batch": 32,
            "global_batch": 32 * nodes,
            "repeat": repeat,
            "scaling": "weak",
            "world_size": nodes,
            "hosts": [f"cn{r}" for r in range(nodes)],
            "threads_per_rank": 2,
            "versions": {},
            "config_sha256": "x",
            "git_sha": "y",
            "time": 0.0,
        }
    ]
    for index in range(iterations):
        for rank in range(nodes):
            events.append(
                {
                    "event": "iteration",
                    "rank": rank,
                    "iteration": index,
                    "samples": 32,
                    "step_s": step,
                    "compute_s": compute,
                    "comm_s": None if compute is None else step - compute,
                    "loss": 2.3 / (1 + index + repeat),
                    "warmup": index == 0,
                    "time": 2.0 + index,  # each step inside the run (0 to 9 s), after the one before
                    **({} if input_s is None else {"input_s": input_s}),
                }
            )
    reason = None if status == "ok" else "killed by the test"
    end: dict[str, Any] = {"event": "run_end", "status": status, "reason": reason, "time": 9.0}
    if contention is not None:
        end["contention"] = contention
    events.append(end)
    return write_atomic(root / run_id / "events.jsonl", events)


def outputs(root: Path) -> dict[str, dict[str, str]]:
    return {
        name: {fmt: str(root / f"{name}.{fmt}") for fmt in charts.FORMATS} for name in charts.STUDY_FIGURES
    }


def check_files(root: Path, out: dict[str, dict[str, str]]) -> dict[str, str]:
    """Assert the 12 files are whole and offline; return each figure's HTML text."""
    html = {}
    for name, paths in out.items():
        png = Path(paths["png"]).read_bytes()
        assert png.startswith(PNG_MAGIC), name
        assert len(png) > 1000, name
        svg = ET.parse(paths["svg"]).getroot()
        assert svg.tag.endswith("svg"), name
        text = Path(paths["html"]).read_text(encoding="utf-8")
        assert "vega" in text.lower(), name
        assert not REMOTE_SCRIPT.search(text), f"{name}.html loads a script from the network"
        assert "cdn.jsdelivr" not in text, name
        html[name] = text
    assert len(list(root.iterdir())) == 12  # no temporary files left behind
    return html


def on_disk(paths: list[Path], folder: Path) -> StudyTables:
    """The aggregation's tables of ``paths`` written into ``folder`` and read back, as the
    figures rule reads them."""
    written = aggregate.aggregate(paths)
    aggregate.write_outputs(written, {name: folder / file for name, file in aggregate.OUTPUT_FILES.items()})
    return read_results(folder)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> StudyTables:
    root = tmp_path_factory.mktemp("events")
    paths = []
    for repeat in range(2):
        paths += [
            write_run(root, "torch", "lenet", 1, 0.10, compute=0.10, repeat=repeat),
            write_run(root, "torch", "lenet", 2, 0.11, compute=0.10, repeat=repeat),
            write_run(root, "torch", "lenet", 4, 0.125, compute=0.10, repeat=repeat),
            write_run(root, "caffe", "lenet", 1, 0.08, repeat=repeat),  # no compute split
            write_run(root, "caffe", "lenet", 2, 0.1, repeat=repeat),
            write_run(root, "torch", "alexnet", 1, 1.0, compute=0.9, repeat=repeat),
            write_run(root, "torch", "alexnet", 2, 1.2, compute=0.9, repeat=repeat),
        ]
    paths.append(write_run(root, "caffe", "lenet", 4, 0.2, status="failed", iterations=3))
    return on_disk(paths, tmp_path_factory.mktemp("tables"))


def test_make_figures_writes_every_format(tmp_path: Path, study: StudyTables) -> None:
    out = outputs(tmp_path)
    charts.make_figures(study.runs, study.iterations, study.cells, out)
    html = check_files(tmp_path, out)
    # ok runs are drawn, the failed one is not (it is in the table instead)
    assert "torch/lenet/n4x1/b32/r1" in html["throughput"]
    assert "caffe/lenet/n4x1/b32/r0" not in html["throughput"]
    assert "caffe/lenet/n4x1/b32/r0" not in html["speedup"]
    assert "exposed communication" in html["breakdown"]
    assert "step (not split)" in html["breakdown"]


def test_make_figures_with_zero_ok_runs(tmp_path: Path) -> None:
    root = tmp_path / "events"
    paths = [write_run(root, "torch", "lenet", n, 0.1, status="failed") for n in (1, 2)]
    drawn = on_disk(paths, tmp_path / "tables")
    assert drawn.runs["status"].eq("failed").all()
    out = outputs(tmp_path / "figures")
    charts.make_figures(drawn.runs, drawn.iterations, drawn.cells, out)
    html = check_files(tmp_path / "figures", out)
    for name, text in html.items():
        assert "no successful runs" in text, name


def test_make_figures_with_no_runs_at_all(tmp_path: Path) -> None:
    drawn = on_disk([], tmp_path / "tables")
    out = outputs(tmp_path / "figures")
    charts.make_figures(drawn.runs, drawn.iterations, drawn.cells, out)
    check_files(tmp_path / "figures", out)


def test_breakdown_table_medians_and_unsplit_steps(study: StudyTables) -> None:
    runs = study.runs
    table = charts.breakdown_table(runs).set_index(["model", "framework", "nodes", "component"])
    assert table.loc[("lenet", "torch", 4, "compute"), "seconds"] == pytest.approx(0.10)
    assert table.loc[("lenet", "torch", 4, "exposed communication"), "seconds"] == pytest.approx(0.025)
    assert table.loc[("lenet", "caffe", 2, "step (not split)"), "seconds"] == pytest.approx(0.1)
    assert ("lenet", "caffe", 2, "compute") not in table.index
    assert ("lenet", "caffe", 4, "step (not split)") not in table.index  # failed run left out
    assert table.loc[("alexnet", "torch", 2, "compute"), "runs"] == 2
    assert (
        table.reset_index()[["model", "series", "nodes", "component"]].notna().all().all()
    )  # none from nowhere


def test_breakdown_shows_input_wait_only_where_recorded(tmp_path: Path, study: StudyTables) -> None:
    runs = study.runs  # no run recorded input_s: all NaN, no input part, figure as before
    assert runs["input_s"].isna().all()
    assert "input wait" not in set(charts.breakdown_table(runs)["component"])
    assert "input wait on top" not in charts.breakdown_chart(runs).to_json()  # title as before

    root = tmp_path / "events"
    paths = [
        write_run(root, "torch", "lenet", 1, 0.10, compute=0.08, input_s=0.03),
        write_run(root, "tensorflow", "lenet", 1, 0.12, compute=0.12, input_s=0.005),
        write_run(root, "caffe", "lenet", 1, 0.08),  # no input_s: no input part
    ]
    drawn = on_disk(paths, tmp_path / "tables")
    table = charts.breakdown_table(drawn.runs).set_index(["framework", "component"])
    assert table.loc[("torch", "input wait"), "seconds"] == pytest.approx(0.03)
    order = table["order"]
    assert order[("torch", "input wait")] > order[("torch", "exposed communication")]  # on top
    assert table.loc[("tensorflow", "input wait"), "seconds"] == pytest.approx(0.005)
    assert ("caffe", "input wait") not in table.index
    out = outputs(tmp_path / "figures")
    charts.make_figures(drawn.runs, drawn.iterations, drawn.cells, out)
    html = check_files(tmp_path / "figures", out)
    assert "input wait" in html["breakdown"] and "step (not split)" in html["breakdown"]


def test_loss_table_is_rank0_median_over_repeats(study: StudyTables) -> None:
    table = charts.loss_table(study.runs, study.iterations).set_index(
        ["model", "framework", "nodes", "iteration"]
    )
    # repeats 0 and 1 have loss 2.3/(1+i) and 2.3/(2+i): the median is their mean
    want = (2.3 / 1 + 2.3 / 2) / 2
    assert table.loc[("lenet", "torch", 2, 0), "loss"] == pytest.approx(want)  # warm-up kept
    assert table.loc[("lenet", "torch", 2, 0), "repeats"] == 2
    assert ("lenet", "caffe", 4, 0) not in table.index


def test_loss_table_thins_long_curves() -> None:
    n = 3 * charts.MAX_LOSS_POINTS + 7
    runs = pd.DataFrame(
        {
            "run_id": ["r"],
            "model": ["lenet"],
            "framework": ["torch"],
            "nodes": [1],
            "ranks_per_node": [1],
            "batch_per_rank": [32],
            "global_batch": [32],
            "scaling": ["weak"],
            "status": ["ok"],
            "throughput": [1.0],
            "baseline_nodes": [1.0],
        }
    )
    iterations = pd.DataFrame(
        {"run_id": "r", "model": "lenet", "framework": "torch", "nodes": 1, "rank": 0, "iteration": range(n)}
    ).assign(loss=lambda d: 1.0 / (1 + d["iteration"]))
    table = charts.loss_table(runs, iterations)
    assert len(table) <= charts.MAX_LOSS_POINTS + 1
    assert table["iteration"].iloc[0] == 0
    assert table["iteration"].iloc[-1] == n - 1  # the end of the curve is kept


def test_bad_outputs_are_refused(tmp_path: Path, study: StudyTables) -> None:
    runs, iterations, cells = study.runs, study.iterations, study.cells
    with pytest.raises(KeyError, match="thruput"):
        charts.make_figures(runs, iterations, cells, {"thruput": {"png": str(tmp_path / "t.png")}})
    with pytest.raises(ValueError, match=r"does not end in \.svg"):
        charts.make_figures(runs, iterations, cells, {"loss": {"svg": str(tmp_path / "loss.png")}})


def chart_rows(chart: Any) -> list[dict[str, Any]]:
    """The rows of a (single-dataset) chart's inline data."""
    spec = chart.to_dict()
    (rows,) = spec["datasets"].values()
    return rows


def test_scaling_figures_draw_intervals_and_mark_flagged_points(tmp_path: Path) -> None:
    # torch: 1 node 320/s x (1/0.98, 1, 1/1.02), 2 nodes 800/s likewise: efficiency 1.25,
    # range ratio [2.5 x 0.98/1.02, 2.5 x 1.02/0.98] / 2 = [1.20, 1.30]: superlinear.
    # caffe: efficiency 0.8, not flagged; one extra 1-node run ran beside other work.
    root = tmp_path / "events"
    paths = []
    for repeat, f in enumerate((0.98, 1.0, 1.02)):
        paths += [
            write_run(root, "torch", "lenet", 1, 0.1 * f, compute=0.1 * f, repeat=repeat),
            write_run(root, "torch", "lenet", 2, 0.08 * f, compute=0.07 * f, repeat=repeat),
            write_run(root, "caffe", "lenet", 1, 0.1 * f, compute=0.1 * f, repeat=repeat),
            write_run(root, "caffe", "lenet", 2, 0.125 * f, compute=0.1 * f, repeat=repeat),
        ]
    busy = {"other_busy_share": 0.6, "steal_share": 0.0, "contended": True}
    paths.append(write_run(root, "caffe", "lenet", 1, 0.3, compute=0.3, repeat=3, contention=busy))
    drawn = on_disk(paths, tmp_path / "tables")
    runs = drawn.runs

    rows = chart_rows(charts.speedup_chart(runs, drawn.cells))
    cells = {row["cell"]: row for row in rows if row["kind"] == "cell"}
    torch = cells["torch/lenet/n2x1/b32"]
    assert torch["value"] == pytest.approx(2.5)
    assert (torch["low"], torch["high"]) == pytest.approx((2.5 * 0.98 / 1.02, 2.5 * 1.02 / 0.98))
    assert torch["marker"] == "flagged" and torch["flag"].startswith("superlinear: efficiency 1.25")
    assert torch["interval"] == "range ratio (low-n)" and torch["repeats"] == 3
    caffe = cells["caffe/lenet/n2x1/b32"]
    assert caffe["marker"] == "ok" and caffe["flag"] == ""
    assert caffe["value"] == pytest.approx(1.6)  # the contended 1-node run is not in the baseline

    rows = chart_rows(charts.throughput_chart(runs, drawn.cells))
    cells = {row["cell"]: row for row in rows if row["kind"] == "cell"}
    base = cells["caffe/lenet/n1x1/b32"]
    assert (base["value"], base["low"], base["high"]) == pytest.approx((320, 320 / 1.02, 320 / 0.98))
    assert base["note"] == "1 contended repeat(s) left out; low-n: 3 repeat(s)"
    busy_run = next(row for row in rows if row["run_id"] == "caffe/lenet/n1x1/b32/r3")
    assert busy_run["marker"] == "flagged" and busy_run["flag"].startswith("contended")

    spec = json.dumps(charts.speedup_chart(runs, drawn.cells).to_dict())
    assert '"rule"' in spec and '"triangle-up"' in spec  # interval bars, flagged shape
    out = outputs(tmp_path / "figures")
    charts.make_figures(runs, drawn.iterations, drawn.cells, out)
    html = check_files(tmp_path / "figures", out)
    assert "superlinear" in html["speedup"] and "contended" in html["throughput"]
