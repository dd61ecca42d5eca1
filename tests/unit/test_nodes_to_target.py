"""How many nodes to a trained model, end to end on hand-made tables: runs + evals ->
the four tables (dlscale.analysis.nodes_to_target) -> the projection to many nodes with its
held-out check (dlscale.perfmodel.nodes_projection).

The hand-made study follows a known curve: LeNet at 1, 2, 4 and 8 nodes of 64 (global batch
64 ... 512) needs S(B) = 40 (1 + 128 / B) steps, evaluated every step, each step 0.01 s
at every node count (perfect throughput scaling), 4 repeats with a step of noise.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dlscale.analysis import nodes_to_target as ntt
from dlscale.perfmodel import nodes_projection as npj

S_MIN, B_NOISE, STEP_S = 40.0, 128.0, 0.01
NODES = (1, 2, 4, 8)


def steps_at(batch: int, repeat: int) -> int:
    return round(S_MIN * (1 + B_NOISE / batch)) + (repeat % 2)


def study(rule: str = "linear", reach: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs, evals = [], []
    for nodes in NODES:
        for repeat in range(4):
            run_id = f"torch/lenet/n{nodes}x1/b64/r{repeat}"
            batch = 64 * nodes
            runs.append({
                "run_id": run_id, "framework": "torch", "model": "lenet", "network": "host", "nodes": nodes,
                "ranks_per_node": 1, "batch_per_rank": 64, "global_batch": batch, "repeat": repeat,
                "status": "ok", "reason": None, "startup_s": 2.0, "lr_rule": rule, "lr_base_batch": 64,
                "lr_warmup_iterations": 0, "lr_rate": 0.01 * nodes, "target_metric": "top1", "target_value": 0.9,
            })  # fmt: skip
            needed = steps_at(batch, repeat)
            for step in range(1, needed + 2):
                value = 0.95 if (reach and step >= needed) else 0.5
                evals.append({"run_id": run_id, "iteration": step, "metric": "top1", "value": value,
                              "train_s": step * STEP_S, "eval_s": 0.1})  # fmt: skip
    return pd.DataFrame(runs), pd.DataFrame(evals)


def test_the_four_tables_of_a_study_on_a_known_curve():
    runs, evals = study()
    tables = ntt.nodes_to_target(runs, evals)
    assert set(tables.target_runs["outcome"]) == {"reached"}
    steps = tables.steps_to_target.set_index("global_batch")
    assert list(steps.index) == [64, 128, 256, 512]
    assert steps.loc[64, "steps_to_target"] == pytest.approx(120.5)
    fit = tables.batch_fit.iloc[0]
    assert fit["refused"] is None or (isinstance(fit["refused"], float) and math.isnan(fit["refused"]))
    assert fit["b_noise_low"] <= B_NOISE * 1.1 and fit["b_noise_high"] >= B_NOISE * 0.9
    assert fit["b_noise"] == pytest.approx(B_NOISE, rel=0.1)
    assert steps["regime"].tolist() == ["near-perfect scaling", "diminishing returns", "diminishing returns",
                                        "diminishing returns"]  # fmt: skip
    by_nodes = tables.nodes_to_target.set_index("nodes")
    # Fewer steps at more nodes, the same step time: 8 nodes train fastest, 1 node cheapest.
    assert by_nodes["fastest"].unique().tolist() == ["8"]
    assert by_nodes["cheapest"].unique().tolist() == ["1"]


def test_a_target_no_run_reaches_gives_no_fit_no_winner_and_no_node_count():
    runs, evals = study(reach=False)
    tables = ntt.nodes_to_target(runs, evals)
    assert set(tables.target_runs["outcome"]) == {"not reached"}
    assert tables.batch_fit["refused"].iloc[0]
    assert tables.steps_to_target["fit_steps"].isna().all()
    by_nodes = tables.nodes_to_target
    assert by_nodes["fastest"].unique().tolist() == ["n/a (no node count reached the target)"]


def diverged_at_8_nodes() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The known-curve study whose 8-node runs all failed with a NaN loss, before any evaluation."""
    runs, evals = study()
    gone = runs["nodes"].eq(8)
    runs.loc[gone, "status"] = "failed"
    runs.loc[gone, "reason"] = "loss became nan at iteration 11 on rank 0"
    return runs, evals[~evals["run_id"].isin(runs.loc[gone, "run_id"])]


def projection() -> pd.DataFrame:
    return pd.DataFrame(
        [{"setup": "torch", "framework": "torch", "model": "lenet", "network": "10gbe", "nodes": n,
          "step_s": STEP_S, "step_lo": STEP_S, "step_hi": STEP_S} for n in (1, 2, 4, 8, 16, 1024)]
    )  # fmt: skip


def test_the_projection_to_many_nodes_is_step_time_times_the_fitted_steps_and_checked_held_out():
    runs, evals = study()
    tables = ntt.nodes_to_target(runs, evals)
    curves, summary = npj.project_to_target(projection(), tables.target_runs)
    curve = curves.set_index("nodes")
    fit = tables.batch_fit.iloc[0]
    expected = STEP_S * fit["s_min"] * (1 + fit["b_noise"] / (64 * 1024))
    assert curve.loc[1024, "time_to_target_s"] == pytest.approx(expected)
    assert curve.loc[1024, "extrapolated"] and not curve.loc[4, "extrapolated"]
    row = summary.iloc[0]
    assert row["network"] == "10gbe" and row["fastest_nodes"] == 1024
    # Held out: S(B) from 1, 2 and 4 nodes predicts 8 nodes' measured time to target.
    assert row["held_out_nodes"] == 8 and row["calibrated_on"] == "1;2;4"
    assert abs(row["relative_error"]) < 0.1 and row["within_band"]


def test_the_held_out_time_uses_the_hosts_step_times_where_its_runs_had_a_core_per_rank():
    runs, evals = study()
    tables = ntt.nodes_to_target(runs, evals)
    # The projection's network is 50 times slower than the host that ran the runs: a check
    # against it would be a 50-fold error. The host had 2 cores: 4 and 8 ranks time-shared.
    slow = projection().assign(step_s=STEP_S * 50, step_lo=STEP_S * 50, step_hi=STEP_S * 50)
    host = projection().assign(network="loopback", host_cores=2)
    _, summary = npj.project_to_target(slow, tables.target_runs, host_steps=host)
    row = summary.iloc[0]
    assert row["held_out_nodes"] == 2 and row["calibrated_on"] == "1;4;8"  # leave one out
    assert row["held_out_step_time"] == npj.HOST_STEP_TIME
    assert abs(row["relative_error"]) < 0.1 and row["within_band"]
    # Without the host's model the check falls back to the projection's, and says so.
    _, summary = npj.project_to_target(slow, tables.target_runs)
    assert summary.iloc[0]["held_out_step_time"] == npj.PROJECTED_STEP_TIME
    assert summary.iloc[0]["relative_error"] > 10


def test_a_diverged_node_count_is_not_held_out_and_s_of_b_is_checked_on_its_own():
    runs, evals = diverged_at_8_nodes()
    tables = ntt.nodes_to_target(runs, evals)
    _, summary = npj.project_to_target(projection(), tables.target_runs)
    row = summary.iloc[0]
    assert row["held_out_nodes"] == 4 and row["calibrated_on"] == "1;2"  # 8 diverged: no steps
    assert math.isfinite(row["relative_error"])
    # S(B) from batches 64 and 128 extrapolated to 256, the largest with a median.
    assert row["steps_held_out_batch"] == 256
    measured = tables.steps_to_target.set_index("global_batch").loc[256, "steps_to_target"]
    assert row["steps_measured"] == measured
    assert abs(row["steps_relative_error"]) < 0.05
    assert row["steps_relative_error"] == pytest.approx((row["steps_predicted"] - measured) / measured)


def test_no_projection_without_a_fit_or_a_step_time_and_the_note_says_why():
    runs, evals = study(reach=False)
    curves, summary = npj.project_to_target(projection(), ntt.nodes_to_target(runs, evals).target_runs)
    assert curves.empty and "no S(B)" in summary["note"].iloc[0]
    runs, evals = study()
    other = projection().assign(framework="caffe", setup="caffe")
    curves, summary = npj.project_to_target(other, ntt.nodes_to_target(runs, evals).target_runs)
    assert curves.empty and "no projected step time for torch lenet" in summary["note"].iloc[0]


def test_both_figures_show_their_tables_and_a_figure_that_does_not_is_named(tmp_path):
    from dlscale.figures import nodes
    from dlscale.figures.panels import check_chart, spec_of_html

    runs, evals = study()
    made = ntt.nodes_to_target(runs, evals)
    curves, _ = npj.project_to_target(projection(), made.target_runs)
    tables = {"steps": made.steps_to_target, "fits": made.batch_fit, "by_nodes": made.nodes_to_target,
              "projected": curves}  # fmt: skip
    out = {name: {"html": str(tmp_path / f"{name}.html")} for name in nodes.NODES_FIGURES}
    nodes.draw_checked(tables, out)  # raises FigureMismatch where a panel differs
    # The time-to-target figure against a table that says 8 nodes took twice as long.
    told = made.nodes_to_target.copy()
    told.loc[told["nodes"].eq(8), "time_to_target_s"] *= 2
    problems = check_chart(
        "nodes_to_target", spec_of_html(out["nodes_to_target"]["html"]), nodes.nodes_claim(told, curves)
    )
    assert problems and all(
        p.startswith("nodes_to_target: panel quantity=time to target (s), model=lenet") for p in problems
    )


def test_a_batch_where_every_run_diverged_is_named_kept_out_of_the_fit_and_drawn_without_a_number(tmp_path):
    from dlscale.figures import nodes

    runs, evals = diverged_at_8_nodes()
    made = ntt.nodes_to_target(runs, evals)
    assert set(made.target_runs.loc[made.target_runs["nodes"].eq(8), "outcome"]) == {"diverged"}
    fit = made.batch_fit.iloc[0]
    assert fit["diverged_batches"] == "512" and fit["batches"] == "64;128;256"
    by_nodes = made.nodes_to_target.set_index("nodes")
    assert by_nodes.loc[8, "diverged"] == 4 and math.isnan(by_nodes.loc[8, "time_to_target_s"])
    assert by_nodes["fastest"].unique().tolist() != ["8"]
    claim = nodes.steps_claim(made.steps_to_target, made.batch_fit).rows
    assert claim[claim["kind"].eq("diverged")]["global_batch"].tolist() == [512.0]
    out = {"steps_to_target": {"html": str(tmp_path / "steps_to_target.html")}}
    nodes.draw_checked({"steps": made.steps_to_target, "fits": made.batch_fit, "by_nodes": made.nodes_to_target,
                        "projected": pd.DataFrame()}, out)  # fmt: skip


def test_contended_repeats_leave_the_seconds_and_a_node_count_all_contended_never_wins():
    runs, evals = study()
    runs["contended"] = False
    # 8 nodes: every repeat beside other work. 1 node: one repeat, slowed 100-fold.
    runs.loc[runs["nodes"].eq(8), "contended"] = True
    slow = runs["run_id"].eq("torch/lenet/n1x1/b64/r0")
    runs.loc[slow, "contended"] = True
    evals.loc[evals["run_id"].eq("torch/lenet/n1x1/b64/r0"), "train_s"] *= 100
    made = ntt.nodes_to_target(runs, evals)
    by_nodes = made.nodes_to_target.set_index("nodes")
    assert by_nodes.loc[1, "contended_runs"] == 1 and not by_nodes.loc[1, "excluded"]
    assert by_nodes.loc[1, "time_high"] < 2.0  # the slowed repeat is not among the seconds
    assert by_nodes.loc[8, "excluded"] and by_nodes.loc[8, "contended_runs"] == 4
    assert by_nodes["fastest"].unique().tolist() == ["4"]  # 8 would win; it decides nothing
    assert "8 nodes: every repeat ran beside other work" in by_nodes["winner_note"].iloc[0]
    # Steps do not depend on the host's load: every repeat counts.
    assert made.steps_to_target.set_index("global_batch").loc[512, "repeats"] == 4


def test_the_nodes_figure_draws_an_excluded_node_count_apart_from_the_measured_ones(tmp_path):
    from dlscale.figures import nodes
    from dlscale.figures.panels import check_chart, spec_of_html

    runs, evals = study()
    runs["contended"] = runs["nodes"].eq(8)
    made = ntt.nodes_to_target(runs, evals)
    rows = nodes.nodes_rows(made.nodes_to_target, pd.DataFrame())
    kinds = rows.groupby("kind")["nodes"].apply(lambda n: sorted(set(n))).to_dict()
    assert kinds == {"excluded": [8.0], "measured": [1.0, 2.0, 4.0]}
    out = {"nodes_to_target": {"html": str(tmp_path / "nodes_to_target.html")}}
    tables = {"steps": made.steps_to_target, "fits": made.batch_fit, "by_nodes": made.nodes_to_target,
              "projected": pd.DataFrame()}  # fmt: skip
    nodes.draw_checked(tables, out)
    spec = spec_of_html(out["nodes_to_target"]["html"])
    assert "hollow: contended repeats, excluded from the verdicts" in str(spec["title"])
    # A table that no longer excludes 8 nodes does not match what was drawn.
    told = made.nodes_to_target.assign(excluded=False)
    assert check_chart("nodes_to_target", spec, nodes.nodes_claim(told, pd.DataFrame()))


def test_a_study_whose_every_repeat_was_contended_names_no_winner_and_does_not_say_nobody_reached_it():
    runs, evals = study()
    runs["contended"] = True
    by_nodes = ntt.nodes_to_target(runs, evals).nodes_to_target
    assert by_nodes["excluded"].all()
    assert set(by_nodes["fastest"]) == set(by_nodes["cheapest"]) == {"no clear winner"}


def test_frameworks_that_agree_are_drawn_apart_and_a_missing_curve_is_named_with_its_reason(tmp_path):
    """Two frameworks with the same steps and times at 1 and 2 nodes (the demo's case: every
    framework needed 80 steps at batch 64) are drawn side by side, never one on the other,
    each described by its table's values; with two batches S(B) is refused, and both titles
    say so, with the reason, instead of promising a fitted curve or a projection."""
    from helpers.figures import described, drawn_symbols

    from dlscale.figures import nodes
    from dlscale.figures.panels import spec_of_html

    torch_runs, torch_evals = study()
    keep = torch_runs["nodes"].le(2)
    torch_runs, torch_evals = torch_runs[keep], torch_evals[torch_evals["run_id"].isin(torch_runs["run_id"])]
    caffe_runs = torch_runs.assign(
        framework="caffe", run_id=torch_runs["run_id"].str.replace("torch", "caffe")
    )
    caffe_evals = torch_evals.assign(run_id=torch_evals["run_id"].str.replace("torch", "caffe"))
    made = ntt.nodes_to_target(pd.concat([torch_runs, caffe_runs]), pd.concat([torch_evals, caffe_evals]))
    two_frameworks = projection().pipe(lambda p: pd.concat([p, p.assign(setup="caffe", framework="caffe")]))
    curves, summary = npj.project_to_target(two_frameworks, made.target_runs)
    assert curves.empty and summary["not_projected"].str.startswith("no S(B): 2 batch(es)").all()
    tables = {"steps": made.steps_to_target, "fits": made.batch_fit, "by_nodes": made.nodes_to_target,
              "projected": curves, "summary": summary}  # fmt: skip
    out = {name: {"html": str(tmp_path / f"{name}.html")} for name in nodes.NODES_FIGURES}
    nodes.draw_checked(tables, out)
    for name, value_field, x_field in (("steps_to_target", "steps", "global_batch"),
                                       ("nodes_to_target", "value", "nodes")):  # fmt: skip
        spec = spec_of_html(out[name]["html"])
        title = " / ".join(spec["title"]["text"])
        assert "needs 3 or more distinct global batches" in title, title
        assert "dashed" not in title and "projected to" not in title, title
        by_place: dict[tuple, dict[str, float]] = {}
        for item in drawn_symbols(spec):
            said = described(item)
            place = (said.get("quantity"), said[x_field], said[value_field])
            by_place.setdefault(place, {})[said["framework"]] = item["x"]
        assert by_place and all(set(xs) == {"caffe", "torch"} for xs in by_place.values()), by_place
        # Same value, same table x: a few pixels apart, never on top of one another.
        assert all(abs(xs["caffe"] - xs["torch"]) >= nodes.DODGE_PX - 0.01 for xs in by_place.values())
    # With a fit and a projection the titles say what is drawn, and name the one left out.
    runs, evals = study()
    made = ntt.nodes_to_target(runs, evals)
    curves, summary = npj.project_to_target(projection(), made.target_runs)
    assert set(nodes.steps_title(nodes.steps_rows(made.steps_to_target, made.batch_fit), made.batch_fit)) == {
        "Steps to the target against the global batch,",
        "dashed: the fitted S(B) over the measured batches",
    }
    rows = nodes.nodes_rows(made.nodes_to_target, curves)
    assert nodes.nodes_title(rows, summary)[1:] == [
        "measured (points, with their intervals); projected to 1024 nodes (lines, bands)"
    ]
    alone = rows[~(rows["kind"].eq("projected"))]
    said = summary.assign(not_projected="no projected step time for torch lenet")
    assert nodes.nodes_title(alone, said)[2] == "not projected: no projected step time for torch lenet"
