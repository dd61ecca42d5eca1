"""dlscale.perfmodel: the model's arithmetic on hand-computed cases, calibration on synthetic runs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from dlscale import figures
from dlscale import perfmodel as pm
from dlscale.networks import PRESETS, NetworkPreset

REPO = Path(__file__).resolve().parent.parent
MB = 1e6


# --- the patterns, by hand -------------------------------------------------------------------


def test_ring_allreduce_by_hand() -> None:
    # P = 4, S = 4 MB, alpha = 10 us, beta = 1 GB/s: 2*3*10us + 2*3/4 * 4MB / 1GB/s
    assert pm.ring_allreduce_s(4, 4 * MB, 10e-6, 1e9) == pytest.approx(60e-6 + 6e-3, rel=1e-12)
    # P = 2: one exchange of S each way in halves: 2 alpha + S / beta
    assert pm.ring_allreduce_s(2, 4 * MB, 10e-6, 1e9) == pytest.approx(20e-6 + 4e-3, rel=1e-12)
    assert pm.ring_allreduce_s(1, 4 * MB, 10e-6, 1e9) == 0.0


def test_parameter_servers_by_hand() -> None:
    # 8 workers, 2 servers, S = 1 MB, beta = 100 MB/s: each server link carries 4 MB each way
    assert pm.parameter_server_s(8, 1 * MB, 10e-6, 100 * MB, num_ps=2) == pytest.approx(
        20e-6 + 0.08, rel=1e-12
    )
    # 1 worker, 2 servers: the worker's own link (S each way) is the bottleneck
    assert pm.parameter_server_s(1, 1 * MB, 10e-6, 100 * MB, num_ps=2) == pytest.approx(
        20e-6 + 0.02, rel=1e-12
    )


def test_bigdl_sync_by_hand() -> None:
    # 4 executors, S = 4 MB, alpha 10 us, beta 1 GB/s, 50 ms of Spark scheduling
    assert pm.bigdl_sync_s(4, 4 * MB, 10e-6, 1e9, 0.05) == pytest.approx(0.05 + 60e-6 + 6e-3, rel=1e-12)
    assert pm.bigdl_sync_s(1, 4 * MB, 10e-6, 1e9, 0.05) == pytest.approx(0.05)


@pytest.mark.parametrize("peers", [1, 2, 3, 8, 64])
def test_terms_match_the_closed_forms(peers: int) -> None:
    size, alpha, beta, c = 3 * MB, 7e-6, 2e9, 0.004

    def comm(pattern: str, num_ps: int = 1) -> float:
        t = pm.comm_terms(pattern, peers, size, num_ps)
        return t.fixed * c + t.messages * alpha + t.bytes / beta

    ring = pm.ring_allreduce_s(peers, size, alpha, beta)
    assert comm(pm.RING) == pytest.approx(ring + (c if peers > 1 else 0.0), rel=1e-12)
    assert comm(pm.PS, 2) == pytest.approx(c + pm.parameter_server_s(peers, size, alpha, beta, 2), rel=1e-12)
    assert comm(pm.BIGDL) == pytest.approx(pm.bigdl_sync_s(peers, size, alpha, beta, c), rel=1e-12)


def test_peers_and_gradient_bytes() -> None:
    assert pm.peers_of(pm.RING, 4, 2) == 8
    assert pm.peers_of(pm.PS, 4, 2) == 8
    assert pm.peers_of(pm.BIGDL, 4, 2) == 4  # one executor per node
    assert pm.gradient_bytes("lenet") == 431_080 * 4
    assert dict(pm.PARAMETERS) == {
        "lenet": 431_080,
        "autoencoder": 2_837_314,
        "alexnet": 61_100_840,
        "resnet50": 25_557_032,
    }
    with pytest.raises(ValueError, match="unknown synchronisation pattern"):
        pm.comm_terms("gossip", 2, 1.0)


def test_node_counts() -> None:
    assert pm.node_counts(1024) == [2**k for k in range(11)]
    assert pm.node_counts(6) == [1, 2, 4, 6]
    assert pm.node_counts(1) == [1]
    with pytest.raises(ValueError):
        pm.node_counts(0)


def test_prediction_error_arithmetic() -> None:
    assert pm.prediction_error(1.1, 1.0) == pytest.approx(0.1)
    assert pm.prediction_error(0.5, 2.0) == pytest.approx(-0.75)
    assert math.isnan(pm.prediction_error(1.0, 0.0))
    assert math.isnan(pm.prediction_error(math.nan, 1.0))


def test_setup_of_reads_the_tensorflow_strategy() -> None:
    assert pm.setup_of("tensorflow", json.dumps({"strategy": "ps"})) == "tensorflow-ps"
    assert pm.setup_of("tensorflow", json.dumps({"strategy": "mwms"})) == "tensorflow"
    assert pm.setup_of("tensorflow", "{}") == "tensorflow"
    assert pm.setup_of("tensorflow", "not json") == "tensorflow"
    assert pm.setup_of("torch", None) == "torch"


# --- calibration ------------------------------------------------------------------------------


def run_row(
    framework: str,
    model: str,
    nodes: int,
    *,
    compute: float,
    exposed: float,
    ranks_per_node: int = 1,
    batch: int = 32,
    network: str = "host",
    repeat: int = 0,
    strategy: str | None = None,
    step: float | None = None,
) -> dict[str, Any]:
    """One ok row of a runs table with what the model reads (as dlscale.analysis writes it)."""
    world = nodes * ranks_per_node
    suffix = "" if network == "host" else "-" + network.removeprefix("emulated-")
    step = compute + exposed if step is None else step
    versions = {"strategy": strategy} if strategy else {}
    return {
        "run_id": f"{framework}/{model}/n{nodes}x{ranks_per_node}{suffix}/b{batch}/r{repeat}",
        "framework": framework,
        "model": model,
        "network": network,
        "nodes": nodes,
        "ranks_per_node": ranks_per_node,
        "world_size": world,
        "batch_per_rank": batch,
        "status": "ok",
        "step_s": step,
        "compute_s": compute,
        "comm_s": exposed,
        "exposed_comm_s": step - compute,
        "throughput": world * batch / step,
        "speedup": math.nan,
        "efficiency": math.nan,
        "versions": json.dumps(versions),
    }


COMPUTE = {"lenet": 0.01, "autoencoder": 0.015, "alexnet": 0.5, "resnet50": 1.6}


def synthetic_runs(
    framework: str, c: float, alpha: float, beta: float, worlds: list[int], strategy: str | None = None
) -> list[dict[str, Any]]:
    """Host runs whose exposed communication is exactly the model's, for every model."""
    pattern = pm.SETUP_PATTERN[pm.setup_of(framework, json.dumps({"strategy": strategy} if strategy else {}))]
    rows = []
    for model, compute in COMPUTE.items():
        for nodes in worlds:
            t = pm.comm_terms(pattern, nodes, pm.gradient_bytes(model), num_ps=1)
            exposed = t.fixed * c + t.messages * alpha + t.bytes / beta
            rows.append(run_row(framework, model, nodes, compute=compute, exposed=exposed, strategy=strategy))
    return rows


@pytest.mark.parametrize(
    ("framework", "strategy", "worlds"),
    [("torch", None, [1, 2, 4, 8]), ("tensorflow", "ps", [1, 2, 4]), ("bigdl", None, [1, 2, 4])],
)
def test_calibration_recovers_known_costs(framework: str, strategy: str | None, worlds: list[int]) -> None:
    c, alpha, beta = 0.003, 40e-6, 0.8e9
    runs = pd.DataFrame(synthetic_runs(framework, c, alpha, beta, worlds, strategy))
    cal = pm.calibrate(runs)[pm.setup_of(framework, json.dumps({"strategy": strategy} if strategy else {}))]
    if strategy == "ps":  # always 2 messages (push, pull): the latency is part of the fixed cost
        assert cal.fitted == ("c", "gamma")
        assert cal.overhead_s == pytest.approx(c + 2 * alpha, rel=1e-9)
    else:
        assert cal.fitted == ("c", "alpha", "gamma")
        assert cal.overhead_s == pytest.approx(c, rel=1e-9)
        assert cal.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert cal.beta_Bps == pytest.approx(beta, rel=1e-9)
    assert cal.rel_rmse < 1e-9
    # ring runs at world 1 do not communicate and are not calibration points; ps and BigDL ones are
    expected = len(COMPUTE) * (len(worlds) - (1 if framework == "torch" else 0))
    assert cal.runs == expected


def test_one_world_size_cannot_separate_latency_from_fixed_cost() -> None:
    runs = pd.DataFrame(synthetic_runs("torch", 0.003, 40e-6, 0.8e9, [1, 2]))
    cal = pm.calibrate(runs)["torch"]
    assert cal.fitted == ("c", "gamma")
    assert cal.alpha_s == 0.0
    assert cal.overhead_s == pytest.approx(0.003 + 2 * 40e-6, rel=1e-9)  # c holds the 2 latencies
    assert cal.beta_Bps == pytest.approx(0.8e9, rel=1e-9)
    table = pm.calibration_table({"torch": cal}, pm.loopback_preset({"torch": cal}))
    assert math.isnan(table.loc[0, "alpha_s"]) and table.loc[0, "fitted"] == "c;gamma"


def test_fit_is_non_negative() -> None:
    # y = S * 1e-9 - 0.001: unconstrained least squares would give c = -0.001
    sizes = [1e6, 1e7, 1e8]
    c, alpha, gamma, fitted = pm.fit_overheads(
        [1, 1, 1], [2, 2, 2], sizes, [s * 1e-9 - 0.0005 for s in sizes]
    )
    assert c == 0.0 and alpha == 0.0 and gamma > 0
    assert fitted == ("c", "gamma")
    # one measurement: bandwidth only
    c, alpha, gamma, fitted = pm.fit_overheads([1], [2], [1e6], [0.002])
    assert (c, alpha, fitted) == (0.0, 0.0, ("gamma",)) and gamma == pytest.approx(2e-9)
    # no bytes at all (BigDL on one node): only the fixed cost, bandwidth unknown
    c, alpha, gamma, fitted = pm.fit_overheads([1, 1], [0, 0], [0, 0], [0.05, 0.07])
    # relative least squares: c minimises sum(((c - y) / y)^2), c = sum(1/y) / sum(1/y^2)
    expected = (1 / 0.05 + 1 / 0.07) / (1 / 0.05**2 + 1 / 0.07**2)
    assert c == pytest.approx(expected, rel=1e-12) and math.isnan(gamma) and fitted == ("c",)


def test_no_runs_that_communicate_calibrate_nothing() -> None:
    runs = pd.DataFrame([run_row("torch", "lenet", 1, compute=0.01, exposed=0.0)])
    assert pm.calibrate(runs) == {}
    assert pm.calibrate(pd.DataFrame()) == {}
    loopback = pm.loopback_preset({})
    assert (loopback.latency_s, loopback.bandwidth_Bps) == (0.0, math.inf)


# --- networks: the loopback and the overheads on top of a preset ------------------------------


def two_frameworks() -> tuple[dict[str, pm.Calibration], NetworkPreset]:
    rows = synthetic_runs("torch", 0.002, 20e-6, 1.0e9, [1, 2, 4]) + synthetic_runs(
        "caffe", 0.004, 50e-6, 0.5e9, [1, 2, 4]
    )
    cals = pm.calibrate(pd.DataFrame(rows))
    return cals, pm.loopback_preset(cals)


def test_loopback_is_the_fastest_framework_and_reproduces_the_host() -> None:
    cals, loopback = two_frameworks()
    assert loopback.latency_s == pytest.approx(20e-6, rel=1e-9)
    assert loopback.bandwidth_Bps == pytest.approx(1.0e9, rel=1e-9)
    size = pm.gradient_bytes("alexnet")
    for name, (c, alpha, beta) in {"torch": (0.002, 20e-6, 1e9), "caffe": (0.004, 50e-6, 0.5e9)}.items():
        host = pm.predict_comm_s(cals[name], loopback, loopback, 4, size)
        assert host == pytest.approx(c + pm.ring_allreduce_s(4, size, alpha, beta), rel=1e-9)
    table = pm.calibration_table(cals, loopback).set_index("setup")
    assert table.loc["caffe", "bandwidth_efficiency"] == pytest.approx(0.5, rel=1e-9)
    assert table.loc["torch", "bandwidth_efficiency"] == pytest.approx(1.0, rel=1e-9)


def test_overheads_add_to_a_slower_network() -> None:
    cals, loopback = two_frameworks()
    net = NetworkPreset("slow", 100e-6, 100e6, True, "test")
    alpha, gamma = pm.effective_link(cals["caffe"], net, loopback)
    assert alpha == pytest.approx(100e-6 + (50e-6 - 20e-6), rel=1e-9)
    assert gamma == pytest.approx(1 / 100e6 + (1 / 0.5e9 - 1 / 1e9), rel=1e-9)
    size = pm.gradient_bytes("lenet")
    expected = 0.004 + 2 * 3 * alpha + 2 * 3 / 4 * size * gamma
    assert pm.predict_comm_s(cals["caffe"], net, loopback, 4, size) == pytest.approx(expected, rel=1e-9)
    # the fastest framework adds nothing to the network
    assert pm.effective_link(cals["torch"], net, loopback) == pytest.approx((100e-6, 1 / 100e6), rel=1e-9)


def test_network_preset_names() -> None:
    loopback = pm.loopback_preset({})
    assert pm.network_preset("loopback", loopback) is loopback
    assert pm.network_preset("host", loopback) is loopback
    assert pm.network_preset("th-express2", loopback) is PRESETS["th-express2"]
    assert pm.network_preset("emulated-1gbe", loopback) is PRESETS["1gbe"]
    with pytest.raises(KeyError):
        pm.network_preset("emulated-warp", loopback)


def test_schema_offers_every_preset_for_the_projection() -> None:
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    projection = schema["properties"]["projection"]["properties"]
    assert set(projection["network"]["enum"]) == {pm.LOOPBACK, *PRESETS}
    assert projection["network"]["default"] == "th-express2"
    assert projection["max_nodes"]["default"] == 1024


# --- validation -------------------------------------------------------------------------------


def test_validation_predicts_from_host_runs_alone() -> None:
    rows = synthetic_runs("torch", 0.002, 20e-6, 1.0e9, [1, 2, 4])
    net = PRESETS["1gbe"]
    size = pm.gradient_bytes("lenet")
    # The emulation caps bandwidth only: its links keep the host's latency (20 us here).
    host_alpha = 20e-6
    comm2 = 0.002 + pm.ring_allreduce_s(2, size, host_alpha, net.bandwidth_Bps)
    comm8 = 0.002 + pm.ring_allreduce_s(8, size, host_alpha, net.bandwidth_Bps)
    # measured: 2 nodes 10% slower than the model; 8 nodes (no host run at 8) 20% faster
    rows.append(
        run_row(
            "torch",
            "lenet",
            2,
            compute=0.011,
            exposed=0.0,
            network="emulated-1gbe",
            step=(0.01 + comm2) / 1.1,
        )
    )
    rows.append(
        run_row(
            "torch", "lenet", 8, compute=0.02, exposed=0.0, network="emulated-1gbe", step=(0.01 + comm8) / 0.8
        )
    )
    rows.append(run_row("caffe", "lenet", 2, compute=0.01, exposed=0.01, network="emulated-1gbe"))
    runs = pd.DataFrame(rows)
    cals = pm.calibrate(runs)
    assert set(cals) == {"torch"}  # emulated runs never enter the calibration
    table = pm.validate(runs, cals, pm.loopback_preset(cals)).set_index("run_id")
    assert list(table.reset_index().columns) == list(pm.VALIDATION_COLUMNS)
    two = table.loc["torch/lenet/n2x1-1gbe/b32/r0"]
    # host runs at n2x1 computed in 0.01 s: that is the compute used
    assert two["predicted_compute_s"] == pytest.approx(0.01) and two["compute_source"] == "host runs at n2x1"
    assert two["predicted_s"] == pytest.approx(0.01 + comm2, rel=1e-9)
    assert two["error"] == pytest.approx(0.1, rel=1e-9)
    assert two["alpha_s"] == pytest.approx(host_alpha) and two["beta_Bps"] == net.bandwidth_Bps
    eight = table.loc["torch/lenet/n8x1-1gbe/b32/r0"]
    assert eight["compute_source"] == "smallest world (1)"
    assert eight["error"] == pytest.approx(-0.2, rel=1e-9)
    caffe = table.loc["caffe/lenet/n2x1-1gbe/b32/r0"]
    assert math.isnan(caffe["predicted_s"]) and "no host-network runs of caffe" in caffe["note"]
    summary = pm.validation_summary(table.reset_index()).set_index("setup")
    assert summary.loc["torch", "median_abs_error"] == pytest.approx(0.15, rel=1e-9)
    assert summary.loc["torch", "max_abs_error"] == pytest.approx(0.2, rel=1e-9)
    assert (summary.loc["torch", "runs"], summary.loc["torch", "predicted"]) == (2, 2)
    assert (summary.loc["caffe", "runs"], summary.loc["caffe", "predicted"]) == (1, 0)


def test_validation_without_emulated_runs_is_empty() -> None:
    runs = pd.DataFrame(synthetic_runs("torch", 0.002, 20e-6, 1.0e9, [1, 2]))
    cals = pm.calibrate(runs)
    table = pm.validate(runs, cals, pm.loopback_preset(cals))
    assert table.empty and list(table.columns) == list(pm.VALIDATION_COLUMNS)
    assert pm.validation_summary(table).empty


# --- projection -------------------------------------------------------------------------------


def test_projection_by_hand() -> None:
    runs = pd.DataFrame(synthetic_runs("torch", 0.002, 20e-6, 1.0e9, [1, 2, 4]))
    cals = pm.calibrate(runs)
    loopback = pm.loopback_preset(cals)
    net = PRESETS["10gbe"]
    table = pm.project(runs, cals, net, loopback, max_nodes=1024)
    assert list(table.columns) == list(pm.PROJECTION_COLUMNS)
    assert len(table) == len(COMPUTE) * 11
    first = table[table["nodes"].eq(1)]
    assert (first["speedup"] == 1.0).all() and (first["efficiency"] == 1.0).all()
    assert (first["comm_s"] == 0.0).all()
    row = table[table["model"].eq("alexnet") & table["nodes"].eq(4)].iloc[0]
    comm = 0.002 + pm.ring_allreduce_s(4, pm.gradient_bytes("alexnet"), net.latency_s, net.bandwidth_Bps)
    step = 0.5 + comm
    assert row["comm_s"] == pytest.approx(comm, rel=1e-9)
    assert row["throughput"] == pytest.approx(4 * 32 / step, rel=1e-9)
    assert row["speedup"] == pytest.approx(4 * 0.5 / step, rel=1e-9)
    assert row["efficiency"] == pytest.approx(0.5 / step, rel=1e-9)
    for _, curve in table.groupby("model"):
        assert curve["efficiency"].is_monotonic_decreasing
        assert (curve["efficiency"] <= 1.0).all()


def test_projection_of_parameter_servers_collapses() -> None:
    """One parameter server carries every worker's gradient: efficiency falls like 1/N."""
    runs = pd.DataFrame(synthetic_runs("tensorflow", 0.002, 20e-6, 1.0e9, [1, 2, 4], strategy="ps"))
    cals = pm.calibrate(runs)
    table = pm.project(runs, cals, PRESETS["10gbe"], pm.loopback_preset(cals), max_nodes=64)
    alexnet = table[table["model"].eq("alexnet")].set_index("nodes")
    assert (alexnet["setup"] == "tensorflow-ps").all() and (alexnet["pattern"] == pm.PS).all()
    assert alexnet.loc[1, "efficiency"] == 1.0
    assert alexnet.loc[64, "efficiency"] < 0.05


def test_projection_keeps_the_batch_of_the_smallest_world() -> None:
    """A strong-scaling study halves the batch per rank at 2 nodes; the projection is weak from 1 node."""
    rows = [
        run_row("torch", "lenet", 1, compute=0.02, exposed=0.0, batch=64),
        run_row("torch", "lenet", 2, compute=0.01, exposed=0.004, batch=32),
    ]
    runs = pd.DataFrame(rows)
    cals = pm.calibrate(runs)
    table = pm.project(runs, cals, PRESETS["10gbe"], pm.loopback_preset(cals), max_nodes=4)
    assert table["nodes"].tolist() == [1, 2, 4]
    assert (table["batch_per_rank"] == 64).all() and (table["compute_s"] == 0.02).all()


def test_nothing_to_project_without_calibration() -> None:
    runs = pd.DataFrame([run_row("torch", "lenet", 1, compute=0.01, exposed=0.0)])
    table = pm.project(runs, {}, PRESETS["th-express2"], pm.loopback_preset({}))
    assert table.empty and list(table.columns) == list(pm.PROJECTION_COLUMNS)


def test_figures_with_and_without_data(tmp_path: Path) -> None:
    rows = synthetic_runs("torch", 0.002, 20e-6, 1.0e9, [1, 2, 4])
    rows.append(run_row("torch", "lenet", 2, compute=0.01, exposed=0.02, network="emulated-1gbe"))
    runs = pd.DataFrame(rows)
    cals = pm.calibrate(runs)
    loopback = pm.loopback_preset(cals)
    projection = pm.project(runs, cals, PRESETS["th-express2"], loopback, 16)
    validation = pm.validate(runs, cals, loopback)
    summary = pm.validation_summary(validation)
    out = {name: {"svg": str(tmp_path / "full" / f"{name}.svg")} for name in figures.PERFMODEL_FIGURES}
    figures.make_perfmodel_figures(projection, runs, validation, summary, out, host_model=projection)
    svg = (tmp_path / "full" / "validation.svg").read_text()
    assert "median |error|" in svg
    assert "th-express2" in (tmp_path / "full" / "projection.svg").read_text()
    empty = {name: {"svg": str(tmp_path / "empty" / f"{name}.svg")} for name in figures.PERFMODEL_FIGURES}
    nothing = pd.DataFrame()
    figures.make_perfmodel_figures(
        pm.project(nothing, {}, PRESETS["1gbe"], pm.loopback_preset({})),
        nothing,
        pm.validate(nothing, {}, pm.loopback_preset({})),
        pm.validation_summary(pd.DataFrame()),
        empty,
    )
    assert "no framework to project" in (tmp_path / "empty" / "projection.svg").read_text()
    assert "no runs on an emulated network" in (tmp_path / "empty" / "validation.svg").read_text()


def test_runs_on_different_networks_are_different_curves() -> None:
    """The study's figures draw host and emulated runs of one framework as separate lines."""
    rows = [
        {**run_row("torch", "lenet", n, compute=0.01, exposed=0.01, network=net), "scaling": "weak"}
        for n in (1, 2)
        for net in ("host", "emulated-1gbe")
    ]
    ok = pd.DataFrame(rows).assign(global_batch=lambda d: d["batch_per_rank"] * d["world_size"])
    series = figures._series(ok)
    assert series.nunique() == 2
    assert series[ok["network"].eq("emulated-1gbe")].str.endswith("emulated-1gbe)").all()
