"""Held-out quality in the tables and the verdicts: eval events checked against their run,
final quality and "learned" per run, time to a target quality, and the fastest-to-target
finding (a winner only when intervals separate; never a framework that did not converge or
did not learn). Hand-written events files: no framework needed."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers.events import run_with_evals
from helpers.figures import described, drawn_symbols

from dlscale import quality
from dlscale.analysis import aggregate, convergence, tables
from dlscale.analysis.evals import Target, parse_target
from dlscale.events import EventError
from dlscale.figures.quality import make_quality_figures

# --- eval events against their run ----------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rank": 1}, "only rank 0 evaluates"),
        ({"metric": "mse"}, "is not one lenet is evaluated with"),
        ({"value": 1.5}, "above 1"),
        ({"iteration": 99}, "the run reported 6"),
        (
            {"heldout": "mnist", "samples": 9000},
            "9000 samples evaluated, but the mnist held-out split has 10000",
        ),
        ({"value": 0.90005}, r"top1=0.90005 is not a share of its 10000 samples"),
    ],
)
def test_an_eval_event_no_run_can_write_is_an_error_naming_the_line(
    tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    path = run_with_evals(tmp_path, evals=[(6, 0.9)], eval_overrides=overrides)
    with pytest.raises(EventError, match=message) as err:
        tables.load_events([path])
    assert str(err.value).startswith(f"{path}:")


def test_a_training_clock_that_runs_backwards_is_an_error(tmp_path: Path) -> None:
    path = run_with_evals(tmp_path, evals=[(3, 0.5), (6, 0.9)])
    lines = path.read_text().splitlines()
    lines[-2] = lines[-2].replace('"train_s":0.05', '"train_s":0.001')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(EventError, match="training clock ran backwards"):
        tables.load_events([path])


def test_evaluations_of_one_run_over_different_samples_are_an_error(tmp_path: Path) -> None:
    path = run_with_evals(tmp_path, evals=[(3, 0.5), (6, 0.9)])
    lines = path.read_text().splitlines()
    lines[-2] = lines[-2].replace('"samples":10000', '"samples":5000')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(EventError, match="5000 samples evaluated, but line .* evaluated 10000"):
        tables.load_events([path])


def test_a_second_evaluation_of_one_metric_at_one_iteration_is_an_error(tmp_path: Path) -> None:
    path = run_with_evals(tmp_path, evals=[(6, 0.9), (6, 0.91)])
    with pytest.raises(EventError, match="a second top1 evaluation at iteration 6"):
        tables.load_events([path])


def test_eval_events_are_not_stray_events_and_keep_eval_time_apart(tmp_path: Path) -> None:
    path = run_with_evals(tmp_path, evals=[(3, 0.5), (6, 0.9)], step_s=0.01)
    runs, _, evals = tables.load_study([path])
    row = runs.iloc[0]
    assert row["status"] == "ok"
    assert row["final_quality"] == 0.9 and row["quality_metric"] == "top1"
    assert row["evals"] == 2 and row["eval_s"] == 1.0  # 2 x 0.5 s, none of it in any step
    assert row["learned"] is True or row["learned"] == 1
    assert list(evals["value"]) == [0.5, 0.9]
    # The training clock of an evaluation counts timed steps only (warm-up excluded).
    assert evals["train_s"].tolist() == pytest.approx([0.02, 0.05])


# --- learned / not learned --------------------------------------------------------------------


def test_chance_level_quality_is_not_learned_and_never_crowned(tmp_path: Path) -> None:
    for repeat in range(3):
        # torch's steps are faster, but its model sits at chance (lr 0): it is never crowned.
        run_with_evals(tmp_path, framework="torch", repeat=repeat, step_s=0.005, evals=[(6, 0.098)])
        run_with_evals(
            tmp_path, framework="tensorflow", repeat=repeat, step_s=0.01 + 1e-4 * repeat, evals=[(6, 0.93)]
        )
    built = aggregate.aggregate(aggregate.find_events(tmp_path))
    runs = built.runs.set_index("framework")
    assert not runs.loc["torch", "learned"].any()
    cell = built.cells.set_index("framework").loc["torch"]
    assert cell["excluded"] and "did not learn" in cell["flag"]
    finding = built.findings.iloc[0]
    assert finding["fastest_compute"] == "tensorflow"
    assert "torch left out: did not learn" in finding["fastest_compute_note"]


def test_learned_is_clearly_better_than_a_model_that_learned_nothing() -> None:
    # An untrained autoencoder outputs the sigmoid's 0.5 everywhere: E[(x - 1/2)^2] on MNIST.
    mean, std = quality.PIXEL_STATS["mnist"]
    assert quality.chance_level("mse", "mnist") == pytest.approx(std**2 + (mean - 0.5) ** 2)
    assert quality.learned("mse", 0.163, "mnist") is True  # torch's AutoEncoder after 43 iterations
    assert quality.learned("mse", 0.22, "mnist") is False
    assert quality.learned("top1", 0.2, "mnist") is True and quality.learned("top1", 0.15, "mnist") is False
    assert quality.learned("top1", 0.001, "imagenet-synthetic") is None  # random labels: nothing to learn


# --- time to target -------------------------------------------------------------------------


def test_time_to_target_is_the_training_clock_of_the_first_evaluation_that_met_it(tmp_path: Path) -> None:
    target = {"metric": "top1", "value": 0.9}
    reached = run_with_evals(tmp_path, repeat=0, target=target, evals=[(2, 0.5), (4, 0.92), (6, 0.95)])
    missed = run_with_evals(tmp_path, repeat=1, target=target, evals=[(2, 0.5), (4, 0.6), (6, 0.7)])
    runs = tables.load_events([reached, missed])[0].set_index("repeat")
    assert runs.loc[0, "reached_target"] and runs.loc[0, "time_to_target_s"] == pytest.approx(0.03)
    assert runs.loc[0, "iterations_to_target"] == 4
    assert not runs.loc[1, "reached_target"] and math.isnan(runs.loc[1, "time_to_target_s"])


def test_a_run_that_stopped_at_its_target_is_ok_not_missing_iterations(tmp_path: Path) -> None:
    path = run_with_evals(tmp_path, iterations=4, target={"metric": "top1", "value": 0.9}, evals=[(4, 0.95)])
    # The spec asked for up to 20 timed iterations; it stopped after 4, at the target.
    lines = path.read_text().replace('"iterations":3', '"iterations":19').splitlines()
    path.write_text("\n".join(lines) + "\n")
    runs = tables.load_events([path])[0]
    assert runs.iloc[0]["status"] == "ok", runs.iloc[0]["reason"]


def test_the_target_option_on_copied_runs_gives_the_workflows_tables(tmp_path: Path) -> None:
    target = {"metric": "top1", "value": 0.9}
    with_spec, copied = tmp_path / "with-spec" / "runs", tmp_path / "copied" / "runs"
    for root, spec_target in ((with_spec, target), (copied, None)):
        for framework, step in (("torch", 0.01), ("tensorflow", 0.02)):
            for repeat in range(6):
                run_with_evals(
                    root, framework=framework, repeat=repeat, step_s=step * (1 + 0.01 * repeat),
                    target=spec_target, evals=[(3, 0.5), (6, 0.95)],
                )  # fmt: skip
    outputs = []
    for root, extra in ((with_spec, []), (copied, ["--target", "lenet=top1:0.9"])):
        out = root.parent / "tables"
        proc = subprocess.run(
            [sys.executable, "-m", "dlscale.analysis.aggregate", "runs", "--out", str(out), *extra],
            cwd=root.parent, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        outputs.append(out)
    for name in ("time_to_target.csv", "cells.csv", "findings.csv"):
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name
    made = pd.read_csv(outputs[0] / "time_to_target.csv")
    assert made.iloc[0]["fastest_to_target"] == "torch"
    runs = pd.read_csv(outputs[1] / "runs.csv")
    assert runs["time_to_target_s"].notna().all()


def test_a_bad_target_option_names_what_is_wrong() -> None:
    assert parse_target("lenet=top1:0.98") == ("lenet", Target("top1", 0.98))
    for text, message in (
        ("lenet:0.9", "expected MODEL=METRIC:VALUE"),
        ("lenet=mse:0.1", "lenet is evaluated with top1"),
        ("vgg=top1:0.9", "unknown model"),
        ("lenet=top1:1.5", "is not a top1 value"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_target(text)


# --- the fastest-to-target finding -------------------------------------------------------------


def _cells_with_targets(tmp_path: Path, times: dict[str, list[float | None]]) -> pd.DataFrame:
    """Cells of runs whose time to target (None: not converged) is given per framework."""
    for framework, per_repeat in times.items():
        for repeat, seconds in enumerate(per_repeat):
            step = 0.01
            done = 6 if seconds is None else 1 + round(seconds / step)
            run_with_evals(
                tmp_path, framework=framework, repeat=repeat, step_s=step, iterations=max(done, 6),
                target={"metric": "top1", "value": 0.9},
                evals=[(done, 0.5 if seconds is None else 0.95)],
            )  # fmt: skip
    return aggregate.aggregate(aggregate.find_events(tmp_path)).time_to_target


def test_separated_times_to_target_name_a_winner(tmp_path: Path) -> None:
    found = _cells_with_targets(
        tmp_path, {"torch": [0.05] * 6, "tensorflow": [0.2, 0.21, 0.22, 0.23, 0.24, 0.25]}
    )
    row = found.iloc[0]
    assert row["fastest_to_target"] == "torch" and row["leader"] == "torch"
    assert row["time_to_target_s"] == pytest.approx(0.05)


def test_overlapping_times_to_target_have_no_clear_winner(tmp_path: Path) -> None:
    found = _cells_with_targets(tmp_path, {"torch": [0.05, 0.3], "tensorflow": [0.1, 0.2]})
    assert found.iloc[0]["fastest_to_target"] == convergence.NO_CLEAR_WINNER
    assert "intervals overlap" in found.iloc[0]["note"]


def test_a_framework_that_does_not_converge_is_never_crowned(tmp_path: Path) -> None:
    found = _cells_with_targets(tmp_path, {"torch": [None, None, 0.01], "tensorflow": [0.2, 0.21, 0.22]})
    row = found.iloc[0]
    assert row["fastest_to_target"] == "tensorflow"
    assert row["not_converged"] == "torch" and "torch did not converge: 1 of 3" in row["note"]


def test_a_target_no_run_reaches_gives_no_time_and_no_winner(tmp_path: Path) -> None:
    found = _cells_with_targets(tmp_path, {"torch": [None] * 3, "tensorflow": [None] * 3})
    row = found.iloc[0]
    assert row["fastest_to_target"] == "n/a (no framework reached the target)"
    assert row["leader"] is None or (isinstance(row["leader"], float) and math.isnan(row["leader"]))
    assert math.isnan(row["time_to_target_s"])


def test_non_converged_repeats_count_as_infinitely_slow() -> None:
    iv = convergence.time_to_target_interval([1.0, 2.0, 3.0, np.inf, np.inf, np.inf, np.inf])
    assert math.isnan(iv.value) and iv.method == convergence.CENSORED
    iv = convergence.time_to_target_interval([1.0, 2.0, 3.0, 4.0, 5.0, np.inf])
    assert iv.value == 3.5 and iv.low == 1.0 and math.isinf(iv.high)
    assert convergence.time_to_target_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).high == 6.0


def test_the_quality_figures_draw_every_run_and_both_efficiencies(tmp_path: Path) -> None:
    for framework, step in (("torch", 0.01), ("tensorflow", 0.02)):
        for nodes in (1, 2):
            for repeat in range(2):
                run_with_evals(
                    tmp_path / "runs", framework=framework, nodes=nodes, repeat=repeat, iterations=12,
                    step_s=step * (1 + 0.02 * repeat) * nodes, target={"metric": "top1", "value": 0.9},
                    evals=[(4, 0.5), (8, 0.85), (12, 0.93)],
                )  # fmt: skip
    built = aggregate.aggregate(aggregate.find_events(tmp_path / "runs"))
    both = convergence.efficiencies(built.cells)
    tt = both[both["kind"].eq(convergence.EFFICIENCY_KINDS[1]) & both["nodes"].eq(2)]
    # Twice the step time at twice the nodes to the same target: time-to-target efficiency 1/4.
    assert tt["value"].tolist() == pytest.approx([0.25, 0.25], rel=0.05)
    out = {name: {"html": str(tmp_path / f"{name}.html")} for name in ("quality", "efficiencies")}
    make_quality_figures(built.runs, built.cells, built.evals, out)
    html = (tmp_path / "quality.html").read_text()
    assert "torch/lenet/n2x1/b64/r1" in html and "tensorflow" in html
    assert "time-to-target efficiency" in (tmp_path / "efficiencies.html").read_text()


def test_an_empty_time_to_target_panel_says_why(tmp_path: Path) -> None:
    """A model without a target (the demo's AutoEncoder) has throughput efficiencies and an
    empty time-to-target panel: the title says it has no target; a model with a target that
    no run reached says that instead."""
    from dlscale.figures.panels import spec_of_html
    from dlscale.figures.quality import efficiencies_missing, efficiencies_table

    for model, target, last in (
        ("lenet", {"metric": "top1", "value": 0.9}, 0.93),
        ("autoencoder", None, 0.93),
        ("alexnet", {"metric": "top1", "value": 0.9}, 0.5),
    ):
        for nodes, repeat in ((1, 0), (1, 1), (2, 0), (2, 1)):
            run_with_evals(
                tmp_path / "runs", model=model, nodes=nodes, repeat=repeat, iterations=12,
                step_s=0.01 * nodes * (1 + 0.02 * repeat), target=target, evals=[(4, 0.5), (12, last)],
            )  # fmt: skip
    built = aggregate.aggregate(aggregate.find_events(tmp_path / "runs"))
    assert sorted(efficiencies_missing(built.cells, efficiencies_table(built.cells))) == [
        "no time-to-target efficiency for alexnet: no two node counts of one framework reached its target",
        "no time-to-target efficiency for autoencoder: the study sets no quality target for it",
    ]
    out = {"efficiencies": {"html": str(tmp_path / "efficiencies.html")}}
    make_quality_figures(built.runs, built.cells, built.evals, out)
    title = spec_of_html(out["efficiencies"]["html"])["title"]["text"]
    assert title[1:] == efficiencies_missing(built.cells, efficiencies_table(built.cells))


def test_two_frameworks_on_the_same_curve_are_both_seen_in_the_quality_figure(tmp_path: Path) -> None:
    """The same work at the same speed (the demo's torch and Caffe AutoEncoder: the same
    losses from one initialisation) draws two runs' points at one place: each framework's
    points have a shape of their own, so the one drawn last does not hide the other."""
    from dlscale.figures.panels import spec_of_html

    for framework in ("torch", "caffe"):
        run_with_evals(
            tmp_path / "runs", framework=framework, iterations=12, step_s=0.01,
            evals=[(4, 0.5), (8, 0.85), (12, 0.93)],
        )  # fmt: skip
    built = aggregate.aggregate(aggregate.find_events(tmp_path / "runs"))
    out = {"quality": {"html": str(tmp_path / "quality.html")}}
    make_quality_figures(built.runs, built.cells, built.evals, out)
    shapes: dict[tuple[str, str], set[str]] = {}
    for item in drawn_symbols(spec_of_html(out["quality"]["html"])):
        said = described(item)
        shapes.setdefault((said["timed training seconds"], said["held-out quality"]), set()).add(
            item["shape"]
        )
    assert len(shapes) == 3 and all(len(drawn) == 2 for drawn in shapes.values()), shapes


def test_the_seed_claims_are_judged_again_as_time_to_target(tmp_path: Path) -> None:
    # BigDL's steps are faster, but its model needs twice the iterations to reach the target.
    for repeat in range(6):
        jitter = 1 + 0.01 * repeat
        run_with_evals(
            tmp_path, framework="bigdl", repeat=repeat, step_s=0.01 * jitter, iterations=13,
            target={"metric": "top1", "value": 0.9}, evals=[(7, 0.6), (13, 0.92)],
        )  # fmt: skip
        run_with_evals(
            tmp_path, framework="caffe", repeat=repeat, step_s=0.015 * jitter, iterations=7,
            target={"metric": "top1", "value": 0.9}, evals=[(7, 0.91)],
        )  # fmt: skip
    claims = aggregate.aggregate(aggregate.find_events(tmp_path)).claims.set_index("claim")
    fastest = claims.loc["BigDL computes fastest"]
    assert fastest["verdict"] == "reproduced"  # samples/s
    assert fastest["verdict_time_to_target"] == "contradicted", fastest["reason_time_to_target"]
    assert "clearly beaten by caffe" in fastest["reason_time_to_target"]
    assert (
        "does not split out communication" in claims.loc["Caffe communicates best", "reason_time_to_target"]
    )


def test_the_claims_are_asked_at_the_largest_node_count_where_a_model_learned(tmp_path: Path) -> None:
    def claims_of(root: Path, learns_below: int) -> pd.DataFrame:
        for framework in ("caffe", "torch"):
            for nodes in (1, 2, 4):
                for repeat in range(3):
                    run_with_evals(
                        root, framework=framework, nodes=nodes, repeat=repeat, iterations=7,
                        step_s=0.01 * (1 + 0.01 * repeat) * nodes, target={"metric": "top1", "value": 0.9},
                        evals=[(7, 0.91 if nodes < learns_below else 0.1)],
                    )  # fmt: skip
        return aggregate.aggregate(aggregate.find_events(root)).claims.set_index("claim")

    # A rate that diverges at 4 nodes: every framework's 4-node model stays at chance. The
    # communication and scaling claims are asked at 2 nodes, where the models learned.
    claims = claims_of(tmp_path / "diverged-at-4", learns_below=4)
    assert claims.loc["Caffe communicates best", "nodes"] == 2
    assert claims.loc["Caffe scales best", "nodes"] == 2
    assert claims.loc["BigDL computes fastest", "nodes"] == 1
    # Where nothing learned at all, the node counts stay the ones asked before.
    claims = claims_of(tmp_path / "never-learned", learns_below=1)
    assert claims.loc["Caffe scales best", "nodes"] == 4


def test_a_contended_cell_decides_no_time_to_target_scaling_claim(tmp_path: Path) -> None:
    # Caffe's 2-node time to target would beat torch's clearly, but its 2-node repeats ran
    # beside other work: their seconds are the host's load, so the efficiency decides nothing.
    for framework, step in (("caffe", 0.01), ("torch", 0.02)):
        for nodes in (1, 2):
            for repeat in range(3):
                path = run_with_evals(
                    tmp_path, framework=framework, nodes=nodes, repeat=repeat, iterations=7,
                    step_s=step * (1 + 0.01 * repeat) * (1 if framework == "caffe" else nodes),
                    target={"metric": "top1", "value": 0.9}, evals=[(7, 0.91)],
                )  # fmt: skip
                if framework == "caffe" and nodes == 2:
                    lines = path.read_text().splitlines()
                    end = json.loads(lines[-1])
                    end["contention"] = {"other_busy_share": 0.5, "steal_share": 0.0, "contended": True}
                    path.write_text("\n".join([*lines[:-1], json.dumps(end)]) + "\n")
    claims = aggregate.aggregate(aggregate.find_events(tmp_path)).claims.set_index("claim")
    scales = claims.loc["Caffe scales best"]
    assert scales["verdict_time_to_target"] != "reproduced", scales["reason_time_to_target"]
    assert "contended" in scales["reason_time_to_target"], scales["reason_time_to_target"]


def test_a_designed_difference_is_named_and_kept_out_of_time_to_target(tmp_path: Path) -> None:
    for repeat in range(3):
        run_with_evals(tmp_path, framework="torch", repeat=repeat, step_s=0.02, iterations=7,
                   target={"metric": "top1", "value": 0.9}, evals=[(7, 0.91)])  # fmt: skip
        run_with_evals(tmp_path, framework="bigdl", repeat=repeat, step_s=0.01, iterations=7,
                   target={"metric": "top1", "value": 0.9}, evals=[(7, 0.91)])  # fmt: skip
    built = aggregate.aggregate(aggregate.find_events(tmp_path))
    assert built.runs.set_index("framework").loc["bigdl", "designed_difference"].str.contains("FP16").all()
    row = built.time_to_target.iloc[0]
    assert row["fastest_to_target"] == "torch" and "bigdl left out (not the same work" in row["note"]
    opted_in = aggregate.aggregate(aggregate.find_events(tmp_path), same_work_only=False).time_to_target.iloc[
        0
    ]
    assert opted_in["fastest_to_target"] == "bigdl"
