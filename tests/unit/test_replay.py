"""dlscale.perfmodel.replay and .systems: the system-file contract, a synthetic ring recovered,
the replay and the study's projection as one code path, and the published record."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.paths import REPO
from helpers.perfmodel_inputs import synthetic_bench

from dlscale import catalog
from dlscale import perfmodel as pm
from dlscale.networks import GBIT, PRESETS
from dlscale.perfmodel import pipeline, projection, replay, systems

PUBLISHED = REPO / "published"


def ring_system(**changes: Any) -> dict[str, Any]:
    """A torch (ring) system on a network of its own, measured exactly as an alpha-beta ring
    says: ``N·B / (c + 2(N-1)·a + 2(N-1)/N·S/beta)`` (computed here by hand, not by the model)."""
    parameters, latency, gbit, batch, compute = 10_000_000, 20e-6, 25.0, 256, 0.5
    nbytes, beta = parameters * 4, gbit * GBIT
    measured = {
        n: n * batch / (compute + 2 * (n - 1) * latency + 2 * (n - 1) / n * nbytes / beta)
        for n in (1, 2, 4, 16, 128, 1024)
    }
    system = {
        "name": "synthetic-ring", "source": "this test", "framework": "torch", "parameters": parameters,
        "network": {"latency_s": latency, "bandwidth_gbit": gbit}, "batch_per_node": batch,
        "measured": measured,
    }  # fmt: skip
    return {**system, **changes}


def test_a_synthetic_alpha_beta_ring_is_recovered() -> None:
    system = systems.parse(ring_system())
    table = replay.replay([system])
    assert list(table.columns) == list(replay.REPLAY_COLUMNS)
    assert table["nodes"].tolist() == [1, 2, 4, 16, 128, 1024]
    assert (table["calibration"] == replay.NETWORK_LABEL).all()
    np.testing.assert_allclose(table["predicted"], table["measured"], rtol=1e-12)
    assert table["error"].abs().max() < 1e-12
    assert table["compute_step_s"].iloc[0] == pytest.approx(
        0.5, rel=1e-12
    )  # the anchor's step, nothing to remove
    assert table["measured_efficiency"].iloc[-1] < 0.9  # a ring that does lose efficiency
    # anchored at 2 nodes (its communication taken off the step) it is recovered as well
    anchored = dict(ring_system(), measured={n: v for n, v in ring_system()["measured"].items() if n > 1})
    again = replay.replay([systems.parse(anchored)])
    assert again["compute_step_s"].iloc[0] == pytest.approx(0.5, rel=1e-12)
    np.testing.assert_allclose(again["predicted"], again["measured"], rtol=1e-12)
    # and given its compute step, with no throughput at the anchor
    given = dict(ring_system(compute_step_s=0.5))
    given["measured"] = {**given["measured"], 1: None}
    third = replay.replay([systems.parse(given)])
    assert math.isnan(third["measured"].iloc[0]) and third["compute_source"].iloc[0] == "compute_step_s"
    assert third["error"].iloc[1:].abs().max() < 1e-12  # efficiency against the predicted anchor
    assert replay.summary(third)["points"].tolist() == [5]
    np.testing.assert_allclose(third["predicted"].iloc[1:], third["measured"].iloc[1:], rtol=1e-12)


def test_a_file_without_the_anchor_s_throughput_or_compute_step_is_refused() -> None:
    data = ring_system()
    data["measured"] = {**data["measured"], 1: None}
    with pytest.raises(systems.SystemFileError) as err:
        systems.parse(data, "sys.yaml")
    assert "sys.yaml" in str(err.value) and "'measured.1'" in str(err.value)
    assert "'compute_step_s'" in str(err.value)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"speed": 3}, "'speed' is not a known key"),
        (
            {"network": {"latency_s": 1e-6, "bandwidth_gbit": 10, "mtu": 9000}},
            "'network.mtu' is not a known key",
        ),
        ({"network": "token-ring"}, "key 'network': 'token-ring' is not a network preset"),
        ({"network": {"latency_s": 1e-6}}, "key 'network.bandwidth_gbit' is required"),
        ({"framework": "mxnet"}, "key 'framework'"),
        ({"measured": {"one": 3.0}}, "'measured.one' is not a node count"),
        ({"measured": {2.5: 3.0}}, "'measured.2.5' is not a node count"),
        ({"measured": {1: -3.0}}, "key 'measured.1'"),
        ({"batch_per_node": 2.0}, "key 'batch_per_node'"),
        ({"model": "lenet"}, "'parameters' and 'model' are both given"),
        ({"strategy": "ps"}, "key 'strategy': 'ps' is not torch's"),
        ({"num_ps": 2}, "key 'num_ps': the ring pattern has no parameter servers"),
        ({"full_duplex": True}, "key 'full_duplex': the ring pattern"),
    ],
)
def test_what_a_system_file_may_not_say_is_refused_naming_the_key(change: dict[str, Any], key: str) -> None:
    with pytest.raises(systems.SystemFileError) as err:
        systems.parse(ring_system(**change), "sys.yaml")
    assert str(err.value).startswith("sys.yaml: ") and key in str(err.value)


def test_required_keys_and_the_parameter_server_maps() -> None:
    data = ring_system()
    del data["parameters"]
    with pytest.raises(systems.SystemFileError, match="'parameters' \\(or 'model'\\) is required"):
        systems.parse(data)
    del data["batch_per_node"]
    with pytest.raises(systems.SystemFileError, match="'batch_per_node' is required"):
        systems.parse(dict(data, parameters=10))
    ps = ring_system(framework="tensorflow", strategy="ps", num_ps={1: 1, 2: 2})
    with pytest.raises(systems.SystemFileError, match="'num_ps.4' is missing"):
        systems.parse(ps)
    assert systems.parse(dict(ps, num_ps="nodes")).num_ps == {n: n for n in (1, 2, 4, 16, 128, 1024)}
    assert set(systems.parse(dict(ps, num_ps=3)).num_ps.values()) == {3}
    ring = {k: v for k, v in ps.items() if k != "num_ps"}
    assert systems.parse(dict(ring, strategy="mwms")).setup == "tensorflow"
    with pytest.raises(systems.SystemFileError, match="key 'strategy': 'allreduce' is not tensorflow's"):
        systems.parse(dict(ps, strategy="allreduce"))


def test_files_are_read_and_their_errors_name_them(tmp_path: Path) -> None:
    good = tmp_path / "ring.yaml"
    good.write_text(yaml.safe_dump(ring_system()))
    assert systems.load(good).name == "synthetic-ring"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(systems.SystemFileError, match="bad.yaml: not YAML"):
        systems.load(bad)
    with pytest.raises(systems.SystemFileError, match="missing.yaml: cannot be read"):
        systems.load(tmp_path / "missing.yaml")
    assert replay.main([str(good), str(bad), "--out", str(tmp_path / "out")]) == 2
    assert replay.main([str(good), "--out", str(tmp_path / "out")]) == 0
    written = pd.read_csv(tmp_path / "out" / "replay.csv")
    assert list(written.columns) == list(replay.REPLAY_COLUMNS) and len(written) == 6
    assert list(pd.read_csv(tmp_path / "out" / "replay_summary.csv").columns) == list(replay.SUMMARY_COLUMNS)
    assert replay.main([str(good), str(good), "--out", str(tmp_path / "out")]) == 2  # one name twice
    assert replay.main([str(good), "--out", str(good)]) == 2  # a file, not a folder


def test_a_refusal_quoting_a_huge_value_stays_one_short_line() -> None:
    """A 5,000-character name was quoted whole in the error; the key and the rule stay."""
    with pytest.raises(systems.SystemFileError) as err:
        systems.parse(ring_system(name="a" * 5000), "sys.yaml")
    message = str(err.value)
    assert len(message) < 400 and "\n" not in message
    assert message.startswith("sys.yaml: key 'name': 'aaa") and message.endswith("' is too long")
    assert "characters ...]" in message


def test_a_catalog_models_throughput_past_any_processors_flops_is_refused() -> None:
    """A published ResNet-50 row of 97 million images/s on 8 nodes of 8 ranks (a typo's
    worth of digits) passed every bound a step's length sets (42 us a step) and was replayed
    as a 4,500-fold error; at 24.3 GFLOPs a sample it needs 3.7e16 FLOP/s a rank."""
    data = ring_system(model="resnet50", batch_per_node=512, ranks_per_node=8)
    del data["parameters"]
    data["measured"] = {1: 2697.29, 8: 9745.38}
    assert systems.parse(data, "sys.yaml").measured[8] == 9745.38
    data["measured"] = {1: 2697.29, 8: 97450000.38}
    with pytest.raises(systems.SystemFileError, match=r"^sys.yaml: key 'measured.8': .*MAX_RANK_FLOPS"):
        systems.parse(data, "sys.yaml")


def test_yaml_a_system_file_has_no_use_for_is_refused_while_read(tmp_path: Path) -> None:
    """A key given twice (PyYAML keeps the last: a published point lost without a word) and
    aliases, nested ones above all (a billion laughs: 10^8 list items from 10 short lines)."""
    text = yaml.safe_dump(ring_system(), sort_keys=False)
    twice = tmp_path / "twice.yaml"
    twice.write_text(text.replace("measured:\n", "measured:\n  4: 1.0\n", 1))
    with pytest.raises(systems.SystemFileError, match="twice.yaml: key 4 is given twice in one mapping"):
        systems.load(twice)
    laughs = tmp_path / "laughs.yaml"
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    laughs.write_text("\n".join(lines) + "\n")
    with pytest.raises(systems.SystemFileError, match=r"laughs.yaml: alias \*l0: aliases are not allowed"):
        systems.load(laughs)
    shared = tmp_path / "shared.yaml"
    shared.write_text(text.replace("name: synthetic-ring", "name: &n synthetic-ring\nsource: *n", 1))
    with pytest.raises(systems.SystemFileError, match="alias \\*n"):
        systems.load(shared)
    far = tmp_path / "far.yaml"
    far.write_text(yaml.safe_dump(ring_system(measured={1: 100.0, 10**23: 1e20})))
    with pytest.raises(systems.SystemFileError, match="is not a node count"):
        systems.load(far)
    plain = tmp_path / "plain.yaml"  # the same file without them reads as it did
    plain.write_text(text)
    assert sorted(systems.load(plain).measured) == [1, 2, 4, 16, 128, 1024]


def test_a_file_measured_at_its_anchor_alone_is_said_to_check_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = tmp_path / "alone.yaml"
    alone.write_text(yaml.safe_dump(ring_system(name="anchor-alone", measured={4: 1000.0})))
    assert replay.points_to_check(systems.load(alone)) == []
    assert replay.points_to_check(systems.parse(ring_system())) == [2, 4, 16, 128, 1024]
    assert replay.main([str(alone), "--out", str(tmp_path / "out")]) == 0
    assert "anchor-alone: measured at its anchor (4 nodes) alone: nothing to check" in capsys.readouterr().err
    assert pd.read_csv(tmp_path / "out" / "replay_summary.csv").empty


def test_an_anchor_whose_modelled_communication_outlasts_its_step_is_refused() -> None:
    slow = ring_system(network={"latency_s": 1.0, "bandwidth_gbit": 0.001})
    slow["measured"] = {2: 1000.0, 4: 1800.0}
    with pytest.raises(systems.SystemFileError, match="'measured.2': the modelled communication"):
        replay.replay([systems.parse(slow)])


def test_a_ring_of_several_ranks_a_node_is_recovered() -> None:
    """By hand: one flat ring of 8 ranks a node (NCCL's over GPUs) crosses each node's link
    once with ``2(P-1)/P·S`` for ``P = 8N`` ranks, and not at all within one node."""
    parameters, latency, beta, batch, compute, rpn = 10_000_000, 20e-6, 25 * GBIT, 256, 0.5, 8
    nbytes = parameters * 4

    def step(n: int) -> float:
        p = n * rpn
        return compute + (0.0 if n == 1 else 2 * (p - 1) * latency + 2 * (p - 1) / p * nbytes / beta)

    measured = {n: n * batch / step(n) for n in (1, 2, 4, 16, 1024)}
    table = replay.replay([systems.parse(ring_system(measured=measured, ranks_per_node=rpn))])
    np.testing.assert_allclose(table["predicted"], table["measured"], rtol=1e-12)
    assert table["compute_step_s"].iloc[0] == pytest.approx(compute, rel=1e-12)
    assert (table["ranks_per_node"] == rpn).all()
    # the node ring (one peer a node) exposes less at 2 nodes: S, not 15/8·S
    node_ring = replay.replay([systems.parse(ring_system(measured=measured))])
    assert node_ring["predicted_efficiency"].iloc[1] > table["predicted_efficiency"].iloc[1] + 0.01


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"ranks_per_node": 0}, "key 'ranks_per_node'"),
        ({"ranks_per_node": 3}, "key 'ranks_per_node': 3 ranks do not divide 'batch_per_node' (256)"),
        (
            {"framework": "tensorflow", "strategy": "ps", "ranks_per_node": 2},
            "key 'ranks_per_node': the ps pattern",
        ),
        ({"framework": "bigdl", "ranks_per_node": 2}, "key 'ranks_per_node': the bigdl pattern"),
    ],
)
def test_ranks_per_node_is_a_ring_s_and_divides_the_batch(change: dict[str, Any], key: str) -> None:
    with pytest.raises(systems.SystemFileError) as err:
        systems.parse(ring_system(**change), "sys.yaml")
    assert key in str(err.value)


def test_full_duplex_parameter_servers_pipeline_pushes_and_pulls() -> None:
    """By hand, 4 nodes and 2 servers: in turn, a server's node pays the remote workers'
    pushes then pulls (3 x S/2 each way, one latency each); full duplex, one crossing of
    its share for the 3 remote workers plus its own worker's half for the other server.
    The study's own links keep them in turn."""
    base = ring_system(framework="tensorflow", strategy="ps", num_ps=2, compute_step_s=0.5)
    s, beta, latency = 40_000_000, 25 * GBIT, 20e-6
    for duplex, wire in (
        (False, 2 * (latency + 3 * s / 2 / beta)),
        (True, latency + (3 * s / 2 + s / 2) / beta),
    ):
        table = replay.replay([systems.parse(dict(base, full_duplex=duplex))])
        four = table.set_index("nodes").loc[4]
        assert four["predicted"] == pytest.approx(4 * 256 / (0.5 + wire), rel=1e-12)
    # as many servers as nodes: the same bytes either way (one latency less)
    same = dict(base, num_ps="nodes")
    apart, duplex = (replay.replay([systems.parse(dict(same, full_duplex=d))]) for d in (False, True))
    gap = (
        4 * 256 / duplex.set_index("nodes").loc[4, "predicted"]
        - 4 * 256 / apart.set_index("nodes").loc[4, "predicted"]
    )
    assert gap == pytest.approx(-latency, rel=1e-6)
    assert pm.Link.of_preset(PRESETS["10gbe"]).full_duplex is False


# --- one code path with the study's projection -------------------------------------------------


def run_row(framework: str, nodes: int, compute: float, exposed: float, strategy: str | None = None) -> dict:
    """One ok host run of LeNet as ``dlscale.analysis.aggregate`` writes it (what the model reads)."""
    step = compute + exposed
    return {
        "run_id": f"{framework}{'-' + strategy if strategy else ''}/lenet/n{nodes}x1/b64/r0",
        "framework": framework, "model": "lenet", "network": "host", "nodes": nodes, "ranks_per_node": 1,
        "world_size": nodes, "batch_per_rank": 64, "status": "ok", "step_s": step, "compute_s": compute,
        "comm_s": exposed, "exposed_comm_s": exposed, "throughput": nodes * 64 / step, "speedup": math.nan,
        "efficiency": math.nan, "versions": json.dumps({"strategy": strategy} if strategy else {}),
    }  # fmt: skip


def study_tables(tmp_path: Path) -> tuple[pipeline.Tables, Path]:
    """A study of every set-up (host runs whose exposed time is the model's plus 2 ms, and
    every library's micro-benchmarks) through ``pipeline.run``, its tables written as the
    rule writes them."""
    raw = synthetic_bench(noise=0.05, seed=4)
    fits = pm.fit_commbench(pm.commbench_cells(raw))
    rows = []
    for setup, cal in pm.calibrate(pd.DataFrame(), fits).items():
        framework, strategy = setup.split("-")[0], ("ps" if setup.endswith("-ps") else None)
        for nodes in (1, 2, 4):
            compute = 0.016 * max(1.0, nodes / 2)
            library = float(pm.library_comm(cal, "lenet", [nodes], 1, pm.Link.host(), 2, 1, 64, "mnist")[0])
            rows.append(
                run_row(framework, nodes, compute, library + (0.002 if library > 0 else 0.0), strategy)
            )
    runs = pd.DataFrame(rows)
    settings = pipeline.Settings.of({"network": "10gbe", "max_nodes": 64, "bootstrap": 2, "seed": 1})
    tables = pipeline.run(runs, None, raw, settings)
    folder = tmp_path / "perfmodel"
    folder.mkdir()
    for name, table in tables.csv().items():
        table.to_csv(folder / f"{name}.csv", index=False)
    return tables, folder / "calibration.csv"


def test_the_replay_and_the_projection_give_the_same_numbers(tmp_path: Path) -> None:
    """A system file made of a projected curve (its compute, batch, model and network)
    replays to the projection's throughput and efficiency at every node count, through the
    study's calibration read back from its calibration.csv."""
    tables, calibration = study_tables(tmp_path)
    cals = replay.read_calibration(calibration)
    assert set(cals) == set(tables.calibrations)
    for setup, cal in tables.calibrations.items():
        back = cals[setup]
        assert (back.pattern, back.library, back.source) == (cal.pattern, cal.library, cal.source)
        assert back.projection_offset_s == cal.projection_offset_s
        for op, fit in cal.fits.items():
            assert dict(back.fits[op].coefficients) == pytest.approx(dict(fit.coefficients), rel=1e-15), (
                setup,
                op,
            )
    checked = set()
    for (setup, model), curve in tables.projection.groupby(["setup", "model"]):
        if setup == "tensorflow-ps":  # the projection ships the chief's MNIST batches; a system file has none
            continue
        framework = setup.split("-")[0]
        data = {
            "name": f"{setup}-{model}", "source": "the study's projection", "framework": framework,
            "model": model, "network": "10gbe", "batch_per_node": int(curve["batch_per_rank"].iloc[0]),
            "compute_step_s": float(curve["compute_s"].iloc[0]),
            "measured": {int(n): float(t) for n, t in zip(curve["nodes"], curve["throughput"], strict=True)},
        }  # fmt: skip
        table = replay.replay([systems.parse(data)], cals, source=str(calibration)).set_index("nodes")
        expected = curve.set_index("nodes")
        np.testing.assert_allclose(table["predicted"], expected["throughput"], rtol=1e-12)
        np.testing.assert_allclose(table["predicted_efficiency"], expected["efficiency"], rtol=1e-12)
        assert table["error"].abs().max() < 1e-12
        checked.add(setup)
    assert checked == set(catalog.SETUP_PATTERNS) - {"tensorflow-ps"}  # every other set-up of the catalog


def test_replay_and_projection_call_the_one_step_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step of both, the parameter servers' included, is made by ``projection.step_at``."""
    assert replay.step_at is projection.step_at and replay.throughput_at is projection.throughput_at
    calls: list[str] = []
    real = projection.step_at

    def spy(cal: pm.Calibration, *args: Any, **kwargs: Any) -> np.ndarray:
        calls.append(cal.setup)
        return real(cal, *args, **kwargs)

    monkeypatch.setattr(projection, "step_at", spy)
    monkeypatch.setattr(replay, "step_at", spy)
    ps = ring_system(framework="tensorflow", strategy="ps", num_ps="nodes")
    replay.replay([systems.parse(ps)])
    assert calls and set(calls) == {"tensorflow-ps"}
    calls.clear()
    curve = pm.Curve("tensorflow-ps", "lenet", "mnist", 64, 0.02)
    pm.project_point(
        {"tensorflow-ps": replay.network_calibration("tensorflow-ps")}, [curve], pm.Link.host(), [1], 4
    )
    assert calls == ["tensorflow-ps"]


def test_a_study_s_calibration_gives_the_band(tmp_path: Path) -> None:
    _, calibration = study_tables(tmp_path)
    system = systems.parse(ring_system(measured={1: 500.0, 8: 3600.0, 64: 25000.0}))
    cals = replay.read_calibration(calibration)
    reps = replay.calibration_replicates(calibration, cals, 6, seed=2)
    assert len(reps) == 6
    table = replay.replay([system], cals, reps, source="study")
    assert (table["replicates"] == 6).all() and table["calibration"].str.startswith("study (commbench)").all()
    assert table["lower"].notna().all() and (table["lower"] <= table["upper"]).all()
    assert (table["efficiency_lower"] <= table["efficiency_upper"] + 1e-12).all()
    path = tmp_path / "ring.yaml"
    path.write_text(yaml.safe_dump(ring_system(measured={1: 500.0, 8: 3600.0})))
    args = [str(path), "--out", str(tmp_path / "out"), "--calibration", str(calibration), "--bootstrap", "3"]
    assert replay.main(args) == 0
    written = pd.read_csv(tmp_path / "out" / "replay.csv")
    assert (written["replicates"] == 3).all() and written["calibration"].str.endswith("(commbench)").all()
    # without the micro-benchmark cells beside it there is no bootstrap, and a set-up the
    # study did not calibrate falls back to the network-level model, saying so
    (calibration.parent / "commbench.csv").unlink()
    assert replay.calibration_replicates(calibration, cals, 6) == []
    bare = replay.replay([system], {}, source="study")
    assert bare["calibration"].iloc[0] == f"{replay.NETWORK_LABEL} (torch not in study)"
    assert bare["lower"].isna().all()


def test_a_calibration_that_is_not_a_study_s_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, calibration = study_tables(tmp_path)
    table = pd.read_csv(calibration, keep_default_na=False, na_values=[""])
    ring = tmp_path / "ring.yaml"
    ring.write_text(yaml.safe_dump(ring_system(measured={1: 500.0, 8: 3600.0})))
    bad = tmp_path / "bad" / "calibration.csv"
    bad.parent.mkdir()
    cases = {
        "empty, not a study's calibration.csv": "",
        "no column setup, runs": "a,b\n1,2\n",
        "a value is not a number": table.assign(c_s="fast").to_csv(index=False),
        "is calibrated twice": pd.concat([table, table.head(1)]).to_csv(index=False),
        "set-up 'torch' with pattern 'ps'": table.assign(
            pattern=table["setup"].map({"torch": "ps"}).fillna(table["pattern"])
        ).to_csv(index=False),
    }  # fmt: skip
    for message, text in cases.items():
        bad.write_text(text)
        with pytest.raises(replay.CalibrationFileError, match=message):
            replay.read_calibration(bad)
        assert replay.main([str(ring), "--out", str(tmp_path / "out"), "--calibration", str(bad)]) == 2
        assert f"{bad}:" in capsys.readouterr().err
    # without the fits beside it the table's own columns calibrate, and the replay says so
    bad.write_text(table.to_csv(index=False))
    assert replay.main([str(ring), "--out", str(tmp_path / "out"), "--calibration", str(bad)]) == 0
    assert "without hops and overlap" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        replay.main(
            [str(ring), "--out", str(tmp_path / "out"), "--calibration", str(bad), "--bootstrap", "-1"]
        )
    assert "give 0 or more" in capsys.readouterr().err
    # the micro-benchmark cells beside a study's table give the band: refused when not its cells
    raw = calibration.parent / "commbench.csv"
    cells = pd.read_csv(raw, keep_default_na=False, na_values=[""], dtype={"model": str})
    for message, text in {
        "not a study's commbench.csv: no column framework": "a,b\n1,2\n",
        "a cell is not a measurement": cells.assign(seconds="slow").to_csv(index=False),
    }.items():
        raw.write_text(text)
        with pytest.raises(replay.CalibrationFileError, match=message):
            replay.calibration_replicates(calibration, replay.read_calibration(calibration), 2)
    raw.write_text("")  # a study without micro-benchmarks: no band, nothing wrong
    assert replay.calibration_replicates(calibration, replay.read_calibration(calibration), 2) == []


# --- the published record -------------------------------------------------------------------------


def published_files() -> list[Path]:
    return sorted(PUBLISHED.glob("*.yaml"))


def test_the_published_record_has_its_files() -> None:
    assert len(published_files()) >= 5


@pytest.mark.parametrize("path", published_files(), ids=lambda p: p.stem)
def test_every_published_file_validates_and_replays(path: Path) -> None:
    system = systems.load(path)
    assert system.name == path.stem and system.source.strip() and system.notes.strip()
    table = replay.replay([system])
    assert len(table) == len(system.measured) and np.isfinite(table["predicted"]).all()
    assert table["error"].iloc[0] == 0.0  # the anchor


def test_the_committed_replay_table_is_what_the_published_files_replay_to() -> None:
    """published/replay.csv is made by the command in published/README.md, unedited."""
    committed = pd.read_csv(PUBLISHED / "replay.csv", keep_default_na=False, na_values=[""])
    made = replay.replay([systems.load(p) for p in published_files()])
    made = pd.read_csv(io.StringIO(made.to_csv(index=False)), keep_default_na=False, na_values=[""])
    pd.testing.assert_frame_equal(committed, made)
    summary = pd.read_csv(PUBLISHED / "replay_summary.csv")
    assert set(summary["pattern"]) == set(made["pattern"])
