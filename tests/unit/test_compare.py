"""Studies compared cell by cell (dlscale.compare.comparison): the rules of a change, and the CLI on the
golden study (tests/data/golden, aggregated as tests/unit/test_golden.py does) against copies
of it whose events were changed in a stated way:

* ``same``: the golden events unchanged, in another folder;
* ``bigdl_faster``: every BigDL iteration's step, compute and communication time x 0.8
  (BigDL's throughput x 1.25, its shares and efficiencies unchanged);
* ``bigdl_fastest``: BigDL's LeNet iterations x 0.5 (0.015 s a step, under TensorFlow's
  0.018 s: the fastest_compute finding and the "BigDL computes fastest" claim change);
* ``torch_2_threads``: torch's runs say ``threads_per_rank: 2`` (a setting changed);
* ``on_slurm``: run_start says the runs were launched by SLURM on hosts cn00.., from venvs
  with another lock, with a learning rate in their spec (the numbers unchanged).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import random
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers.paths import REPO, SCHEMA
from helpers.verify_study import make_archive
from helpers.verify_study import make_study as make_verify_study

from dlscale.analysis import aggregate
from dlscale.analysis.stats import BOOTSTRAP, RANGE_RATIO_LOW_N, Interval
from dlscale.compare import cells as compare_cells
from dlscale.compare import comparison
from dlscale.compare import page as compare_page
from dlscale.compare import studies as compare_studies
from dlscale.outputs import COMPARE_FILES
from dlscale.study.validation import ConfigError, load_schema, validate_config

GOLDEN_RUNS = REPO / "tests" / "data" / "golden" / "runs"
Event = dict[str, Any]


def make_study(root: Path, change: Callable[[Event], None] | None = None) -> Path:
    """A study folder (``root/results`` with runs/ and the tables, made by the aggregation
    from the golden events, each event first passed through ``change``)."""
    results = root / "results"
    shutil.copytree(GOLDEN_RUNS, results / "runs")
    if change is not None:
        for path in sorted((results / "runs").rglob("events.jsonl")):
            events = [json.loads(line) for line in path.read_text().splitlines()]
            for event in events:
                change(event)
            path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    with contextlib.chdir(results):
        paths = aggregate.find_events("runs")
        aggregate.write_outputs(aggregate.aggregate(paths), dict(aggregate.OUTPUT_FILES))
    return root


def scale_steps(framework: str, factor: float, model: str | None = None) -> Callable[[Event], None]:
    state: dict[str, bool] = {}

    def change(event: Event) -> None:
        if event["event"] == "run_start":
            state["mine"] = event["framework"] == framework and model in (None, event["model"])
        elif event["event"] == "iteration" and state["mine"]:
            for key in ("step_s", "compute_s", "comm_s"):
                event[key] = round(event[key] * factor, 6)

    return change


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("studies")

    def torch_threads(event: Event) -> None:
        if event["event"] == "run_start" and event["framework"] == "torch":
            event["threads_per_rank"] = 2

    def hostile_version(event: Event) -> None:
        if event["event"] == "run_start":
            event["versions"]["python"] = "3.11.7</td><script>alert(1)</script>"

    def on_slurm(event: Event) -> None:
        if event["event"] == "run_start":
            event["launcher"] = "slurm"
            event["hosts"] = [f"cn{rank:02d}" for rank in range(len(event["hosts"]))]
            event["env"] = {"env": event["framework"], "lock_sha256": f"{event['framework']}-lock-2"}
            event["spec"]["learning_rate"] = 0.02

    made = {
        "base": make_study(root / "base"),
        "same": make_study(root / "same"),
        "bigdl_faster": make_study(root / "bigdl_faster", scale_steps("bigdl", 0.8)),
        "bigdl_fastest": make_study(root / "bigdl_fastest", scale_steps("bigdl", 0.5, "lenet")),
        "torch_2_threads": make_study(root / "torch_2_threads", torch_threads),
        "hostile": make_study(root / "hostile", hostile_version),
        "on_slurm": make_study(root / "on_slurm", on_slurm),
    }
    return made


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = comparison.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- pure functions ---------------------------------------------------------------------------


def test_each_metric_declares_which_direction_is_better() -> None:
    better = {m.name: m.higher_is_better for m in compare_cells.METRICS}
    assert better == {
        "throughput": True,
        "exposed_comm_share": False,
        "efficiency": True,
        "time_to_target_s": False,
    }


@pytest.mark.parametrize(
    ("interval", "p_value", "higher", "change"),
    [
        (Interval(1.1, 0.95, 1.2, BOOTSTRAP), 0.001, True, comparison.NO_CHANGE),  # spans 1
        (Interval(1.1, 1.05, 1.2, BOOTSTRAP), 0.001, True, comparison.IMPROVED),
        (Interval(1.1, 1.05, 1.2, BOOTSTRAP), 0.001, False, comparison.REGRESSED),  # a larger share is worse
        (Interval(0.8, 0.7, 0.9, BOOTSTRAP), 0.001, True, comparison.REGRESSED),
        (Interval(0.8, 0.7, 0.9, BOOTSTRAP), 0.2, True, comparison.NO_CHANGE),  # the test does not reject
        # 2 against 2 repeats: a range that excludes 1 by chance one time in three, no test.
        (Interval(0.8, 0.7, 0.9, RANGE_RATIO_LOW_N, 0.25), 0.33, False, comparison.NO_CHANGE),
        (Interval(0.8, 0.7, 0.9, RANGE_RATIO_LOW_N, 0.25), float("nan"), False, comparison.NO_CHANGE),
        # No rank test (efficiency): a 95 % bootstrap interval decides alone.
        (Interval(0.8, 0.7, 0.9, BOOTSTRAP, 0.95), float("nan"), False, comparison.IMPROVED),
        (Interval(2.0, float("nan"), float("nan"), "single run"), float("nan"), True, comparison.NO_CHANGE),
    ],
)
def test_a_change_is_named_only_when_the_interval_excludes_1_and_the_test_rejects(
    interval: Interval, p_value: float, higher: bool, change: str
) -> None:
    assert compare_cells.decide_change(interval, p_value, higher, floor=0.0) == change


@pytest.mark.parametrize(
    ("interval", "change"),
    [
        (Interval(1.1, 1.04, 1.2, BOOTSTRAP), comparison.NO_CHANGE),  # reaches into 1 + 0.05
        (Interval(1.3, 1.06, 1.4, BOOTSTRAP), comparison.IMPROVED),
        (Interval(0.85, 0.8, 0.95, BOOTSTRAP), comparison.REGRESSED),  # wholly below 1 / 1.05 = 0.952
        (Interval(0.93, 0.88, 0.96, BOOTSTRAP), comparison.NO_CHANGE),
    ],
)
def test_a_change_must_clear_the_between_study_noise_floor(interval: Interval, change: str) -> None:
    assert comparison.COMPARE_NOISE_FLOOR == 0.05
    assert compare_cells.decide_change(interval, 0.001, True) == change
    note = compare_cells.why_no_change(interval, 0.001, 6, 6)
    assert (note is not None and "noise floor 1 +/- 0.05" in note) == (change == comparison.NO_CHANGE)


def test_the_rank_test_is_exact_and_cannot_reject_with_three_repeats_a_side() -> None:
    # Complete separation: the exact two-sided p-value is 2 / C(n1 + n2, n1).
    assert (
        compare_cells.rank_test([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1) == compare_cells.smallest_p(3, 3)
    )
    assert compare_cells.rank_test([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert compare_cells.smallest_p(2, 2) == pytest.approx(1 / 3)
    assert np.isnan(compare_cells.rank_test([1.0], [2.0, 3.0]))
    assert compare_cells.rank_test([1.0] * 6, [1.0] * 6) == 1.0
    note = compare_cells.why_no_change(Interval(2.0, 1.5, 2.5, RANGE_RATIO_LOW_N, 0.56), 0.1, 3, 3)
    assert note is not None and "3 against 3 repeats cannot reject" in note


def test_efficiency_is_a_ratio_of_ratios_from_the_four_cells() -> None:
    cell, base = np.array([16.0, 18, 20, 16, 18, 20]), np.array([10.0, 11, 12, 10, 11, 12])
    same = compare_cells.efficiency_ratio_interval(cell, base, cell, base)
    assert same.method == BOOTSTRAP and same.value == 1.0 and same.low < 1.0 < same.high
    # NEW's baseline twice as fast, its cell as fast as BASE's: efficiency halved.
    half = compare_cells.efficiency_ratio_interval(cell, 2 * base, cell, base)
    assert half.value == pytest.approx(0.5) and half.high < 1.0
    low_n = compare_cells.efficiency_ratio_interval(
        np.array([4.0, 5]), np.array([2.0, 2.5]), np.array([2.0, 3]), np.array([1.0, 2])
    )
    # [min/max / (max/min), max/min / (min/max)] over the two studies' cells and baselines.
    assert (low_n.method, low_n.low, low_n.high) == (
        RANGE_RATIO_LOW_N,
        (4 / 2.5) / (3 / 1),
        (5 / 2) / (2 / 2),
    )
    assert low_n.coverage == 0.5**4


def test_the_ratio_uses_the_verdicts_intervals() -> None:
    metric = compare_cells.METRIC_BY_NAME["throughput"]
    six = compare_cells.compare_metric(
        np.array([10, 11, 12, 10, 11, 12.0]), np.array([20, 22, 24, 20, 22, 24.0]), metric
    )
    assert six is not None
    assert six["interval"] == BOOTSTRAP and six["coverage"] == 0.95
    assert six["ratio"] == pytest.approx(2.0) and six["change"] == comparison.IMPROVED
    two = compare_cells.compare_metric(np.array([10, 12.0]), np.array([20, 24.0]), metric)
    assert two is not None
    # The conservative range ratio [min(new)/max(base), max(new)/min(base)], 50 % x 50 %.
    assert (two["interval"], two["ratio_lower"], two["ratio_upper"]) == (RANGE_RATIO_LOW_N, 20 / 12, 24 / 10)
    assert two["coverage"] == 0.25 and two["p_value"] == pytest.approx(1 / 3)
    assert two["change"] == comparison.NO_CHANGE and "more repeats needed" in two["note"]
    assert compare_cells.compare_metric(np.array([0.0, 0.0]), np.array([1.0, 1.0]), metric) is None


def test_the_table_schema_is_read_from_the_columns() -> None:
    runs = pd.read_csv(REPO / "tests" / "data" / "golden" / "expected" / "runs.csv")
    assert compare_studies.table_schema(runs) == 2
    legacy = runs.drop(columns=["dataset", "network", "exposed_comm_share"])
    assert compare_studies.table_schema(legacy) == 1
    with pytest.raises(comparison.CompareError, match="incompatible table schema: no column.s. throughput"):
        compare_studies.table_schema(runs.drop(columns=["throughput"]))
    with pytest.raises(comparison.CompareError, match="schema version 99"):
        compare_studies.table_schema(runs.assign(schema_version=99))
    assert compare_studies.table_schema(runs.assign(schema_version=2)) == 2


def test_verdict_changes_are_put_in_words() -> None:
    assert comparison.what_changed("tensorflow", "bigdl") == "different winner: tensorflow -> bigdl"
    assert (
        comparison.what_changed("no clear winner", "torch") == "winner torch where there was no clear winner"
    )
    assert comparison.what_changed("torch", "no clear winner") == "torch no longer wins"
    assert comparison.what_changed("contradicted", "reproduced") == "claim contradicted -> reproduced"


# --- the CLI on real tables -------------------------------------------------------------------


def test_the_same_study_twice_shows_no_change(studies: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(capsys, studies["base"], studies["same"] / "results", "--out", out)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == sorted(compare_cells.OUTPUT_FILES.values())
    table = pd.read_csv(out / "comparison.csv")
    assert list(table.columns) == list(compare_cells.COMPARISON_COLUMNS)
    # 20 cells (the contended TensorFlow run is left out of its cell, as in the verdicts).
    assert table["cell"].nunique() == 20
    assert set(table["change"]) == {comparison.NO_CHANGE}
    assert np.allclose(table["ratio"], 1.0)
    assert pd.read_csv(out / "verdict_changes.csv").empty
    # Only the row that says what verify proved of each study (it is always there).
    assert pd.read_csv(out / "differences.csv")["fact"].tolist() == [comparison.VERDICT_FACT]
    assert pd.read_csv(out / "unmatched.csv").empty
    assert "20 cells matched (0 unmatched); 0 improved, 0 regressed" in stdout


def test_one_framework_made_faster_changes_only_that_framework(
    studies: dict[str, Path], tmp_path: Path, capsys
) -> None:
    out = tmp_path / "cmp"
    code, _, err = run_cli(capsys, studies["base"], studies["bigdl_faster"], "--out", out)
    assert code == 0, err
    table = pd.read_csv(out / "comparison.csv")
    throughput = table[table["metric"].eq("throughput")]
    bigdl = throughput[throughput["framework"].eq("bigdl")]
    assert len(bigdl) == 6 and np.allclose(bigdl["ratio"], 1.25, rtol=1e-3)
    # LeNet has 6 repeats a side: a bootstrap interval and a rank test that rejects.
    lenet = bigdl[bigdl["model"].eq("lenet")]
    assert set(lenet["interval"]) == {BOOTSTRAP} and (lenet["p_value"] < 0.05).all()
    assert set(lenet["change"]) == {comparison.IMPROVED}
    # The AutoEncoder has 2 a side: the range excludes 1, but no test could reject.
    autoencoder = bigdl[bigdl["model"].eq("autoencoder")]
    assert (autoencoder["ratio_lower"] > 1).all() and set(autoencoder["change"]) == {comparison.NO_CHANGE}
    assert autoencoder["note"].str.contains("2 against 2 repeats cannot reject").all()
    others = table[table["framework"].ne("bigdl") | table["metric"].ne("throughput")]
    assert set(others["change"]) == {comparison.NO_CHANGE}


def test_a_changed_winner_is_listed(studies: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(capsys, studies["base"], studies["bigdl_fastest"], "--out", out)
    assert code == 0, err
    changes = pd.read_csv(out / "verdict_changes.csv")
    finding = changes[changes["kind"].eq("finding") & changes["question"].eq("fastest_compute")]
    assert finding[["model", "network", "base_verdict", "new_verdict"]].values.tolist() == [
        ["lenet", "host", "tensorflow", "bigdl"]
    ]
    assert finding["what_changed"].iloc[0] == "different winner: tensorflow -> bigdl"
    claim = changes[changes["kind"].eq("claim") & changes["question"].eq("BigDL computes fastest")]
    assert claim[["base_verdict", "new_verdict"]].values.tolist() == [["contradicted", "reproduced"]]
    page = (out / "comparison.html").read_text()
    assert "different winner: tensorflow -&gt; bigdl" in page


def test_a_changed_setting_is_unmatched_unless_ignored_and_then_stated(
    studies: dict[str, Path], tmp_path: Path, capsys
) -> None:
    code, _, err = run_cli(capsys, studies["base"], studies["torch_2_threads"], "--out", tmp_path / "strict")
    assert code == 0, err
    unmatched = pd.read_csv(tmp_path / "strict" / "unmatched.csv")
    # Every torch cell of either study is listed, none dropped silently.
    assert set(unmatched["framework"]) == {"torch"} and len(unmatched) == 2 * 7
    assert set(unmatched["only_in"]) == {"base", "torch_2_threads"}
    assert set(unmatched["why"]) == {"not run in base", "not run in torch_2_threads"}
    code, _, err = run_cli(
        capsys,
        studies["base"],
        studies["torch_2_threads"],
        "--out",
        tmp_path / "loose",
        "--ignore-key",
        "threads_per_rank",
    )
    assert code == 0, err
    assert pd.read_csv(tmp_path / "loose" / "unmatched.csv").empty
    diffs = pd.read_csv(tmp_path / "loose" / "differences.csv", dtype=str)
    row = diffs[diffs["fact"].eq("threads_per_rank torch")]
    assert row[["base", "torch_2_threads"]].values.tolist() == [["1", "2"]]


def test_a_different_machine_is_stated_and_the_page_leads_with_normalised_quantities(
    studies: dict[str, Path], tmp_path: Path, capsys
) -> None:
    other = tmp_path / "cluster"
    shutil.copytree(studies["same"], other)
    (other / "results" / "host").mkdir()
    (other / "results" / "host" / "matmul_peak.json").write_text(
        json.dumps({"cores": 48, "peak_flops": {"1": 9e10}})
    )
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(capsys, studies["base"], other, "--out", out)
    assert code == 0, err
    diffs = pd.read_csv(out / "differences.csv", dtype=str)
    assert diffs.set_index("fact").loc["cpu_cores", "cluster"] == "48"
    assert "the hardware differs (cpu_cores, matmul_peak_flops)" in stdout
    page = (out / "comparison.html").read_text()
    assert "The hardware differs" in page
    assert page.index("scaling efficiency") < page.index("throughput (samples/s")


def test_three_studies_side_by_side(studies: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(
        capsys, studies["base"], studies["same"], studies["bigdl_faster"], "--out", out
    )
    assert code == 0, err
    table = pd.read_csv(out / "comparison.csv")
    assert set(table["study"]) == {"same", "bigdl_faster"} and set(table["base"]) == {"base"}
    assert len(stdout.splitlines()[0:2]) == 2


def test_strings_from_a_study_are_escaped_in_the_page(
    studies: dict[str, Path], tmp_path: Path, capsys
) -> None:
    out = tmp_path / "cmp"
    code, _, err = run_cli(capsys, studies["base"], studies["hostile"], "--out", out)
    assert code == 0, err
    page = (out / "comparison.html").read_text()
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


# --- bad input: one line, exit 2, nothing written ----------------------------------------------


def refused(capsys, out: Path, *targets: str | Path) -> str:
    code, stdout, err = run_cli(capsys, *targets, "--out", out)
    assert code == 2, (stdout, err)
    assert not out.exists()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("compare: ")
    return lines[0]


def test_no_cell_in_common_is_refused(studies: dict[str, Path], tmp_path: Path, capsys) -> None:
    other = tmp_path / "other"
    results = other / "results"
    results.mkdir(parents=True)
    runs = pd.read_csv(studies["base"] / "results" / "runs.csv")
    runs.assign(model="resnet").to_csv(results / "runs.csv", index=False)
    assert "no cell in common between base" in refused(capsys, tmp_path / "out", studies["base"], other)


def test_a_results_folder_without_its_runs_table_is_refused(studies, tmp_path: Path, capsys) -> None:
    other = tmp_path / "other" / "results"
    shutil.copytree(studies["base"] / "results" / "runs", other / "runs")
    line = refused(capsys, tmp_path / "out", studies["base"], tmp_path / "other")
    assert "a results folder without its runs table (runs.csv)" in line


def test_tables_of_an_incompatible_schema_are_refused(studies, tmp_path: Path, capsys) -> None:
    for name, edit in (
        ("old", lambda runs: runs.drop(columns=["throughput"])),
        ("future", lambda runs: runs.assign(schema_version=3)),
    ):
        results = tmp_path / name / "results"
        results.mkdir(parents=True)
        edit(pd.read_csv(studies["base"] / "results" / "runs.csv")).to_csv(results / "runs.csv", index=False)
        line = refused(capsys, tmp_path / "out", studies["base"], tmp_path / name)
        assert "schema" in line and "runs.csv" in line


def test_the_same_study_twice_by_path_is_refused(studies, tmp_path: Path, capsys) -> None:
    base = studies["base"]
    assert "the same study as" in refused(capsys, tmp_path / "out", base, base)
    assert "the same study as" in refused(capsys, tmp_path / "out", base, base / "results")


@pytest.fixture(scope="module")
def archived(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An honest study (helpers.verify_study) and its archive, and a copy of the archive
    with one events file edited (the manifest left as it was)."""
    study = make_verify_study(tmp_path_factory.mktemp("archived"))
    archive = make_archive(study)
    tampered = archive.with_name("tampered.tar.gz")
    with tarfile.open(archive) as src, tarfile.open(tampered, "w:gz") as dst:
        for info in src.getmembers():
            data = src.extractfile(info).read() if info.isfile() else None  # type: ignore[union-attr]
            if data is not None and info.name.endswith("torch/lenet/n2x1/b64/r0/events.jsonl"):
                data = data.replace(b'"step_s":0.0', b'"step_s":0.1', 1)
                info.size = len(data)
            dst.addfile(info, None if data is None else io.BytesIO(data))
    return archive, tampered


def test_an_archive_is_verified_then_compared(archived, tmp_path: Path, capsys) -> None:
    archive, _ = archived
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(capsys, archive, archive.parent, "--out", out)
    assert code == 0, err
    table = pd.read_csv(out / "comparison.csv")
    assert not table.empty and set(table["change"]) == {comparison.NO_CHANGE}
    # The archive's .sha256 (make artifact's) beside it proves its origin; the results
    # folder compared with it is read as it is: both verdicts on the page and in differences.csv.
    page = (out / "comparison.html").read_text()
    assert "verified: consistent and authentic" in page and "origin not proven" in page
    verdicts = pd.read_csv(out / "differences.csv").set_index("fact").loc[comparison.VERDICT_FACT]
    assert sorted(verdicts.drop("hardware").str.split(" ").str[0]) == ["not", "verified:"], verdicts


def test_an_archive_that_fails_verify_is_refused(archived, tmp_path: Path, capsys) -> None:
    archive, tampered = archived
    line = refused(capsys, tmp_path / "out", archive, tampered)
    assert "tampered.tar.gz: the archive fails verify" in line and "refused" in line


def test_an_archive_its_publishers_digest_contradicts_is_refused(archived, tmp_path: Path, capsys) -> None:
    archive, _ = archived
    other = tmp_path / "received" / archive.name
    other.parent.mkdir()
    shutil.copy(archive, other)
    other.with_name(other.name + ".sha256").write_text(f"{'0' * 64}  {other.name}\n")
    line = refused(capsys, tmp_path / "out", archive, other)
    assert "verify: the archive's sha256 is" in line and "not the archive its publisher made: refused" in line


# --- the config key -----------------------------------------------------------------------


def test_the_config_key_compare_with_must_name_an_existing_study(studies, tmp_path: Path) -> None:
    schema = load_schema(SCHEMA)
    assert validate_config({}, schema)["compare_with"] is None
    assert validate_config({"compare_with": str(studies["base"])}, schema)["compare_with"] == str(
        studies["base"]
    )
    with pytest.raises(ConfigError, match="config key 'compare_with': 'nowhere' does not exist"):
        validate_config({"compare_with": "nowhere"}, schema, tmp_path)
    with pytest.raises(ConfigError, match="compare_with"):
        validate_config({"compare_with": ""}, schema)


def test_the_rule_writes_the_files_the_cli_writes() -> None:
    """rules/analysis.smk declares outputs.COMPARE_FILES; the CLI writes the same names."""
    assert compare_cells.OUTPUT_FILES is COMPARE_FILES
    rules = (REPO / "rules" / "analysis.smk").read_text()
    assert "rule compare:" in rules and "COMPARE_FILES.items()" in rules
    assert "COMPARE_TARGETS" in (REPO / "Snakefile").read_text()


def test_an_independent_repeat_of_the_study_changes_few_cells(studies, tmp_path: Path, capsys) -> None:
    """The golden study made again with another seed (make_runs.py's runs, rng seed 2019):
    the same set-ups but the emulated network's, independent noise. A change named here is
    false by construction; the rules allow about 5 % of the rows (measured: 0 of 42; with
    seeds 2 to 5 against seed 1, 1 to 3 of 46, each under 2 % apart)."""
    spec = importlib.util.spec_from_file_location("make_runs", GOLDEN_RUNS.parent / "make_runs.py")
    assert spec is not None and spec.loader is not None
    make_runs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_runs)
    other = tmp_path / "again"
    make_runs.ROOT = other / "results" / "runs"
    rng = random.Random(2019)
    for framework in ("torch", "tensorflow", "bigdl"):
        for model in ("lenet", "autoencoder"):
            for nodes in (1, 2, 4):
                for repeat in range(6 if model == "lenet" else 2):
                    make_runs.write(framework, model, nodes, repeat, rng)
    with contextlib.chdir(other / "results"):
        aggregate.write_outputs(
            aggregate.aggregate(aggregate.find_events("runs")), dict(aggregate.OUTPUT_FILES)
        )
    code, _, err = run_cli(capsys, studies["base"], other, "--out", tmp_path / "cmp")
    assert code == 0, err
    unmatched = pd.read_csv(tmp_path / "cmp" / "unmatched.csv")
    assert set(unmatched["network"]) == {"emulated-1gbe"} and set(unmatched["only_in"]) == {"base"}
    table = pd.read_csv(tmp_path / "cmp" / "comparison.csv")
    changed = table[table["change"].ne(comparison.NO_CHANGE)]
    assert len(changed) <= 0.1 * len(table), changed[["cell", "metric", "ratio", "p_value"]]
    assert (abs(changed["ratio"] - 1) < 0.05).all()


def test_a_shorter_time_to_target_is_an_improvement() -> None:
    metric = compare_cells.METRIC_BY_NAME["time_to_target_s"]
    base, new = np.array([100.0, 102, 104, 101, 103, 105]), np.array([80.0, 81, 82, 83, 84, 85])
    row = compare_cells.compare_metric(base, new, metric)
    assert row is not None and row["better"] == "lower" and row["ratio"] < 1
    assert row["change"] == comparison.IMPROVED


def test_the_page_ranks_the_frameworks_per_set_up() -> None:
    rows = [
        {"study": "b", "metric": "throughput", "framework": f, "model": "lenet", "dataset": "mnist",
         "scaling": "weak", "network": "host", "ranks_per_node": 1, "batch": 64, "threads_per_rank": "1",
         "nodes": 2, "base_median": base, "new_median": new}
        for f, base, new in (("torch", 3.0, 1.0), ("tensorflow", 2.0, 2.0), ("bigdl", 1.0, 3.0))
    ]  # fmt: skip
    ranking = compare_page.ranking(pd.DataFrame(rows))
    assert ranking[["group", "base_ranking", "new_ranking", "same"]].values.tolist() == [
        ["lenet/host n2x1 b64", "torch > tensorflow > bigdl", "bigdl > tensorflow > torch", False]
    ]


def test_the_module_runs_as_a_command(studies: dict[str, Path], tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscale.compare.comparison",
            str(studies["base"]),
            str(studies["base"]),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("compare: ") and "the same study" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_a_slurm_study_against_a_local_one_states_launcher_hosts_locks_and_config(
    studies: dict[str, Path], tmp_path: Path, capsys
) -> None:
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(capsys, studies["base"], studies["on_slurm"], "--out", out)
    assert code == 0, err
    diffs = pd.read_csv(out / "differences.csv", dtype=str, keep_default_na=False).set_index("fact")
    assert diffs.loc["launcher (profile)", "on_slurm"] == "slurm"
    assert diffs.loc["lock_sha256 torch", "on_slurm"] == "torch-lock-2"
    assert diffs.loc["config bigdl: learning_rate", ["base", "on_slurm"]].tolist() == ["", "0.02"]
    assert diffs.loc["hosts", "on_slurm"].startswith("cn00;cn01")
    assert diffs.loc["hosts", "hardware"] == "True"
    assert "the hardware differs (hosts)" in stdout


def test_an_ignored_key_may_not_merge_a_studys_own_cells(
    studies: dict[str, Path], tmp_path: Path, capsys
) -> None:
    # The golden study ran torch's and TensorFlow's LeNet at 2 nodes on the host and on an emulated 1 GbE.
    line = refused(capsys, tmp_path / "out", studies["base"], studies["same"], "--ignore-key", "network")
    assert "--ignore-key network: base has several values of it (emulated-1gbe, host) in one cell" in line
