"""dlscale.perfmodel: the patterns by hand, fits on synthetic sweeps, validation, projection, bands."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.paths import REPO
from helpers.perfmodel_inputs import TRUE, synthetic_bench

from dlscale import catalog
from dlscale import perfmodel as pm
from dlscale.catalog import CONFIG_SCHEMA
from dlscale.commbench.blobs import blob_bytes
from dlscale.networks import PRESETS
from dlscale.outputs import PERFMODEL_ALL_FIGURES
from dlscale.perfmodel import figures as perfmodel_figures
from dlscale.perfmodel import pipeline
from dlscale.study import validation

MB = 1e6


# --- the patterns, by hand -------------------------------------------------------------------


def test_ring_terms_by_hand() -> None:
    m, b = pm.ring_terms(4, 4 * MB)
    assert (float(m), float(b)) == (6.0, pytest.approx(6 / 4 * 4 * MB))
    m, b = pm.ring_terms(1, 4 * MB)
    assert (float(m), float(b)) == (0.0, 0.0)


def test_openmpi_decision_table() -> None:
    """Open MPI 4.1's fixed decision (commutative): a few cells of the table, by hand."""
    cases = {
        (2, 1000): 3, (2, 5000): 4, (2, 100_000): 5, (2, 1 << 20): 6,  # < 4 ranks
        (4, 8): 4, (4, 100): 3, (4, 10_000): 6,  # 4-7 ranks
        (8, 4096): 3, (8, 1 << 20): 6,
        (100, 100_000): 3, (100, 1 << 20): 6,
        (200, 1000): 2, (200, 200_000): 3,
        (1024, 1000): 2, (1024, 10_000): 3, (1024, 100_000): 6,
    }  # fmt: skip
    for (ranks, size), algorithm in cases.items():
        assert int(pm.openmpi_allreduce_algorithm(ranks, size)) == algorithm, (ranks, size)
    vector = pm.openmpi_allreduce_algorithm(np.array([2, 8, 1024]), np.array([1 << 20] * 3))
    assert vector.tolist() == [6, 6, 6]


def test_mpi_algorithm_terms_by_hand() -> None:
    s = 8 * MB
    # ring and segmented ring: 2(P-1) of S/P
    for alg in (4, 5):
        m, b = pm.mpi_algorithm_terms(alg, 8, s)
        assert (float(m), float(b)) == (14.0, pytest.approx(14 / 8 * s))
    # recursive doubling at 8: 3 steps of S; at 6 (not a power of 2): 2 + 2 extra
    assert [float(v) for v in pm.mpi_algorithm_terms(3, 8, s)] == [3.0, 3 * s]
    assert [float(v) for v in pm.mpi_algorithm_terms(3, 6, s)] == [4.0, 4 * s]
    # Rabenseifner at 1024: 20 messages, 2(1 - 1/1024) S; a ring would be 2046 messages
    m, b = pm.mpi_algorithm_terms(6, 1024, s)
    assert float(m) == 20.0 and float(b) == pytest.approx(2 * (1 - 1 / 1024) * s)
    assert [float(v) for v in pm.mpi_algorithm_terms(6, 1, s)] == [0.0, 0.0]


def test_contention() -> None:
    assert pm.contention([1, 2, 4, 8], 2).tolist() == [1.0, 1.0, 2.0, 4.0]
    assert pm.contention([8], None).tolist() == [1.0]


def test_link_wire_and_the_token_bucket() -> None:
    link = pm.Link("x", 10e-6, 1e-8, False, burst_bytes=1000)
    assert float(link.wire(2, 500)) == pytest.approx(20e-6)  # inside the bucket: no rate
    assert float(link.wire(2, 3000)) == pytest.approx(20e-6 + 2000 * 1e-8)
    emulated = pm.emulated_link("emulated-1gbe", {})
    assert emulated.gamma_s_per_byte == pytest.approx(1 / PRESETS["1gbe"].bandwidth_Bps)
    assert emulated.burst_bytes == 256 * 1024 and not emulated.ingress_shaped and emulated.alpha_s == 0.0
    real = pm.Link.of_preset(PRESETS["th-express2"])
    assert (real.alpha_s, real.burst_bytes, real.ingress_shaped) == (1.6e-6, 0.0, True)


# --- synthetic micro-benchmarks --------------------------------------------------------------


@pytest.fixture(scope="module")
def exact_fits() -> dict[tuple[str, str, str], pm.Fit]:
    return pm.fit_commbench(pm.commbench_cells(synthetic_bench()))


@pytest.mark.parametrize(
    ("library", "op", "truth"),
    [
        ("gloo", "allreduce", "gloo"),
        ("tf-ring", "allreduce", "tf-ring"),
        ("mpi", "allreduce", "mpi"),
        ("tf-ps", "pushpull", "tf-ps"),
        ("spark", "job", "job"),
        ("spark", "shuffle", "shuffle"),
        ("tcp", "pingpong", "tcp"),
    ],
)
def test_fits_recover_known_alpha_beta(exact_fits, library: str, op: str, truth: str) -> None:
    """Synthetic sweeps (sizes 1 KB-64 MB, worlds 2-8, contention on 2 cores) give back
    the costs they were made from, per-message and per-byte apart."""
    fit = exact_fits[(library, op, "host")]
    for name, value in TRUE[truth].items():
        assert fit.get(name) == pytest.approx(value, rel=1e-6), name
        assert name in fit.identified
    assert fit.rel_rmse < 1e-9 and fit.host_cores == 2


def test_fits_with_noise_stay_close_and_report_residuals() -> None:
    fits = pm.fit_commbench(pm.commbench_cells(synthetic_bench(noise=0.03, seed=3)))
    gloo = fits[("gloo", "allreduce", "host")]
    assert gloo.get("gamma") == pytest.approx(TRUE["gloo"]["gamma"], rel=0.05)
    assert gloo.get("alpha") == pytest.approx(TRUE["gloo"]["alpha"], rel=0.25)
    assert 0 < gloo.rel_rmse < 0.05 and gloo.max_abs_rel_error < 0.1
    table = pm.fits_table(fits)
    assert list(table.columns) == list(pm.FIT_COLUMNS)
    beta = table[(table["library"] == "gloo") & (table["coefficient"] == "beta_Bps")]["value"].iloc[0]
    assert beta == pytest.approx(1.2e9, rel=0.05)


def test_one_world_cannot_separate_latency_from_fixed_cost() -> None:
    raw = synthetic_bench()
    raw = raw[(raw["library"] == "gloo") & (raw["world"] == 2)]
    fit = pm.fit_commbench(pm.commbench_cells(raw))[("gloo", "allreduce", "host")]
    assert fit.identified == ("gamma", "c") and fit.get("alpha") == 0.0
    assert fit.get("c") == pytest.approx(TRUE["gloo"]["c"] + 2 * TRUE["gloo"]["alpha"], rel=1e-6)
    assert fit.get("gamma") == pytest.approx(TRUE["gloo"]["gamma"], rel=1e-6)


def test_latency_per_message_is_fitted_on_delayed_links() -> None:
    """On a link with an added delay, a library that waits for two latencies per ring step
    shows it: ``hops`` comes back as 2, and the link's delay from the TCP ping-pong."""
    raw = synthetic_bench()
    raw = raw[raw["library"].isin(["gloo", "tcp"])].assign(latency_us=0.0)
    delay, t, rows = 100e-6, TRUE["gloo"], []
    for world in (2, 4, 8):
        for s in (1024, 16384, 65536):  # inside the token bucket: no rate, only latency
            m, b = pm.ring_terms(world, s)
            seconds = max(1.0, world / 2) * (t["c"] + m * t["alpha"] + b * t["gamma"]) + 2 * m * delay
            rows.append(
                {"library": "gloo", "op": "allreduce", "world": world, "nbytes": s, "seconds": seconds}
            )
        rows.append(
            {"library": "tcp", "op": "pingpong", "world": 2, "nbytes": 1024 * world,
             "seconds": TRUE["tcp"]["alpha"] + delay + 1024 * world * TRUE["tcp"]["gamma"]}
        )  # fmt: skip
    delayed = pd.DataFrame(rows).assign(
        framework="x", network="emulated-1gbe", latency_us=100.0, parts=1, model="", algorithm="default",
        repeat=0, host_cores=2,
    )  # fmt: skip
    cells = pm.commbench_cells(pd.concat([raw, delayed], ignore_index=True))
    assert "emulated-1gbe+100us" in set(cells["network"])
    fits = pm.fit_commbench(cells)
    assert pm.emulated_link("emulated-1gbe+100us", fits).alpha_s == pytest.approx(delay, rel=1e-6)
    assert pm.hops(fits[("gloo", "allreduce", "host")]) == pytest.approx(2.0, rel=1e-3)
    checks = pm.commbench_checks(cells, fits)
    assert checks["error"].abs().max() < 1e-3


def test_nnls_is_non_negative() -> None:
    sizes = np.array([1e6, 1e7, 1e8])
    coef, identified, _ = pm.nnls_fit(
        {"c": np.ones(3), "gamma": sizes}, sizes * 1e-9 - 0.0005, ("gamma", "c")
    )
    assert coef["c"] == 0.0 and coef["gamma"] > 0 and identified == ("gamma", "c")


def test_blob_pattern_check(exact_fits) -> None:
    """Caffe's per-blob pattern measured against the sum over blobs of the flat fit."""
    t = TRUE["mpi"]
    p = 4
    sizes = np.array(blob_bytes("lenet"), dtype=float)
    m, b = pm.mpi_algorithm_terms(pm.openmpi_allreduce_algorithm(p, sizes), p, sizes)
    seconds = float(np.sum(2 * (t["c"] + m * t["alpha"] + b * t["gamma"])))
    row = {
        "framework": "caffe", "library": "mpi", "op": "allreduce-blobs", "network": "host", "world": p,
        "nbytes": int(sizes.sum()), "parts": len(sizes), "model": "lenet", "algorithm": "default",
        "repeat": 0, "seconds": seconds, "host_cores": 2,
    }  # fmt: skip
    cells = pm.commbench_cells(pd.concat([synthetic_bench(), pd.DataFrame([row])], ignore_index=True))
    check = pm.commbench_checks(cells, exact_fits)
    assert check.loc[0, "model"] == "lenet" and abs(check.loc[0, "error"]) < 1e-6


# --- runs, calibration, the Spark driver ---------------------------------------------------------


def run_row(
    framework: str,
    model: str,
    nodes: int,
    *,
    compute: float,
    exposed: float,
    network: str = "host",
    batch: int = 64,
    strategy: str | None = None,
    step: float | None = None,
) -> dict[str, Any]:
    """One ok row of a runs table with what the model reads (as dlscale.analysis.aggregate writes it)."""
    suffix = "" if network == "host" else "-" + network.removeprefix("emulated-")
    step = compute + exposed if step is None else step
    return {
        "run_id": f"{framework}/{model}/n{nodes}x1{suffix}/b{batch}/r0",
        "framework": framework, "model": model, "network": network, "nodes": nodes,
        "ranks_per_node": 1, "world_size": nodes, "batch_per_rank": batch, "status": "ok",
        "step_s": step, "compute_s": compute, "comm_s": exposed, "exposed_comm_s": step - compute,
        "throughput": nodes * batch / step, "speedup": math.nan, "efficiency": math.nan,
        "versions": json.dumps({"strategy": strategy} if strategy else {}),
    }  # fmt: skip


def modelled_runs(fits, offset: float = 0.002, compute: float = 0.016) -> pd.DataFrame:
    """Host runs whose exposed time is the model's library time plus ``offset``."""
    cals = pm.calibrate(pd.DataFrame(), fits)
    rows = []
    for setup, cal in cals.items():
        framework, strategy = setup.split("-")[0], ("ps" if setup.endswith("-ps") else None)
        for nodes in (1, 2, 4):
            contended = compute * max(1.0, nodes / 2)
            library = float(pm.library_comm(cal, "lenet", [nodes], 1, pm.Link.host(), 2, 1, 64, "mnist")[0])
            exposed = library + (offset if library > 0 else 0.0)
            rows.append(
                run_row(framework, "lenet", nodes, compute=contended, exposed=exposed, strategy=strategy)
            )
    return pd.DataFrame(rows)


def test_calibration_takes_the_library_from_benchmarks_and_the_offset_from_runs(exact_fits) -> None:
    runs = modelled_runs(exact_fits, offset=0.002)
    cals = pm.calibrate(runs, exact_fits)
    assert set(cals) == set(catalog.SETUP_PATTERNS)
    for cal in cals.values():
        assert cal.source == "commbench"
        # BigDL's runs at 1, 2 and 4 executors give its Spark line, whose fixed cost takes
        # the offset in (the line is fitted on the same exposed time)
        offset = 0.0 if cal.pattern == pm.BIGDL else 0.002
        assert cal.offset_s == pytest.approx(offset, abs=1e-9)
        assert cal.host_rel_rmse < 1e-6
    table = pm.calibration_table(cals).set_index("setup")
    assert list(table.reset_index().columns) == list(pm.CALIBRATION_COLUMNS)
    assert table.loc["bigdl", "job_per_executor_s"] == pytest.approx(TRUE["job"]["per_task"])
    assert table.loc["bigdl", "spark_source"] == "runs"
    assert table.loc["bigdl", "spark_step_s"] == pytest.approx(2 * TRUE["job"]["c"] + 0.002)
    assert table.loc["bigdl", "spark_step_per_executor_s"] == pytest.approx(2 * TRUE["job"]["per_task"])
    assert table.loc["torch", "spark_source"] == "" and math.isnan(table.loc["torch", "spark_step_s"])
    assert table.loc["torch", "beta_Bps"] == pytest.approx(1.2e9)


def test_the_projection_keeps_only_the_offset_of_runs_with_a_core_per_rank(exact_fits) -> None:
    """With more ranks than cores the wait for the slowest rank is this host's: left out."""
    runs = modelled_runs(exact_fits, offset=0.002)
    contended = runs["world_size"].gt(2)
    runs.loc[contended, "step_s"] += 0.05
    runs.loc[contended, "exposed_comm_s"] += 0.05
    cal = pm.calibrate(runs, exact_fits)["torch"]
    assert cal.projection_offset_s == pytest.approx(0.002)
    assert pm.calibration_table({"torch": cal}).loc[0, "projection_offset_s"] == pytest.approx(0.002)
    # validation on this host keeps the contention: 4 ranks on 2 cores wait 50 ms more
    assert cal.offset_s == pytest.approx(0.002) and cal.offset_per_contention_s == pytest.approx(0.05)
    assert cal.offset([2, 4, 8]) == pytest.approx([0.002, 0.052, 0.152])
    assert cal.offset([4], projected=True) == pytest.approx([0.002])


def test_the_host_offset_is_a_line_in_the_oversubscription_where_the_runs_span_it() -> None:
    """Known (o_0, o_1) are recovered; one contention level, or BigDL, gives the median."""
    excess = np.array([0.0, 0.0, 1.0, 1.0, 3.0, 3.0])
    residual = 0.004 + 0.035 * excess + np.array([1, -1, 1, -1, 1, -1]) * 1e-3
    o_0, o_1, o_2 = pm.offset_fit(residual, excess)
    assert o_0 == pytest.approx(0.004, abs=1e-9) and o_1 == pytest.approx(0.035, abs=1e-9) and o_2 == 0.0
    assert pm.offset_fit([0.01, 0.03, 0.02], [1.0, 1.0, 1.0]) == (pytest.approx(0.02), 0.0, 0.0)
    # a residual that falls with contention is not a negative wait: the slope stays at 0
    o_0, o_1, _ = pm.offset_fit([0.05, 0.03, 0.01], [0.0, 1.0, 3.0])
    assert o_1 == 0.0 and o_0 == pytest.approx(0.03)


def test_the_host_offset_has_a_per_byte_term_where_the_runs_have_two_gradient_sizes() -> None:
    """The runner's copies of the gradient scale with its bytes, slowed by rho like the
    library's per-byte work: (o_0, o_1, o_2) come back from runs of two models at three
    contention levels; with one model the per-byte term is not identified and stays 0."""
    sizes = np.repeat([1.7e6, 244e6], 3)
    rho = np.tile([1.0, 2.0, 4.0], 2)
    residual = 0.003 + 0.03 * (rho - 1) + 0.7e-9 * sizes * rho
    o_0, o_1, o_2 = pm.offset_fit(residual, rho - 1, sizes, rho)
    assert (o_0, o_1, o_2) == (pytest.approx(0.003), pytest.approx(0.03), pytest.approx(0.7e-9))
    one_model = sizes == sizes[0]
    assert pm.offset_fit(residual[one_model], rho[one_model] - 1, sizes[one_model], rho[one_model])[2] == 0.0


def test_a_large_model_gets_its_gradient_copies_in_validation_and_projection(exact_fits) -> None:
    """Host runs of LeNet and AlexNet whose exposed time has the library model plus 1 ns
    per gradient byte per rank (times rho): the offset carries it, for validation at the
    run's contention and for the projection at one rank per core."""
    per_byte = 1e-9
    rows = []
    cal = pm.calibrate(pd.DataFrame(), exact_fits)["torch"]
    for model in ("lenet", "alexnet"):
        size = pm.gradient_bytes(model)
        for nodes in (1, 2, 4):
            library = float(pm.library_comm(cal, model, [nodes], 1, pm.Link.host(), 2, 1, 64, "mnist")[0])
            rho = max(1.0, nodes / 2)
            exposed = library + (0.002 + per_byte * size * rho if nodes > 1 else 0.0)
            row = run_row("torch", model, nodes, compute=0.016 * rho, exposed=exposed)
            row["comm_s"] = library + 0.002 + per_byte * size if nodes > 1 else 0.0
            rows.append(row)
    cal = pm.calibrate(pd.DataFrame(rows), exact_fits)["torch"]
    assert cal.offset_per_byte_s == pytest.approx(per_byte, rel=1e-6)
    assert cal.offset_s == pytest.approx(0.002, abs=1e-9) and cal.offset_per_contention_s == pytest.approx(
        0.0, abs=1e-9
    )
    alexnet = pm.gradient_bytes("alexnet")
    assert cal.offset([4], nbytes=alexnet) == pytest.approx([0.002 + 2 * per_byte * alexnet])
    assert cal.projection_offset_per_byte_s == pytest.approx(per_byte, rel=1e-6)
    assert cal.offset([64], projected=True, nbytes=alexnet) == pytest.approx([0.002 + per_byte * alexnet])
    # LeNet's projection keeps its own small offset, not AlexNet's
    assert cal.offset([64], projected=True, nbytes=pm.gradient_bytes("lenet"))[0] < 0.004


def test_bigdl_keeps_one_offset_beside_its_spark_line(exact_fits) -> None:
    runs = modelled_runs(exact_fits, offset=0.002)
    contended = runs["framework"].eq("bigdl") & runs["nodes"].gt(2)
    runs.loc[contended, ["step_s", "exposed_comm_s"]] += 0.05
    cal = pm.calibrate(runs, exact_fits)["bigdl"]
    assert cal.offset_per_contention_s == 0.0
    assert cal.offset([1, 2, 4]) == pytest.approx([cal.offset_s] * 3)


@pytest.mark.parametrize("slope", [2e-3, 0.0])
def test_spark_cost_grows_with_executors_when_the_data_say_so(slope: float) -> None:
    fits = pm.fit_commbench(pm.commbench_cells(synthetic_bench(job_slope=slope)))
    cal = pm.calibrate(pd.DataFrame(), fits)["bigdl"]
    assert cal.fits["job"].get("per_task") == pytest.approx(slope, abs=1e-9)
    nodes = np.array([1, 16, 256, 1024])
    link = pm.Link.of_preset(PRESETS["th-express2"])
    comm = pm.library_comm(cal, "lenet", nodes, 1, link, None)
    scheduling = pm.BIGDL_JOBS_PER_ITERATION * (TRUE["job"]["c"] + nodes * slope)
    fp16 = pm.gradient_bytes("lenet") / 2  # BigDL exchanges its parameters as FP16
    exchange = (
        2 * (nodes - 1) * TRUE["shuffle"]["alpha"] + 2 * (nodes - 1) / nodes * fp16 * TRUE["shuffle"]["gamma"]
    )
    wire = link.wire(2 * (nodes - 1), 2 * (nodes - 1) / nodes * fp16)
    # the driver's block-location lookups: each executor fetches N-1 weight and N-1 gradient slices
    lookups = pm.SPARK_BLOCK_LOOKUP_S * 2 * nodes * (nodes - 1)
    assert comm == pytest.approx(scheduling + lookups + exchange + wire, rel=1e-9)
    driver = comm - exchange - wire - lookups  # the Spark driver's scheduling of 2 jobs per iteration
    if slope:  # grows with the executors: 2 jobs x 1024 tasks x 2 ms at 1024 nodes
        assert np.all(np.diff(driver) > 0)
        assert driver[-1] == pytest.approx(2 * (TRUE["job"]["c"] + 1024 * slope), rel=1e-6)
    else:  # flat when the data are
        assert driver == pytest.approx(np.full(4, 2 * TRUE["job"]["c"]), rel=1e-6)


def bigdl_runs(
    fits,
    slope: float,
    fixed: float = 0.15,
    counts: tuple[int, ...] = (1, 2, 4),
    repeats: int = 1,
    noise: float = 0.0,
    seed: int = 0,
    network: str = "host",
    compute: float = 0.05,
) -> pd.DataFrame:
    """BigDL LeNet runs whose exposed time is the modelled block exchange (micro-benchmark
    ``shuffle`` fit, 2 host cores) plus a Spark cost per iteration of ``fixed + slope·N``."""
    micro = pm.calibrate(pd.DataFrame(), fits)["bigdl"]
    rng = np.random.default_rng(seed)
    rows = []
    for nodes in counts:
        library = pm.library_comm(micro, "lenet", [nodes], 1, pm.Link.host(), 2)
        exchange = float(library[0] - pm.spark_step_cost(micro, [nodes])[0])
        for r in range(repeats):
            lookups = float(pm.spark_lookup_cost([nodes])[0])  # the driver's, modelled apart
            exposed = (exchange + lookups + fixed + slope * nodes) * (1 + noise * rng.standard_normal())
            row = run_row("bigdl", "lenet", nodes, compute=compute, exposed=exposed, network=network)
            rows.append(dict(row, run_id=row["run_id"].replace("/r0", f"/r{r}")))
    return pd.DataFrame(rows)


def bigdl_exchange(micro: pm.Calibration, nodes: np.ndarray, link: pm.Link) -> np.ndarray:
    """The library's BigDL time less its Spark per-iteration cost: the block exchange."""
    return pm.library_comm(micro, "lenet", nodes, 1, link, None) - pm.spark_step_cost(micro, nodes)


@pytest.mark.parametrize("slope", [0.12, 0.0])
def test_spark_cost_per_iteration_comes_from_runs_that_pin_it(exact_fits, slope: float) -> None:
    """Runs at 1, 2 and 4 executors whose Spark cost grows by ``slope`` per executor (60x the
    micro-benchmark's 2 x 2 ms) give a model whose BigDL time grows at the runs' slope, and a
    projection whose efficiency falls accordingly; flat runs give a flat term."""
    runs = bigdl_runs(exact_fits, slope, repeats=2)
    cal = pm.calibrate(runs, exact_fits)["bigdl"]
    step = cal.fits[pm.SPARK_STEP]
    assert step.get("c") == pytest.approx(0.15, rel=1e-6)
    assert step.get("per_executor") == pytest.approx(slope, abs=1e-9)
    assert step.worlds == (1, 2, 4) and step.points == 6 and step.rmse_s < 1e-9
    assert cal.offset_s == pytest.approx(0.0, abs=1e-9) and cal.projection_offset_s == pytest.approx(
        0.0, abs=1e-9
    )
    row = pm.calibration_table({"bigdl": cal}).iloc[0]
    assert row["spark_source"] == "runs" and row["spark_executors"] == "1;2;4" and row["spark_points"] == 6
    assert row["spark_step_per_executor_s"] == pytest.approx(slope, abs=1e-9)
    assert abs(row["spark_rmse_s"]) < 1e-9 and "step:c+per_executor" in row["fitted"]
    assert "host runs at 1;2;4 executors" in row["note"]

    micro = pm.calibrate(pd.DataFrame(), exact_fits)["bigdl"]
    nodes = np.array([1.0, 16, 256, 1024])
    link = pm.Link.of_preset(PRESETS["th-express2"])
    exchange = bigdl_exchange(micro, nodes, link)
    comm = pm.library_comm(cal, "lenet", nodes, 1, link, None)
    lookups = pm.SPARK_BLOCK_LOOKUP_S * 2 * nodes * (nodes - 1)  # the driver's, beside the line
    assert comm - exchange == pytest.approx(0.15 + slope * nodes + lookups, rel=1e-6)

    projected = pm.project(runs, {"bigdl": cal}, PRESETS["th-express2"], 1024).table.set_index("nodes")
    counts = projected.index.to_numpy(dtype="float64")
    steps = 0.05 + 0.15 + slope * counts + pm.spark_lookup_cost(counts) + bigdl_exchange(micro, counts, link)
    assert projected["efficiency"].to_numpy() == pytest.approx(steps[0] / steps, rel=1e-6)
    fallback = pm.project(runs, {"bigdl": micro}, PRESETS["th-express2"], 1024).table.set_index("nodes")
    if slope:  # 0.12 s per executor: below 50% from 2 executors on, far below the micro-benchmark's
        assert np.all(np.diff(projected["efficiency"]) < 0)
        # (up to 256: beyond it both are dominated by the driver's 2N(N-1) lookups, the same in both)
        below = projected.index <= 256
        assert np.all(projected["efficiency"][below].iloc[1:] < fallback["efficiency"][below].iloc[1:])
        assert projected.loc[1024, "efficiency"] < 0.01
    else:  # flat: only the exchange grows, and less than with the micro-benchmark's 4 ms per executor
        assert projected.loc[1024, "efficiency"] > fallback.loc[1024, "efficiency"]


def test_spark_line_has_a_non_negative_slope() -> None:
    """Runs whose Spark cost falls with the executors (noise on a shared host) give a flat
    term, never one that gets cheaper the more executors there are."""
    fits = pm.fit_commbench(pm.commbench_cells(synthetic_bench()))
    runs = bigdl_runs(fits, slope=-0.02, fixed=0.3)
    step = pm.calibrate(runs, fits)["bigdl"].fits[pm.SPARK_STEP]
    assert step.get("per_executor") == 0.0 and step.get("c") > 0
    assert dict(step.residuals_s).keys() == {1, 2, 4}


def test_one_executor_count_falls_back_to_the_micro_benchmark(exact_fits) -> None:
    """Runs at one executor count cannot pin a slope: the micro-benchmark's 2·(j_0 + j_1·N)."""
    runs = bigdl_runs(exact_fits, 0.12, counts=(2,), repeats=3)
    cal = pm.calibrate(runs, exact_fits)["bigdl"]
    assert pm.SPARK_STEP not in cal.fits
    nodes = np.array([1.0, 2, 64, 1024])
    job = TRUE["job"]
    lookups = pm.SPARK_BLOCK_LOOKUP_S * 2 * nodes * (nodes - 1)  # the driver's, beside the line
    assert pm.spark_step_cost(cal, nodes) == pytest.approx(
        2 * (job["c"] + job["per_task"] * nodes) + lookups, rel=1e-6
    )
    row = pm.calibration_table({"bigdl": cal}).iloc[0]
    assert row["spark_source"] == "commbench"
    assert row["spark_step_per_executor_s"] == pytest.approx(2 * job["per_task"], rel=1e-6)
    assert "one executor count (2)" in row["note"]


def test_held_out_runs_never_reach_the_spark_line(exact_fits) -> None:
    """The line is fitted on host-network runs only, in calibration and in every bootstrap
    replicate; the emulated runs are all validated, none fitted."""
    host = bigdl_runs(exact_fits, 0.12, repeats=2)
    emulated = bigdl_runs(exact_fits, 0.5, fixed=1.0, network="emulated-1gbe")
    both = pd.concat([host, emulated], ignore_index=True)
    alone, mixed = pm.calibrate(host, exact_fits)["bigdl"], pm.calibrate(both, exact_fits)["bigdl"]
    assert mixed.fits[pm.SPARK_STEP] == alone.fits[pm.SPARK_STEP]
    validation = pm.validate(both, {"bigdl": mixed}, exact_fits)
    assert sorted(validation["run_id"]) == sorted(emulated["run_id"])
    reps, _ = pm.bootstrap(both, synthetic_bench(), replicates=20, seed=1)
    slopes = [
        r["bigdl"].fits[pm.SPARK_STEP].get("per_executor") for r in reps if pm.SPARK_STEP in r["bigdl"].fits
    ]
    assert slopes and slopes == pytest.approx([0.12] * len(slopes), rel=1e-6)


def test_spark_band_reflects_the_runs_and_widens_without_them(exact_fits) -> None:
    """With exact micro-benchmarks and fixed compute, BigDL's band comes from the Spark line
    refitted on resampled runs alone; fewer runs (2 instead of 6 per executor count) widen it."""
    raw = synthetic_bench()
    full = bigdl_runs(exact_fits, 0.12, repeats=6, noise=0.15, seed=3)
    sparse = full.groupby("nodes", sort=False).head(2).reset_index(drop=True)

    def band(runs: pd.DataFrame) -> tuple[pd.Series, list[float]]:
        cals = pm.calibrate(runs, exact_fits)
        reps, curves = pm.bootstrap(runs, raw, replicates=60, seed=5)
        table = pm.project(
            runs, cals, PRESETS["th-express2"], 64, replicates=reps, replicate_curves=curves
        ).table
        slopes = [
            r["bigdl"].fits[pm.SPARK_STEP].get("per_executor")
            for r in reps
            if pm.SPARK_STEP in r["bigdl"].fits
        ]
        return table[(table["setup"] == "bigdl") & (table["nodes"] == 16)].iloc[0], slopes

    at16, slopes = band(full)
    assert at16["efficiency_lo"] <= at16["efficiency"] <= at16["efficiency_hi"]
    assert np.std(slopes) > 0.005  # the line is refitted in every replicate
    sparse16, _ = band(sparse)
    full_width = at16["efficiency_hi"] - at16["efficiency_lo"]
    assert full_width > 0
    assert sparse16["efficiency_hi"] - sparse16["efficiency_lo"] > 1.3 * full_width


def test_parameter_server_bottleneck_and_the_emulation_of_it(exact_fits) -> None:
    cal = pm.calibrate(pd.DataFrame(), exact_fits)["tensorflow-ps"]
    s = pm.gradient_bytes("alexnet")
    real = pm.Link("real", 0.0, 1e-9, True)
    emulated = pm.Link("emulated", 0.0, 1e-9, False)

    def host(w):
        return (
            TRUE["tf-ps"]["c"]
            + w * TRUE["tf-ps"]["per_worker"]
            + s * TRUE["tf-ps"]["gamma_worker"]
            + w * s * TRUE["tf-ps"]["gamma_server"]
        )

    # 8 workers, one server on node 0 with worker 0: 7 remote pulls, and 7 remote pushes
    # through the server's ingress (real) or one push per worker link (tc tbf: egress only)
    data = 16 * pm.SAMPLE_BYTES["imagenet"]
    got_real = pm.library_comm(cal, "alexnet", [8], 1, real, None, 1, 16, "imagenet")[0]
    got_emulated = pm.library_comm(cal, "alexnet", [8], 1, emulated, None, 1, 16, "imagenet")[0]
    assert got_real == pytest.approx(host(8) + (7 * (s + data) + 7 * s) * 1e-9, rel=1e-9)
    assert got_emulated == pytest.approx(host(8) + (7 * (s + data) + s) * 1e-9, rel=1e-9)
    # one node: no network at all
    assert pm.library_comm(cal, "alexnet", [1], 1, real, None)[0] == pytest.approx(host(1), rel=1e-9)


def test_caffe_pays_per_blob_with_the_algorithm_open_mpi_picks(exact_fits) -> None:
    cal = pm.calibrate(pd.DataFrame(), exact_fits)["caffe"]
    t = TRUE["mpi"]
    link = pm.Link.of_preset(PRESETS["th-express2"])
    for p in (2, 64, 1024):
        sizes = np.array(blob_bytes("resnet50"), dtype=float)
        m, b = pm.mpi_algorithm_terms(pm.openmpi_allreduce_algorithm(p, sizes), p, sizes)
        expected = float(np.sum(t["c"] + m * t["alpha"] + b * t["gamma"])) + float(
            link.wire(m.sum(), b.sum())
        )
        assert pm.library_comm(cal, "resnet50", [p], 1, link, None)[0] == pytest.approx(expected, rel=1e-9)


def test_without_benchmarks_the_runs_calibrate_the_library() -> None:
    """A study without micro-benchmarks still gets a model: the library terms from its runs."""
    rows = []
    for model, compute in (("lenet", 0.01), ("autoencoder", 0.015)):
        for nodes in (1, 2):
            m, b = pm.ring_terms(nodes, pm.gradient_bytes(model))
            exposed = float(0.003 + m * 40e-6 + b / 0.8e9) if nodes > 1 else 0.0
            rows.append(run_row("torch", model, nodes, compute=compute, exposed=exposed))
    runs = pd.DataFrame(rows)
    cal = pm.calibrate(runs)["torch"]
    assert cal.source == "runs" and cal.host_runs == 2 and cal.world_sizes == (2,)
    assert cal.fits["allreduce"].get("gamma") == pytest.approx(1 / 0.8e9, rel=1e-6)
    table = pm.calibration_table({"torch": cal})
    assert (
        table.loc[0, "runs"] == 2 and table.loc[0, "world_sizes"] == "2" and table.loc[0, "overhead_s"] >= 0
    )
    projection = pm.project(runs, {"torch": cal}, PRESETS["th-express2"], 1024).table
    one = projection[projection["nodes"] == 1]
    assert (one["efficiency"] == 1.0).all() and (one["comm_s"] == 0.0).all()
    assert projection["efficiency"].between(0, 1).all()


# --- validation on held-out runs -----------------------------------------------------------------


def test_validation_predicts_held_out_runs_from_benchmarks_and_host_runs(exact_fits) -> None:
    """Held-out runs are predicted twice: wholly (compute from the host runs) and given their
    own compute (the model's error); their cells' medians are the summary's unit."""
    runs = modelled_runs(exact_fits, offset=0.002)
    held_out = []
    cals = pm.calibrate(runs, exact_fits)
    link = pm.emulated_link("emulated-100mbe", exact_fits)
    for nodes, factor in ((2, 1.1), (4, 0.8)):
        compute = 0.016 * max(1.0, nodes / 2)  # the host runs' compute at this layout
        # the bucket holds what the compute refilled (0.016 s x 12.5 MB/s < 256 KiB)
        library = float(pm.library_comm(cals["torch"], "lenet", [nodes], 1, link.refilled(compute), 2)[0])
        predicted = compute + library + 0.002
        held_out.append(
            run_row(
                "torch",
                "lenet",
                nodes,
                compute=compute,
                exposed=0.0,
                network="emulated-100mbe",
                step=predicted / factor,
            )
        )
    # the 4-node run's own compute is twice the host runs': the step's error is the compute's
    own = 2 * 0.016 * 2
    own_library = float(pm.library_comm(cals["torch"], "lenet", [4], 1, link.refilled(own), 2)[0])
    held_out[-1].update(compute_s=own, step_s=own + own_library + 0.002)
    held_out[-1]["exposed_comm_s"] = held_out[-1]["step_s"] - own
    held_out.append(
        run_row("torch", "lenet", 8, compute=0.05, exposed=0.0, network="emulated-1gbe", step=0.2)
    )
    all_runs = pd.concat([runs, pd.DataFrame(held_out)], ignore_index=True)
    assert pm.calibrate(all_runs, exact_fits)["torch"].offset_s == pytest.approx(
        0.002
    )  # held-out runs unseen
    table = pm.validate(all_runs, cals, exact_fits).set_index("run_id")
    assert list(table.reset_index().columns) == list(pm.VALIDATION_COLUMNS)
    two = table.loc["torch/lenet/n2x1-100mbe/b64/r0"]
    assert two["error"] == pytest.approx(0.1, rel=1e-6) and two["compute_source"] == "host runs at n2x1"
    assert two["error_given_compute"] == pytest.approx(0.1, rel=1e-6) and two["compute_error"] == 0.0
    assert two["link_beta_Bps"] == pytest.approx(PRESETS["100mbe"].bandwidth_Bps)
    four = table.loc["torch/lenet/n4x1-100mbe/b64/r0"]
    assert four["compute_error"] == pytest.approx(-0.5) and four["error"] < -0.1
    assert four["error_given_compute"] == pytest.approx(0.0, abs=1e-9)
    assert four["comm_error"] == pytest.approx(0.0, abs=1e-9)
    eight = table.loc["torch/lenet/n8x1-1gbe/b64/r0"]
    assert eight["compute_source"] == "smallest world (1)"
    summary = pm.validation_summary(table.reset_index()).set_index("setup")
    assert list(summary.reset_index().columns) == list(pm.SUMMARY_COLUMNS)
    torch = summary.loc["torch"]
    assert torch["runs"] == 3 and torch["predicted"] == 3 and torch["cells"] == 3
    assert torch["max_abs_error"] >= torch["median_abs_error"] >= 0.1
    worst = table["error"].abs().idxmax()  # one run per cell: the worst run's cell
    row = table.loc[worst]
    assert torch["worst_cell"] == f"torch/lenet/n{row['nodes']}x1/{row['network']}"
    assert not torch["within_target"]
    assert torch["max_abs_compute_error"] == pytest.approx(1 - 0.016 / 0.05)  # the 8-node run
    assert torch["max_abs_error_given_compute"] >= torch["median_abs_error_given_compute"] >= 0.1 - 1e-9


def test_validation_cells_take_the_median_of_repeats(exact_fits) -> None:
    """A cell of three repeats counts once, at the medians of what was measured and predicted:
    one repeat slowed by the shared host does not move it."""
    runs = modelled_runs(exact_fits, offset=0.002)
    cals = pm.calibrate(runs, exact_fits)
    rows = []
    for repeat, step in enumerate((0.3, 0.31, 0.9)):
        row = run_row("torch", "lenet", 2, compute=0.016, exposed=0.0, network="emulated-1gbe", step=step)
        row["run_id"] = row["run_id"].replace("/r0", f"/r{repeat}")
        rows.append(row)
    table = pm.validate(pd.concat([runs, pd.DataFrame(rows)], ignore_index=True), cals, exact_fits)
    assert len(table) == 3
    cells = pm.validation_cells(table)
    assert len(cells) == 1 and cells.loc[0, "repeats"] == 3
    assert cells.loc[0, "measured_s"] == pytest.approx(0.31)
    predicted = float(table["predicted_s"].iloc[0])
    assert cells.loc[0, "error"] == pytest.approx(predicted / 0.31 - 1.0)
    summary = pm.validation_summary(table).iloc[0]
    assert summary["runs"] == 3 and summary["cells"] == 1
    assert summary["median_abs_error"] == pytest.approx(abs(predicted / 0.31 - 1.0))


def test_a_lone_ring_rank_has_no_model_error(exact_fits) -> None:
    """A one-rank ring run's step is its compute: the model predicts nothing there, so it
    has no error given its compute (it would be 0 by construction)."""
    runs = modelled_runs(exact_fits)
    lone = run_row("torch", "lenet", 1, compute=0.02, exposed=0.0, network="emulated-1gbe")
    table = pm.validate(
        pd.concat([runs, pd.DataFrame([lone])], ignore_index=True), pm.calibrate(runs, exact_fits)
    )
    assert math.isnan(table.loc[0, "error_given_compute"]) and math.isfinite(table.loc[0, "error"])


def test_bucket_refills_with_idle_time() -> None:
    link = pm.emulated_link("emulated-100mbe", {})
    rate = PRESETS["100mbe"].bandwidth_Bps
    assert link.refilled(1.0).burst_bytes == link.burst_bytes  # at most the bucket
    assert link.refilled(0.01).burst_bytes == pytest.approx(0.01 * rate)
    assert link.refilled(0.0).wire(0, 1e6) == pytest.approx(1e6 / rate)
    assert dataclasses.replace(link, wire_scale=1.7).wire(0, 1e6) == pytest.approx(
        1.7 * (1e6 - link.burst_bytes) / rate
    )


def test_validation_without_emulated_runs_is_empty(exact_fits) -> None:
    runs = modelled_runs(exact_fits)
    table = pm.validate(runs, pm.calibrate(runs, exact_fits), exact_fits)
    assert table.empty and list(table.columns) == list(pm.VALIDATION_COLUMNS)
    assert pm.validation_summary(table).empty


# --- projection, bands, 50% efficiency, latency --------------------------------------------------


def test_projection_by_hand(exact_fits) -> None:
    runs = modelled_runs(exact_fits, offset=0.002)
    cals = pm.calibrate(runs, exact_fits)
    result = pm.project(runs, cals, PRESETS["10gbe"], max_nodes=1024)
    table = result.table
    assert list(table.columns) == list(pm.PROJECTION_COLUMNS)
    assert set(table["setup"]) == set(catalog.SETUP_PATTERNS)  # every set-up of the catalog
    assert len(table) == len(catalog.SETUP_PATTERNS) * 11  # set-ups x node counts
    torch = table[table["setup"] == "torch"].set_index("nodes")
    link = pm.Link.of_preset(PRESETS["10gbe"])
    m, b = pm.ring_terms(4, pm.gradient_bytes("lenet"))
    t = TRUE["gloo"]
    comm = t["c"] + m * t["alpha"] + b * t["gamma"] + float(link.wire(m, b)) + 0.002
    assert torch.loc[4, "comm_s"] == pytest.approx(comm, rel=1e-9)
    assert torch.loc[4, "efficiency"] == pytest.approx(0.016 / (0.016 + comm), rel=1e-9)
    assert torch.loc[1, "comm_s"] == 0.0 and torch.loc[1, "efficiency"] == 1.0
    assert math.isnan(torch.loc[4, "efficiency_lo"])  # no bootstrap asked
    e50 = result.efficiency50.set_index("setup")
    assert list(result.efficiency50.columns) == list(pm.EFFICIENCY50_COLUMNS)
    # the 50% node count is the one after the last whose efficiency is at least one half
    nodes = np.arange(1, 1025)
    steps = pm.step_times(cals["bigdl"], pm.curves(pm.measured_runs(runs), cals)[0], nodes, 1, link)
    expected = nodes[np.nonzero(steps[0] / steps >= 0.5)[0][-1]] + 1
    assert e50.loc["bigdl", "nodes50"] == expected
    assert e50.loc["bigdl", "crossings"] == 1 and e50.loc["bigdl", "below50"] == f"{expected}-1024"


def test_projection_band_contains_the_point_and_widens_without_data() -> None:
    """The bootstrap band holds the point estimate, and removing calibration data (sizes
    and repeats of the micro-benchmarks) widens it."""
    full = synthetic_bench(noise=0.15, seed=11, repeats=6)
    fits = pm.fit_commbench(pm.commbench_cells(full))
    runs = modelled_runs(fits)
    sparse = synthetic_bench(noise=0.15, seed=11, sizes=[1024, 4 << 20], repeats=2)

    def widths(raw: pd.DataFrame) -> tuple[pd.DataFrame, float]:
        own = pm.fit_commbench(pm.commbench_cells(raw))
        cals = pm.calibrate(runs, own)
        reps, curves = pm.bootstrap(runs, raw, replicates=60, seed=5)
        table = pm.project(
            runs, cals, PRESETS["th-express2"], 256, replicates=reps, replicate_curves=curves
        ).table
        torch = table[(table["setup"] == "torch") & (table["nodes"] == 256)].iloc[0]
        return table, float(torch["efficiency_hi"] - torch["efficiency_lo"])

    table, wide_full = widths(full)
    assert table["efficiency_lo"].notna().all() and table["efficiency_hi"].notna().all()
    inside = (table["efficiency_lo"] <= table["efficiency"] + 1e-9) & (
        table["efficiency"] <= table["efficiency_hi"] + 1e-9
    )
    assert inside.mean() > 0.9
    _, wide_sparse = widths(sparse)
    assert wide_full > 0
    assert wide_sparse > 1.5 * wide_full


def test_efficiency50_band_and_censoring() -> None:
    curve = pm.Curve("torch", "lenet", "mnist", 64, 0.01)
    row = pm.efficiency50_row(curve, "th-express2", 100.0, np.array([80.0, 100.0, 120.0, math.inf]), 1024)
    assert row["nodes50"] == 100.0 and row["nodes50_lo"] <= 100.0 and row["above_max_share"] == 0.25
    assert math.isnan(row["nodes50_hi"]) and row["summary"].endswith(">1024]")
    never = pm.efficiency50_row(curve, "th-express2", math.inf, np.array([]), 1024)
    assert math.isnan(never["nodes50"]) and never["summary"] == ">1024"


def test_latency_sensitivity_is_monotone(exact_fits) -> None:
    runs = modelled_runs(exact_fits)
    cals = pm.calibrate(runs, exact_fits)
    table = pm.latency_sensitivity(runs, cals, PRESETS["th-express2"], [1, 10, 100], max_nodes=256)
    assert list(table.columns) == list(pm.SENSITIVITY_COLUMNS)
    for _, group in table.groupby("setup"):
        assert group.sort_values("latency_us")["efficiency"].is_monotonic_decreasing


def test_node_counts_and_presets() -> None:
    assert pm.node_counts(1024) == [2**k for k in range(11)]
    assert pm.node_counts(6) == [1, 2, 4, 6]
    with pytest.raises(ValueError):
        pm.node_counts(0)
    assert pm.preset_named("th-express2") is PRESETS["th-express2"]
    assert pm.preset_named("loopback").bandwidth_Bps == math.inf
    assert pm.setup_of("tensorflow", json.dumps({"strategy": "ps"})) == "tensorflow-ps"
    assert pm.setup_of("tensorflow", "not json") == "tensorflow"


def test_schema_offers_every_preset_for_the_projection() -> None:
    schema = yaml.safe_load(CONFIG_SCHEMA.read_text())
    projection = schema["properties"]["projection"]["properties"]
    assert set(projection["network"]["enum"]) == {pm.LOOPBACK, *PRESETS}
    assert projection["network"]["default"] == "th-express2"


# --- figures ---------------------------------------------------------------------------------------


def test_figures_with_and_without_data(tmp_path: Path, exact_fits) -> None:
    runs = modelled_runs(exact_fits)
    runs = pd.concat(
        [
            runs,
            pd.DataFrame(
                [run_row("torch", "lenet", 2, compute=0.016, exposed=0.02, network="emulated-1gbe")]
            ),
        ],
        ignore_index=True,
    )
    cals = pm.calibrate(runs, exact_fits)
    raw = synthetic_bench(noise=0.05)
    reps, curves = pm.bootstrap(runs, raw, replicates=5)
    projection = pm.project(runs, cals, PRESETS["th-express2"], 64, replicates=reps, replicate_curves=curves)
    validation = pm.validate(runs, cals, exact_fits)
    names = PERFMODEL_ALL_FIGURES
    out = {name: {"svg": str(tmp_path / "full" / f"{name}.svg")} for name in names}
    perfmodel_figures.make_perfmodel_figures(
        out, projection.table, runs, validation, pm.validation_summary(validation),
        pm.latency_sensitivity(runs, cals, PRESETS["th-express2"], max_nodes=64),
        pm.commbench_cells(raw), pm.fit_curves(exact_fits), efficiency50=projection.efficiency50,
    )  # fmt: skip
    assert "median |error|" in (tmp_path / "full" / "validation.svg").read_text()
    drawn = (tmp_path / "full" / "projection.svg").read_text()
    assert "th-express2" in drawn
    # each framework's 50%-efficiency node count and band is written in the figure
    torch = projection.efficiency50.set_index(["setup", "model"]).loc[("torch", "lenet"), "summary"]
    assert f"torch: below 50% from {torch}".replace(">", "&gt;") in drawn
    empty = {name: {"svg": str(tmp_path / "empty" / f"{name}.svg")} for name in names}
    nothing = pd.DataFrame()
    perfmodel_figures.make_perfmodel_figures(
        empty, pm.project(nothing, {}, PRESETS["1gbe"]).table, nothing, pm.validate(nothing, {}),
        pm.validation_summary(nothing), pm.latency_sensitivity(nothing, {}, PRESETS["1gbe"]),
        pm.commbench_cells(nothing), pm.fit_curves({}),
    )  # fmt: skip
    assert "no framework to project" in (tmp_path / "empty" / "projection.svg").read_text()
    assert "no runs on an emulated network" in (tmp_path / "empty" / "validation.svg").read_text()
    with pytest.raises(KeyError):
        perfmodel_figures.draw({}, {"nope": {}})


def test_link_scale_is_fitted_on_emulated_benchmarks_and_left_out_of_projections(exact_fits) -> None:
    """A library whose bytes take 1.7x the rate through the emulated link (Open MPI's, as
    measured) gets that scale from the emulated micro-benchmarks; a validation on the
    emulated link uses it, a projection to a real network does not."""
    mpi = exact_fits[("mpi", "allreduce", "host")]
    drained = pm.emulated_link("emulated-100mbe", {}).refilled(0.0)
    rows = []
    for world in (2, 4):
        for size in (4 << 20, 16 << 20, 64 << 20):
            fixed, per_byte, wire = pm.mpi_parts(mpi, [world], [size], drained, 2)
            rows.append(
                {"framework": "caffe", "library": "mpi", "op": "allreduce", "network": "emulated-100mbe",
                 "world": world, "nbytes": size, "parts": 1, "model": "", "algorithm": "default", "repeat": 0,
                 "seconds": float(fixed[0] + per_byte[0] + 1.7 * wire[0]), "host_cores": 2}
            )  # fmt: skip
    fits = pm.fit_commbench(pm.commbench_cells(pd.concat([synthetic_bench(), pd.DataFrame(rows)])))
    assert pm.link_scale(fits[("mpi", "allreduce", "host")]) == pytest.approx(1.7, rel=1e-3)
    assert pm.link_scale(fits[("gloo", "allreduce", "host")]) == 1.0  # no emulated cells
    scaled, plain = (
        pm.calibrate(pd.DataFrame(), fits)["caffe"],
        pm.calibrate(pd.DataFrame(), exact_fits)["caffe"],
    )
    real = pm.Link.of_preset(PRESETS["1gbe"])
    nodes = np.array([2, 16, 256])
    assert pm.library_comm(scaled, "autoencoder", nodes, 1, real, None) == pytest.approx(
        pm.library_comm(plain, "autoencoder", nodes, 1, real, None), rel=1e-3
    )
    emulated = pm.emulated_link("emulated-100mbe", fits)
    assert np.all(
        pm.library_comm(scaled, "autoencoder", nodes[:1], 1, emulated, 2)
        > 1.5 * pm.library_comm(plain, "autoencoder", nodes[:1], 1, emulated, 2)
    )


def test_pooled_studies_join_the_calibration_and_the_validation(exact_fits) -> None:
    """A second study's runs join with their run ids prefixed: its host runs calibrate, its
    emulated runs are held out; a table without run ids is refused."""
    own = modelled_runs(exact_fits, offset=0.002)
    other = modelled_runs(exact_fits, offset=0.002)
    held_out = pd.DataFrame(
        [run_row("torch", "lenet", 2, compute=0.016, exposed=0.02, network="emulated-1gbe")]
    )
    other = pd.concat([other, held_out], ignore_index=True)
    pooled = pm.pool_studies(own, ["../validation-quiet/"], [other])
    assert len(pooled) == len(own) + len(other)
    joined = pooled["run_id"].iloc[len(own) :]
    assert joined.str.startswith("validation-quiet:").all() and not set(joined) & set(own["run_id"])
    assert "validation-quiet:torch/lenet/n2x1-1gbe/b64/r0" in set(pooled["run_id"])
    cals = pm.calibrate(pooled, exact_fits)
    assert cals["torch"].host_runs == 2 * pm.calibrate(own, exact_fits)["torch"].host_runs
    table = pm.validate(pooled, cals, exact_fits)
    assert list(table["run_id"]) == ["validation-quiet:torch/lenet/n2x1-1gbe/b64/r0"]
    with pytest.raises(ValueError, match="no run_id"):
        pm.pool_studies(own, ["other"], [other.drop(columns="run_id")])
    # a study of torch alone pools only the other study's torch runs
    assert set(pm.runs_of(other, {"torch"})["framework"]) == {"torch"}


def test_contended_runs_take_no_part_in_calibration_or_validation(exact_fits) -> None:
    runs = modelled_runs(exact_fits, offset=0.002)
    clean = pm.calibrate(runs, exact_fits)["torch"]
    busy = run_row("torch", "lenet", 2, compute=0.016, exposed=0.5)
    busy.update(run_id="torch/lenet/n2x1/b64/r1", contended=True)
    held_out = run_row("torch", "lenet", 2, compute=0.016, exposed=0.5, network="emulated-1gbe")
    held_out["contended"] = True
    with_busy = pd.concat([runs, pd.DataFrame([busy, held_out])], ignore_index=True)
    cal = pm.calibrate(with_busy, exact_fits)["torch"]
    assert cal.host_runs == clean.host_runs and cal.offset_s == pytest.approx(clean.offset_s)
    assert pm.validate(with_busy, {"torch": cal}, exact_fits).empty


# --- the pipeline: every table from a study's tables ------------------------------------------------


def small_study() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A hand-made study of torch's LeNet: host runs at 1, 2 and 4 nodes (two repeats each),
    two held-out runs on an emulated 1 Gbit/s network, their iterations, and gloo's and
    TCP's micro-benchmarks as the model says (no noise)."""
    raw = synthetic_bench()
    raw = raw[raw["library"].isin(["gloo", "tcp"])].reset_index(drop=True)
    rows = []
    for nodes, exposed in ((1, 0.0), (2, 0.004), (4, 0.012)):
        for r in range(2):
            row = run_row(
                "torch", "lenet", nodes, compute=0.016 * max(1, nodes / 2), exposed=exposed + 0.001 * r
            )
            rows.append(dict(row, run_id=row["run_id"].replace("/r0", f"/r{r}")))
    for nodes in (2, 4):
        rows.append(
            run_row(
                "torch",
                "lenet",
                nodes,
                compute=0.016 * max(1, nodes / 2),
                exposed=0.02,
                network="emulated-1gbe",
            )
        )
    runs = pd.DataFrame(rows)
    iterations = pd.DataFrame(
        [
            {"run_id": run.run_id, "rank": 0, "iteration": i, "warmup": i == 0, "step_s": run.step_s,
             "compute_s": run.compute_s * (1 + 0.01 * i)}
            for run in runs.itertuples() for i in range(5)
        ]
    )  # fmt: skip
    return runs, iterations, raw


def test_settings_take_the_schema_defaults_and_the_study_s_values() -> None:
    schema = yaml.safe_load(CONFIG_SCHEMA.read_text())["properties"]
    projection = {k: v["default"] for k, v in schema["projection"]["properties"].items()}
    defaults = pipeline.Settings.of()
    assert (defaults.network, defaults.max_nodes, defaults.bootstrap, defaults.seed) == (
        projection["network"], projection["max_nodes"], projection["bootstrap"], projection["seed"]
    )  # fmt: skip
    assert (defaults.ranks_per_node, defaults.num_ps) == (schema["ranks_per_node"]["default"], 1)
    assert pipeline.Settings.of({"network": "1gbe"}, num_ps=3) == dataclasses.replace(
        defaults, network="1gbe", num_ps=3
    )
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validated = validation.validate_config(config, validation.load_schema(CONFIG_SCHEMA), REPO)
    settings = pipeline.Settings.from_study(validated)
    assert settings.network == validated["projection"]["network"]
    assert settings.bootstrap == validated["projection"]["bootstrap"]
    assert settings.ranks_per_node == validated["ranks_per_node"]
    assert settings.num_ps == validated["tensorflow"]["num_ps"]


def test_pipeline_run_gives_every_table_as_the_model_s_functions_do() -> None:
    runs, iterations, raw = small_study()
    settings = pipeline.Settings.of({"network": "1gbe", "max_nodes": 16, "bootstrap": 4, "seed": 1})
    tables = pipeline.run(runs, iterations, raw, settings)
    columns = {
        "calibration": pm.CALIBRATION_COLUMNS, "validation": pm.VALIDATION_COLUMNS,
        "validation_summary": pm.SUMMARY_COLUMNS, "projection": pm.PROJECTION_COLUMNS,
        "efficiency50": pm.EFFICIENCY50_COLUMNS, "commbench_fits": pm.FIT_COLUMNS,
        "commbench_checks": pm.CHECK_COLUMNS, "latency_sensitivity": pm.SENSITIVITY_COLUMNS,
    }  # fmt: skip
    written = tables.csv()
    assert list(written) == list(pipeline.TABLES)
    for name, expected in columns.items():
        assert list(written[name].columns) == list(expected), name
    # torch is calibrated from gloo's micro-benchmarks; the held-out runs are the emulated ones
    assert tables.calibration.set_index("setup").loc["torch", "source"] == "commbench"
    assert set(tables.validation["run_id"]) == set(runs.loc[runs["network"].ne("host"), "run_id"])
    assert tables.validation_summary.set_index("setup").loc["torch", "cells"] == 2
    # the projection: 1..16 nodes on 1 GbE, each with its bootstrap band
    torch = tables.projection[tables.projection["setup"].eq("torch")]
    assert torch["nodes"].tolist() == [1, 2, 4, 8, 16] and set(torch["network"]) == {"1gbe"}
    assert torch["step_lo"].notna().all() and (torch["step_lo"] <= torch["step_hi"]).all()
    assert tables.host_model["nodes"].max() == 4 and set(tables.host_model["network"]) == {pm.LOOPBACK}
    # the same numbers as the model's functions called one by one
    fits = pm.fit_commbench(pm.commbench_cells(raw))
    cals = pm.calibrate(runs, fits)
    reps, curves = pm.bootstrap(runs, raw, 4, 1, 1, iterations)
    by_hand = pm.project(runs, cals, PRESETS["1gbe"], 16, 1, 1, reps, curves)
    pd.testing.assert_frame_equal(tables.projection, by_hand.table)
    pd.testing.assert_frame_equal(tables.efficiency50, by_hand.efficiency50)
    pd.testing.assert_frame_equal(tables.validation, pm.validate(runs, cals, fits))
    pd.testing.assert_frame_equal(tables.calibration, pm.calibration_table(cals))
    # and the same again: the seed makes the band reproducible
    again = pipeline.run(runs, iterations, raw, settings)
    for name in pipeline.TABLES:
        pd.testing.assert_frame_equal(getattr(again, name), getattr(tables, name))


def test_pipeline_run_without_bootstrap_or_benchmarks() -> None:
    """No replicates: no band. No micro-benchmarks: the runs calibrate the library. Nothing
    at all: every table, empty, with its columns."""
    runs, iterations, _ = small_study()
    settings = pipeline.Settings.of({"network": "10gbe", "max_nodes": 8, "bootstrap": 0})
    tables = pipeline.run(runs, None, pd.DataFrame(), settings)
    assert tables.calibration.set_index("setup").loc["torch", "source"] == "runs"
    assert tables.projection["step_lo"].isna().all() and len(tables.projection) == 4
    assert tables.commbench_fits.empty and tables.commbench_checks.empty and tables.fit_curves.empty
    nothing = pipeline.run(pd.DataFrame(), None, pd.DataFrame(), settings)
    for name, table in nothing.csv().items():
        assert table.empty, name
    assert list(nothing.projection.columns) == list(pm.PROJECTION_COLUMNS)
    assert list(nothing.validation_summary.columns) == list(pm.SUMMARY_COLUMNS)


def test_pipeline_pools_studies_and_reads_benchmark_files(tmp_path: Path) -> None:
    runs, iterations, raw = small_study()
    other = pd.DataFrame(
        [
            run_row("torch", "lenet", 2, compute=0.016, exposed=0.005),
            run_row("caffe", "lenet", 2, compute=0.016, exposed=0.005),  # not this study's framework
        ]
    )
    other_iterations = pd.DataFrame(
        [
            {"run_id": r, "rank": 0, "iteration": 0, "step_s": 0.02, "compute_s": 0.016}
            for r in other["run_id"]
        ]
    )
    pooled, pooled_iterations = pipeline.pool(runs, iterations, ["../other/"], [other], [other_iterations])
    assert len(pooled) == len(runs) + 1 and "other:torch/lenet/n2x1/b64/r0" in set(pooled["run_id"])
    assert set(pooled_iterations["run_id"]) == set(pooled["run_id"])
    assert pipeline.pool(runs, None, [], []) == (runs, None)
    (tmp_path / "empty.csv").write_text("")
    raw.iloc[:10].to_csv(tmp_path / "a.csv", index=False)
    raw.iloc[10:].to_csv(tmp_path / "b.csv", index=False)
    read = pipeline.read_commbench([tmp_path / "a.csv", tmp_path / "empty.csv", tmp_path / "b.csv"])
    assert len(read) == len(raw) and list(read.columns) == list(raw.columns)
    assert pipeline.read_commbench([]).empty
