"""The tuning stage's pure parts (dlscale.tune.grid): grids, pins, the choice, the settings
record, and the roofline fraction (dlscale.host.roofline, dlscale.analysis.tables.add_roofline)."""

from __future__ import annotations

import json
import math
import subprocess

import pandas as pd
import pytest
from helpers.events import run_with_evals
from helpers.paths import torch_python

from dlscale.host import roofline
from dlscale.launch import records
from dlscale.runners.plan import Plan, Process
from dlscale.runners.tensorflow import launcher as tf_launcher
from dlscale.runners.torch import launcher as torch_launcher
from dlscale.study.matrix import Run, expand_runs, run_spec
from dlscale.study.validation import ConfigError, validate_config
from dlscale.tune import choice, grid

BASE = {"frameworks": ["torch", "tensorflow"], "models": ["lenet"], "nodes": [1, 2]}


def study(schema, **tune):
    return validate_config({**BASE, "tune": {"enabled": True, **tune}}, schema)


# --- grids and pins ---------------------------------------------------------------------------


def test_grid_is_the_product_of_the_x_tune_options_default_first(schema):
    s = study(schema)
    torch_grid = grid.grid(s, "torch")
    # the framework's default (channels_last_all_models null: the ImageNet-CNN rule)
    assert torch_grid[0] == {"channels_last_all_models": None, "mkldnn": True}
    # On LeNet alone channels_last_all_models false is the rule's own layout: its 2 settings
    # are null's runs. With an ImageNet-sized CNN in the study it is a layout of its own.
    assert len(torch_grid) == 4 and {g["channels_last_all_models"] for g in torch_grid} == {None, True}
    with_alexnet = validate_config(
        {**BASE, "models": ["lenet", "alexnet"], "tune": {"enabled": True}}, schema
    )
    assert len({json.dumps(g, sort_keys=True) for g in grid.grid(with_alexnet, "torch")}) == 6
    # At 1 thread per rank the thread-count candidates above 1 are left out, and 1 beside
    # null (= threads_per_rank) would be the same setting: intra stays null only.
    tf_grid = grid.grid(s, "tensorflow")
    assert {g["intra_op_threads"] for g in tf_grid} == {None}
    assert {g["inter_op_threads"] for g in tf_grid} == {1, 2} and len(tf_grid) == 4
    assert tf_grid[0] == {"intra_op_threads": None, "inter_op_threads": 2, "onednn": True}


def test_bigdl_grid_has_its_batch_split_without_repeats_or_refused_settings(schema):
    """Two cores per executor: BigDL's split of the batch over them (per-core replicas with
    one thread each, or one replica with both) is in its grid. ``batch_split: null`` is the
    engine's own split, so it is left out as the explicit one it repeats, and per_executor
    with mklblas (a mode BigDL lacks) is left out with the runner's reason."""
    config = {"frameworks": ["bigdl"], "models": ["lenet"], "nodes": [1], "threads_per_rank": 2}
    tune = {"enabled": True, "options": {"bigdl": {"engine": ["mklblas", "mkldnn"], "batch_split": [None, "per_core", "per_executor"]}}}  # fmt: skip
    s = validate_config({**config, "tune": tune}, schema)
    kept, left_out = grid.grid_report(s, "bigdl")
    assert list(kept.values()) == [
        {"engine": "mklblas", "batch_split": None},  # the default: per-core replicas
        {"engine": "mkldnn", "batch_split": None},  # mkldnn's own: one replica, 2 threads
        {"engine": "mkldnn", "batch_split": "per_core"},
    ]
    assert grid.grid(s, "bigdl") == list(kept.values()) and grid.is_tuned(s, "bigdl")
    reasons = {json.dumps(raw, sort_keys=True): left_out[grid.setting_id(raw)] for raw in (
        {"engine": "mklblas", "batch_split": "per_core"},
        {"engine": "mklblas", "batch_split": "per_executor"},
        {"engine": "mkldnn", "batch_split": "per_executor"},
    )}  # fmt: skip
    assert len(left_out) == 3
    assert reasons['{"batch_split": "per_core", "engine": "mklblas"}'].startswith("the same run as ")
    assert "needs bigdl.engine=mkldnn" in reasons['{"batch_split": "per_executor", "engine": "mklblas"}']
    mkldnn_default = grid.setting_id({"engine": "mkldnn", "batch_split": None})
    assert reasons['{"batch_split": "per_executor", "engine": "mkldnn"}'] == (
        f"the same run as {mkldnn_default} (its settings record is identical)"
    )
    # The one model's own grid is the framework's: the same settings, none left out again.
    assert grid.model_grid_report(s, "bigdl", "lenet") == (kept, {})
    # Every kept setting's tuning run gets the split it names (the spec and its record).
    for sid, setting in kept.items():
        spec = grid.tune_spec(s, "bigdl", "lenet", sid, 0)
        assert spec.options["engine"] == setting["engine"]
        assert spec.options.get("batch_split") == setting["batch_split"]
    # One core per executor: the refused mode exists (and is BigDL's multiModels=false).
    one = validate_config({**config, "threads_per_rank": 1, "tune": tune}, schema)
    assert {"engine": "mklblas", "batch_split": "per_executor"} in grid.grid(one, "bigdl")


def test_thread_candidates_follow_threads_per_rank(schema):
    s = validate_config({**BASE, "threads_per_rank": 2, "tune": {"enabled": True}}, schema)
    assert grid.tuned_options(s, "tensorflow")["intra_op_threads"] == [None, 1]
    assert grid.tuned_options(s, "tensorflow")["inter_op_threads"] == [2, 1]


def test_setting_ids_are_stable_and_never_a_run_id_part():
    a = grid.setting_id({"mkldnn": False, "channels_last": True})
    assert a == grid.setting_id({"channels_last": True, "mkldnn": False})
    assert a != grid.setting_id({"channels_last": True, "mkldnn": True})
    assert a.startswith("s") and len(a) == 11


def test_restricted_options_keep_the_default(schema):
    s = study(schema, options={"torch": {"mkldnn": [False]}})
    assert grid.grid(s, "torch") == [{"mkldnn": True}, {"mkldnn": False}]


def test_a_pinned_setting_is_not_tuned_and_all_pinned_skips_the_grid(schema):
    s = study(schema, pinned={"torch": {"mkldnn": False}})
    assert grid.grid(s, "torch") == [
        {"channels_last_all_models": None},
        {"channels_last_all_models": True},  # false: the rule's layout on LeNet, null's run
    ]
    assert s["torch"]["mkldnn"] is False  # the pinned value is the run's option
    # Written in the framework's own section, a tunable option is pinned too.
    s = validate_config(
        {**BASE, "torch": {"mkldnn": False, "channels_last_all_models": False}, "tune": {"enabled": True}},
        schema,
    )
    assert s["tune"]["pinned"]["torch"] == {"mkldnn": False, "channels_last_all_models": False}
    assert grid.grid(s, "torch") == [] and not grid.is_tuned(s, "torch")
    run = Run("torch", "lenet", 1, 1, 64, 0)
    assert run_spec(s, run).options["mkldnn"] is False


def test_tuning_off_has_no_grid(schema):
    s = validate_config(BASE, schema)
    assert s["tune"]["enabled"] is False and grid.grid(s, "torch") == []


@pytest.mark.parametrize(
    ("tune", "message"),
    [
        ({"options": {"torch": {"nope": [1]}}}, "'tune.options.torch.nope': torch has no option 'nope'"),
        ({"options": {"torch": {"timeout_s": [30]}}}, "is not a tunable option of torch"),
        (
            {"options": {"torch": {"mkldnn": ["yes"]}}},
            "'tune.options.torch.mkldnn': 'yes' is not a valid value",
        ),
        ({"pinned": {"tensorflow": {"inter_op_threads": 0}}}, "tune.pinned.tensorflow.inter_op_threads"),
        ({"max_settings": 2}, "'tune.max_settings': torch's grid has 6 settings"),
    ],
)
def test_bad_tune_sections_name_the_key(schema, tune, message):
    with pytest.raises(ConfigError, match="config key") as err:
        study(schema, **tune)
    assert message in str(err.value)


def test_pinned_twice_differently_is_an_error(schema):
    with pytest.raises(ConfigError, match="tune.pinned.torch.mkldnn"):
        validate_config(
            {**BASE, "torch": {"mkldnn": True}, "tune": {"pinned": {"torch": {"mkldnn": False}}}}, schema
        )


def test_a_choice_equal_to_the_defaults_keeps_the_run_hash(schema):
    s = study(schema)
    for run in expand_runs(s):
        default = grid.grid(s, run.framework)[0]
        assert run_spec(s, run, default).sha256 == run_spec(s, run).sha256
    run = Run("torch", "lenet", 2, 1, 64, 0)
    tuned = run_spec(s, run, {"mkldnn": False})
    assert tuned.options["mkldnn"] is False and tuned.sha256 != run_spec(s, run).sha256


def test_tune_spec_is_the_one_node_run_with_the_setting(schema):
    s = study(schema, iterations=5)
    sid, setting = list(grid.grid_ids(s, "torch").items())[3]
    spec = grid.tune_spec(s, "torch", "lenet", sid, 1)
    assert (spec.nodes, spec.repeat, spec.iterations, spec.run_id) == (1, 1, 5, "torch/lenet/n1x1/b64/r1")
    assert {k: spec.options[k] for k in setting} == setting
    with pytest.raises(grid.TuneError, match="no setting"):
        grid.tune_spec(s, "torch", "lenet", "s0000000000", 0)


def test_tune_runs_are_interleaved_across_settings(schema):
    s = study(schema, repeats=2)
    paths = grid.tune_runs(s, "torch", "lenet")
    ids = list(grid.grid_ids(s, "torch"))
    assert paths[: len(ids)] == [grid.run_path("torch", "lenet", sid, 0) for sid in ids]
    assert len(paths) == 2 * len(ids)


def test_race_budget_is_the_first_round_and_the_framework_s_further_runs(schema):
    s = study(schema, repeats=2, options={"torch": {"mkldnn": [False]}})
    assert grid.race_budget(s, "torch", "lenet") == 2 * 2 + 8  # the schema's default budget
    s = study(schema, repeats=3, options={"torch": {"mkldnn": [False]}}, budget={"torch": 0})
    assert grid.race_budget(s, "torch", "lenet") == 2 * 3
    (default, _), (off, _) = grid.grid_ids(s, "torch").items()
    assert grid.race_round(s, "torch", "lenet", [default, off], 3) == [
        grid.run_path("torch", "lenet", default, 3),
        grid.run_path("torch", "lenet", off, 3),
    ]
    with pytest.raises(grid.TuneError, match="not in its grid"):
        grid.race_round(s, "torch", "lenet", ["s0000000000"], 3)


def test_a_setting_that_computes_as_the_default_for_a_model_is_not_raced_for_it(schema):
    """The demo's torch grid (channels_last for every model) on LeNet and the AutoEncoder: a
    memory format lays out 4-D tensors, which the fully connected AutoEncoder has none of, so
    for it the setting is the default's run (identical settings record) and it has no race:
    no run, a choice that keeps the default and names why. LeNet races both."""
    s = validate_config(
        {**BASE, "frameworks": ["torch"], "models": ["lenet", "autoencoder"],
         "tune": {"enabled": True, "repeats": 2, "settings": {"torch": [{"channels_last_all_models": True}]}}},
        schema,
    )  # fmt: skip
    framework_grid = grid.grid_ids(s, "torch")
    assert len(framework_grid) == 2
    default, channels_last = framework_grid
    assert grid.model_grid_ids(s, "torch", "lenet") == framework_grid
    assert grid.is_tuned_model(s, "torch", "lenet") and len(grid.tune_runs(s, "torch", "lenet")) == 4
    kept, left_out = grid.model_grid_report(s, "torch", "autoencoder")
    assert list(kept) == [default]
    assert left_out == {
        channels_last: f"the same run as {default} for autoencoder (its settings record is identical)"
    }
    assert (
        not grid.is_tuned_model(s, "torch", "autoencoder") and grid.tune_runs(s, "torch", "autoencoder") == []
    )
    assert grid.race_budget(s, "torch", "autoencoder") == 1 * 2 + 8
    with pytest.raises(grid.TuneError, match="not in its grid"):
        grid.race_round(s, "torch", "autoencoder", [default, channels_last], 2)
    # The AutoEncoder's run under the setting records what it computes with: the default's.
    run = Run("torch", "autoencoder", 1, 1, 64, 0)
    assert torch_launcher.settings(
        run_spec(s, run, framework_grid[channels_last])
    ) == torch_launcher.settings(run_spec(s, run, framework_grid[default]))
    # Its choice: the default, unraced, and the setting listed with why it was not run.
    record = choice.untuned(
        "torch", "autoencoder", kept, {sid: (framework_grid[sid], why) for sid, why in left_out.items()}
    )
    assert record["chosen"] == default and record["chosen_settings"] == framework_grid[default]
    assert "unraced" in record["reason"]
    rows = {row["setting"]: row for row in choice.choice_table([record])}
    assert rows[default]["chosen"] and rows[default]["runs"] == 0 and rows[default]["throughput"] is None
    assert not rows[channels_last]["chosen"] and rows[channels_last]["verdict"].startswith(
        "not run: the same run as"
    )
    assert json.loads(rows[channels_last]["settings"]) == {"channels_last_all_models": True}
    assert set(rows[default]) == set(choice.TABLE_COLUMNS)


# --- the choice -------------------------------------------------------------------------------


def test_a_clearly_faster_setting_is_chosen_once_its_95_interval_clears_the_default():
    samples = {"d": [100, 102, 101, 99, 103, 100], "a": [120, 121, 119, 122, 118, 120]}
    samples["b"] = [130, 131, 132, 129, 133, 130]
    chosen, reason = choice.decide(samples, "d")
    assert chosen == "b" and "95% interval lies above 1" in reason
    # Three repeats each separate the ranges but give no 95% interval: the default stays.
    chosen, reason = choice.decide({k: v[:3] for k, v in samples.items()}, "d")
    assert chosen == "d" and "the default stays" in reason


def test_overlapping_intervals_keep_the_default():
    # "a" has the higher median, but its gain's interval reaches below 1: a tie.
    samples = {"d": [100, 110, 105, 98, 112, 104], "a": [108, 115, 112, 101, 99, 113]}
    chosen, reason = choice.decide(samples, "d")
    assert chosen == "d" and "the default stays" in reason


def test_one_repeat_never_separates():
    assert choice.decide({"d": [100.0], "a": [1000.0]}, "d")[0] == "d"


def test_racing_drops_a_clearly_worse_setting_after_the_first_round():
    """Two repeats each: "slow" lies wholly below the default and is measured no more;
    "close" overlaps it and runs again with the default; "broken" failed every run."""
    nan = math.nan
    samples = {"d": [100, 104], "slow": [70, 72], "close": [101, 106], "broken": [nan, nan]}
    check = choice.race(samples, "d", budget=24, failed={"broken"})
    states = {sid: st["state"] for sid, st in check["status"].items()}
    assert states == {"d": "default", "slow": "clearly worse", "close": "in contention", "broken": "failed"}
    assert check["more"] and check["next"] == ["d", "close"] and check["runs"] == 8
    # A dropped setting stays dropped though the default's interval moves on.
    samples.update(d=[100, 104, 60], close=[101, 106, 103])
    later = choice.race(samples, "d", budget=24, dropped=check["status"], failed={"broken"})
    assert later["status"]["slow"] == {"state": "clearly worse", "n": 2, "after": 2}
    assert later["next"] == ["d", "close"]
    # Runs that were only contended (NaN, not failed) race on: another round measures them.
    busy = choice.race({"d": [100, 104], "a": [nan, nan]}, "d", budget=24)
    assert busy["status"]["a"]["state"] == "in contention" and busy["next"] == ["d", "a"]
    assert choice.race({"d": [nan, nan], "a": [1, 2]}, "d", budget=24)["next"] == ["d", "a"]
    assert not choice.race({"d": [nan, nan], "a": [1, 2]}, "d", budget=24, failed={"d"})["more"]


def test_racing_stops_at_a_winner_or_at_the_budget():
    d, a = [100, 101, 99, 102, 100, 98], [130, 128, 131, 129, 132, 130]
    won = choice.race({"d": d, "a": a}, "d", budget=12)
    assert not won["more"] and won["status"]["a"]["state"] == "won" and won["status"]["a"]["n"] == 6
    # Undecided at 4 + 4 runs with room for 1 more run only: the budget is spent.
    spent = choice.race({"d": d[:4], "a": [99, 103, 101, 100]}, "d", budget=9)
    assert not spent["more"] and spent["status"]["a"]["state"] == "budget spent: undecided"
    assert not choice.race({"d": d[:2], "a": [120, 90]}, "d", budget=5)["more"]
    with pytest.raises(ValueError, match="default setting 'x'"):
        choice.race({"d": d}, "x", budget=4)


def test_verdicts_say_why_each_setting_won_or_lost():
    row = {"id": "a", "default": False, "state": "won", "n": 6, "after": 6}
    row.update(gain=0.30, gain_low=0.14, gain_high=0.49)
    assert choice.verdict(row, "a") == "won: +30% [+14, +49], n=6"
    worse = {"id": "b", "default": False, "state": "clearly worse", "n": 3, "after": 3, "gain": None}
    assert choice.verdict(worse, "a") == "dropped after 3: clearly worse (n=3)"
    undecided = {**row, "state": "budget spent: undecided", "gain": None}
    assert choice.verdict(undecided, "d").startswith("budget spent: undecided")


def test_failed_settings_are_never_chosen():
    nan = math.nan
    chosen, _ = choice.decide({"d": [100, 101, 102], "broken": [nan, nan, nan]}, "d")
    assert chosen == "d"
    chosen, reason = choice.decide({"d": [nan, nan], "a": [50, 51], "b": [60, 61]}, "d")
    assert chosen == "b" and "default has no ok run" in reason
    assert choice.decide({"d": [nan], "a": [nan]}, "d") == (
        "d",
        "no setting has an ok, uncontended run: the default stays",
    )


@pytest.mark.parametrize(
    ("default_final", "fast_final", "chosen"),
    [(0.85, 0.10, "d"), (0.85, 0.85, "fast"), (0.10, 0.10, "fast")],
)
def test_a_faster_setting_whose_model_did_not_learn_is_dropped_and_never_chosen(
    tmp_path, default_final, fast_final, chosen
):
    """Speed bought by not training is no gain: a setting twice as fast as the default whose
    runs end at chance (MNIST top-1 0.10) while the default's learned is dropped by the race,
    its runs are no samples of its speed, the default stays and the verdict says why. The
    controls: the same setting that learned wins, and where the default did not learn
    either (runs too short for any) learning separates nothing and speed decides."""
    finals = {"d": default_final, "fast": fast_final}
    events = {
        sid: [
            run_with_evals(tmp_path / sid, repeat=r, step_s=step * (1 + 0.01 * r), iterations=8, evals=[(8, finals[sid])])
            for r in range(6)
        ]
        for sid, step in (("d", 0.02), ("fast", 0.01))
    }  # fmt: skip
    samples, failed, unlearned = choice.race_samples(events, "d")
    check = choice.race(samples, "d", budget=24, failed=failed, unlearned=unlearned)
    record = choice.choose("torch", "lenet", {"d": {}, "fast": {"x": 1}}, events, "d", race_record=check)
    fast = next(row for row in record["settings"] if row["id"] == "fast")
    assert record["chosen"] == chosen and not failed
    if chosen == "d":
        assert unlearned == {"fast"} and all(math.isnan(v) for v in samples["fast"])
        assert check["status"]["fast"]["state"] == "did not learn" and not check["more"]
        assert fast["verdict"] == "dropped after 6: its model did not learn (6 run(s))"
        # A later check keeps it dropped, and the fallback never picks it either.
        later = choice.race(samples, "d", budget=24, dropped=check["status"])
        assert later["status"]["fast"]["state"] == "did not learn"
        assert choice.decide({"d": [math.nan], "fast": [200.0]}, "d", check["status"])[0] == "d"
    else:
        assert not unlearned and check["status"]["fast"]["state"] == "won"
        assert fast["verdict"].startswith("won: +") and fast["not_learned_runs"] == 0


def test_a_setting_faster_than_the_roofline_allows_is_not_crowned(tmp_path):
    """A median throughput above the host's matmul roofline (the peak measured slow, or the
    FLOP count wrong) is a speed physics rules out: the setting that won its race on it is
    not chosen, the default stays and both the verdict and the reason say why; with a peak
    that allows it (the control) the same runs crown it."""
    events = {
        sid: [run_with_evals(tmp_path / sid, repeat=r, step_s=step * (1 + 0.01 * r), iterations=8, evals=[(8, 0.85)]) for r in range(6)]
        for sid, step in (("d", 0.02), ("fast", 0.01))
    }  # fmt: skip
    samples, failed, unlearned = choice.race_samples(events, "d")
    check = choice.race(samples, "d", budget=24, failed=failed, unlearned=unlearned)
    assert check["status"]["fast"]["state"] == "won"
    flops = roofline.flops_per_sample("lenet")
    for peak_samples, chosen in ((4800.0, "d"), (48000.0, "fast")):  # fast runs ~6,300 samples/s
        peak = {"peak_flops": {"1": peak_samples * flops}}
        record = choice.choose("torch", "lenet", {"d": {}, "fast": {"x": 1}}, events, "d", peak, check)
        fast = next(row for row in record["settings"] if row["id"] == "fast")
        assert record["chosen"] == chosen
        if chosen == "d":
            assert fast["roofline_fraction"] > 1 and fast["verdict"].startswith("not chosen: 1.3")
            assert "matmul roofline allows: fast" in record["reason"]
        else:
            assert fast["roofline_fraction"] < 1 and fast["verdict"].startswith("won: +")


# --- the settings record ----------------------------------------------------------------------


def test_launcher_settings_describe_the_engine_and_threads(schema):
    s = study(schema)
    run = Run("torch", "alexnet", 1, 1, 16, 0)
    s["models"] = ["lenet", "alexnet"]
    spec = run_spec(s, run, {"mkldnn": False})
    assert torch_launcher.settings(spec) == {
        "engine": "native",
        "mkldnn": False,
        "channels_last": True,
        "intra_op_threads": 1,
    }
    # LeNet does not use channels_last (dlscale.runners.torch.data): the record says so.
    assert torch_launcher.settings(run_spec(s, Run("torch", "lenet", 1, 1, 64, 0)))["channels_last"] is False
    tf = run_spec(s, Run("tensorflow", "lenet", 1, 1, 64, 0), {"onednn": False, "inter_op_threads": 1})
    assert tf_launcher.settings(tf) == {
        "engine": "eigen",
        "TF_ENABLE_ONEDNN_OPTS": "0",
        "intra_op_threads": 1,
        "inter_op_threads": 1,
    }


def test_run_settings_add_the_thread_variables_the_ranks_get(schema):
    spec = run_spec(study(schema), Run("torch", "lenet", 1, 1, 64, 0))
    plan = Plan(
        [Process("rank 0", ["true"], {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}, rank=0)], 1
    )
    record = records.run_settings(torch_launcher, spec, plan)
    assert record["engine"] == "onednn"
    assert record["env"] == {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def test_channels_last_all_models_reaches_the_spec_hash_and_run_start_only_when_set(schema):
    """Unset (null), a spec is byte-for-byte what it was before the option existed (no key,
    same hash, LeNet contiguous); set, it is in the spec and changes the hash, and run_start's
    settings record the memory format it gives LeNet (measured in
    tests/runners/test_torch_runner.py) and the option itself where it changes that layout
    (true on LeNet; false is the rule's own layout there)."""
    run = Run("torch", "lenet", 1, 1, 64, 0)
    plain = run_spec(study(schema), run)
    assert "channels_last_all_models" not in plain.to_dict()["options"]
    assert "channels_last_all_models" not in torch_launcher.settings(plain)
    assert torch_launcher.settings(plain)["channels_last"] is False
    for value in (True, False):
        spec = run_spec(study(schema), run, {"channels_last_all_models": value})
        assert spec.to_dict()["options"]["channels_last_all_models"] is value
        assert spec.sha256 != plain.sha256 and spec.run_id == plain.run_id
        recorded = torch_launcher.settings(spec)
        assert recorded["channels_last"] is value
        assert recorded.get("channels_last_all_models") is (True if value else None)
    # Pinned in the framework's section: the study's runs carry it, and it is not tuned.
    s = validate_config({**BASE, "torch": {"channels_last_all_models": True}}, schema)
    assert run_spec(s, run).to_dict()["options"]["channels_last_all_models"] is True


# --- roofline ---------------------------------------------------------------------------------


def test_roofline_fraction_is_achieved_over_peak_per_rank():
    from dlscale.analysis.tables import add_roofline

    runs = pd.DataFrame(
        {
            "model": ["lenet", "lenet", "lenet"],
            "threads_per_rank": [1, 2, 4],
            "world_size": [1, 2, 1],
            "throughput": [1000.0, 3000.0, 10.0],
            "flops_per_sample": [roofline.flops_per_sample("lenet")] * 3,
        }
    )
    peak = {"peak_flops": {"1": 2.0e10, "2": 3.0e10}}
    out = add_roofline(runs, peak)
    flops = roofline.FLOPS_PER_SAMPLE["lenet"]
    assert out["roofline_fraction"][0] == pytest.approx(1000 * flops / 2.0e10)
    assert out["roofline_fraction"][1] == pytest.approx(3000 * flops / (2 * 3.0e10))
    assert math.isnan(out["roofline_fraction"][2])  # 4 threads: not measured
    assert add_roofline(runs, None)["roofline_fraction"].isna().all()


def test_thread_counts_cover_the_cores_and_the_study():
    assert roofline.thread_counts(2, 1) == [1, 2]
    assert roofline.thread_counts(2, 4) == [1, 2, 4]


def test_flops_per_sample_are_the_torch_models_count():
    """The constants are FlopCounterMode's count of the torch models (forward + backward):
    recounted here, so a model change that moves them fails this test."""
    code = (
        "import json; from benchmarks.torch_worker import build_model, count_flops, model_input\n"
        "out = {}\n"
        "for name in ('lenet', 'autoencoder'):\n"
        "    m = build_model(name); m.train(); out[name] = count_flops(m, *model_input(name, 2)) / 2\n"
        "print(json.dumps(out))"
    )
    proc = subprocess.run([str(torch_python()), "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counted = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counted == {name: roofline.FLOPS_PER_SAMPLE[name] for name in counted}


def test_listed_settings_replace_the_product(schema):
    s = study(schema, settings={"tensorflow": [{"onednn": False}, {"inter_op_threads": 1}]})
    assert grid.grid(s, "tensorflow") == [
        {"onednn": True, "inter_op_threads": 2},
        {"onednn": False, "inter_op_threads": 2},
        {"onednn": True, "inter_op_threads": 1},
    ]
    with pytest.raises(ConfigError, match=r"'tune.settings.tensorflow\[0\].onednn': 'no'"):
        study(schema, settings={"tensorflow": [{"onednn": "no"}]})
    with pytest.raises(ConfigError, match="give its grid one way"):
        study(schema, settings={"torch": [{"mkldnn": False}]}, options={"torch": {"mkldnn": [False]}})


def test_the_whole_torch_grid_races_each_memory_format_once_per_model(schema):
    """The default grid (every x-tune value): channels_last_all_models false is the rule's
    own layout on LeNet (contiguous), so beside null it is the same run, and LeNet races the
    rule and channels_last (x oneDNN on and off); the AutoEncoder, without 4-D tensors,
    races oneDNN alone."""
    s = validate_config(
        {**BASE, "frameworks": ["torch"], "models": ["lenet", "autoencoder"], "tune": {"enabled": True}},
        schema,
    )
    assert len(grid.grid(s, "torch")) == 4
    lenet, lenet_left = grid.model_grid_report(s, "torch", "lenet")
    assert sorted(json.dumps(v, sort_keys=True) for v in lenet.values()) == sorted(
        json.dumps({"channels_last_all_models": layout, "mkldnn": mkldnn}, sort_keys=True)
        for layout in (None, True)
        for mkldnn in (True, False)
    )
    assert lenet_left == {}  # the framework's grid left the two false settings out already
    assert len(grid.grid_report(s, "torch")[1]) == 2
    autoencoder, _ = grid.model_grid_report(s, "torch", "autoencoder")
    assert [v["mkldnn"] for v in autoencoder.values()] == [True, False]
