"""One row of the fault table per class of hostile input (issue 17's acceptance).

The cases themselves are tests elsewhere (unit/test_tables_hostile, unit/test_parse_hostile,
unit/test_caffe_parse_fuzz, unit/test_study, faults/test_unprivileged); here a representative case of each
kind the issue saw is put through the real entry point again (``tables.load_events``,
``python -m dlscale.parse``'s ``main``, ``validate_config`` and the local capacity check,
the launcher's ``setup_network``), and the class becomes one row: "rejected cleanly" when
every case was refused with a message naming where (FILE:LINE, the config key, the
reason and the remedy) or became a failed run with its reason, "wrong result" otherwise.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import hostile_logs as logs
from helpers.events import every_rank, iteration, put, run_end, run_start
from helpers.faults import fault_spec, judge

import dlscale.parse.__main__ as parse_cli
from dlscale.analysis import tables
from dlscale.catalog import CONFIG_SCHEMA
from dlscale.events import MAX_LINE_CHARS, EventError
from dlscale.host import netns
from dlscale.launch import network as launcher
from dlscale.study.validation import ConfigError, check_local_capacity, load_schema, validate_config

pytestmark = pytest.mark.faults


def event_error(paths: list[Path], at: Path, message: str) -> str | None:
    try:
        tables.load_events(paths)
    except EventError as err:
        text = str(err)
        if not text.startswith(f"{at}:"):
            return f"error does not name FILE:LINE: {text}"
        return None if message in text else f"unclear error: {text}"
    return "accepted"


def test_hostile_events_are_errors_or_failed_runs(tmp_path):
    def case(name: str, events: list[dict[str, Any]], message: str, at: str | None = None):
        def run() -> str | None:
            path = put(tmp_path / name, events, at)
            return event_error([path], path, message)

        return run

    def missing_rank() -> str | None:
        runs, _ = tables.load_events(
            [put(tmp_path / "missing", [run_start(nodes=2), *every_rank(1), run_end()])]
        )
        row = runs.iloc[0]
        return (
            None
            if (row["status"], row["reason"]) == ("failed", "rank 1 reported no iteration 0")
            else str(row)
        )

    def two_files() -> str | None:
        first = put(tmp_path / "two" / "a", [run_start(), *every_rank(1), run_end()])
        second = put(tmp_path / "two" / "b", [run_start(), *every_rank(1), run_end()])
        return event_error([first, second], second, f"is also the run id of {first}:1")

    def not_utf8() -> str | None:
        path = put(tmp_path / "utf8", [run_start(), *every_rank(1), run_end()])
        path.write_bytes(path.read_bytes().replace(b'"lenet"', b'"len\xffet"', 1))
        return event_error([path], path, "not UTF-8 text")

    def zero_baseline() -> str | None:
        base = put(tmp_path / "zero", [run_start(), *every_rank(1, batch=0), run_end()])
        two = put(tmp_path / "zero", [run_start(nodes=2), *every_rank(2), run_end()])
        return event_error([two, base], base, "samples=0, not its batch of 64")

    judge(
        "hostile events",
        "analysis",
        {
            "rank outside the world": case(
                "rank",
                [run_start(nodes=2), *every_rank(2), iteration(2, 1, 0.5), run_end()],
                "rank 2 in a world of 2",
            ),
            "a rank missing from every iteration": missing_rank,
            "samples 100x the batch": case(
                "samples", [run_start(), iteration(0, 0, 0.5, samples=6400), run_end()], "samples=6400"
            ),
            "zero samples at the baseline": zero_baseline,
            "run id not its folder": case(
                "folder",
                [run_start(), *every_rank(1), run_end()],
                "not the run of the folder",
                "torch/lenet/n2x1/b64/r0",
            ),
            "run id against its fields": case(
                "fields", [{**run_start(), "nodes": 2}, *every_rank(1), run_end()], "says nodes="
            ),
            "two files of one run": two_files,
            "a line over the limit": case(
                "long",
                [run_start(), {**iteration(0, 0, 0.5), "blob": "x" * MAX_LINE_CHARS}, run_end()],
                f"line is longer than {MAX_LINE_CHARS} characters",
            ),
            "a run_start field the launcher does not write": case(
                "field",
                [{**run_start(), "blob": "y" * 1000}, *every_rank(1), run_end()],
                "'blob' was unexpected",
            ),
            "text that is not UTF-8": not_utf8,
            "wrong type in run_start": case(
                "types",
                [{**run_start(), "nodes": "two"}, *every_rank(1), run_end()],
                "is not of type 'integer'",
            ),
        },
    )


def parsed(fmt: str, path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = parse_cli.main([fmt, str(path)])
    return code, out.getvalue(), err.getvalue()


def test_hostile_logs_are_parse_errors_or_failed_runs(tmp_path):
    def refused(fmt: str, text: str | bytes, message: str):
        def run() -> str | None:
            path = logs.write(tmp_path, text, f"{fmt}-{abs(hash(message))}.log")
            code, _, err = parsed(fmt, path)
            if code != 2:
                return f"exit {code}, not 2"
            return None if err.startswith(f"{path}:") and message in err else f"unclear: {err.strip()}"

        return run

    def failed(fmt: str, text: str, reason: str):
        def run() -> str | None:
            code, out, err = parsed(fmt, logs.write(tmp_path, text, f"{fmt}-failed-{abs(hash(reason))}.log"))
            last = out.strip().splitlines()[-1] if out.strip() else ""
            if code != 0 or '"run_end"' not in last or '"failed"' not in last:
                return f"exit {code}, last event {last!r}, stderr {err.strip()!r}"
            return None if reason in last else f"reason not {reason!r}: {last}"

        return run

    aborted = (
        "26/11/29 19:48:01 ERROR DistriOptimizer$: Error: org.apache.spark.SparkException: Job aborted due to"
        " stage failure: Task serialization failed: java.io.NotSerializableException: Foo\n"
    )
    solver_to_25 = logs.SOLVER[: logs.line_number(logs.SOLVER, "Iteration 25, loss")]
    back = [
        line.replace("Iteration 10,", "Iteration 3,") if "Iteration 10, loss" in line else line
        for line in logs.SOLVER
    ]
    late = logs.BIGDL_START - logs.dt.timedelta(seconds=1)
    judge(
        "hostile logs",
        "parse",
        {
            "BigDL job aborted": failed("bigdl", logs.SPARK + aborted, "Job aborted due to stage failure"),
            "BigDL out of memory": failed(
                "bigdl", (logs.BIGDL_DATA / "failed-oom.log").read_text(), "java.lang.OutOfMemoryError"
            ),
            "Caffe Check failed": failed(
                "caffe",
                "".join(logs.solver_until(10) + [logs.CHECK_FAILED] + logs.CRASH),
                "Check failed: data_",
            ),
            "empty log": refused("bigdl", b"", "empty log"),
            "binary log": refused("caffe", b"\x7fELF\x02\x01\x01\x00" * 4, "not a text log"),
            "time going backwards": refused(
                "bigdl", logs.bigdl_iteration(1) + logs.bigdl_iteration(2, moment=late), "time goes backwards"
            ),
            "iterations going backwards": refused("caffe", "".join(back), "iteration 3 follows iteration 5"),
            "last line cut mid-number": refused(
                "caffe", "".join(solver_to_25)[: -len("2439\n")], "last line cut off before its newline"
            ),
        },
    )


def test_bad_configs_are_refused_naming_the_key():
    schema = load_schema(CONFIG_SCHEMA)

    def refused(config: dict[str, Any], key: str, message: str, local_cores: int | None = None):
        def run() -> str | None:
            try:
                study = validate_config(config, schema)
                if local_cores is not None:
                    check_local_capacity(study, cores=local_cores)
            except ConfigError as err:
                text = str(err)
                return None if f"config key '{key}'" in text and message in text else f"unclear: {text}"
            return "accepted"

        return run

    laughs = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for level in range(1, 10):
        laughs.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]")
    aliased = yaml.safe_load("\n".join([*laughs, "nodes: *a9"]))["nodes"]
    judge(
        "bad configs",
        "config",
        {
            "nodes: [2.0]": refused({"nodes": [2.0]}, "nodes[0]", "not of type 'integer'"),
            "repeats: 2.0": refused({"repeats": 2.0}, "repeats", "2.0 is not an integer"),
            "learning rate NaN": refused(
                {"learning_rate": {"lenet": float("nan")}}, "learning_rate.lenet", "finite"
            ),
            "iterations 10^9": refused(
                {"iterations": {"lenet": 10**9}}, "iterations.lenet", "greater than the maximum"
            ),
            "100,000 local ranks": refused({"nodes": [1, 100000]}, "nodes", "the largest run", local_cores=2),
            "a study of zero runs": refused(
                {
                    "frameworks": ["torch"],
                    "models": ["lenet"],
                    "models_per_framework": {"torch": ["alexnet"]},
                },
                "models_per_framework",
                "no framework runs any of the study's models",
            ),
            "billion laughs": refused({"nodes": aliased}, "nodes[1]", "YAML aliases"),
        },
    )


def test_no_network_namespace_refuses_what_listens_everywhere():
    none = {
        "namespace": "network namespaces need root (test)",
        "user namespace": "user namespaces off (test)",
    }

    def refused(framework: str, what: str, **overrides: Any):
        def run() -> str | None:
            try:
                launcher.setup_network(fault_spec(framework, **overrides), "local", none)
            except netns.NetnsError as err:
                text = str(err)
                ok = what in text and "user namespaces off (test)" in text and "To run it" in text
                return None if ok else f"unclear: {text}"
            return "ran on the host's network"

        return run

    def loopback(framework: str):
        def run() -> str | None:
            net, info = launcher.setup_network(fault_spec(framework), "local", none)
            return None if net is None and info.get("listen") == "127.0.0.1 only" else str(info)

        return run

    judge(
        "no network namespace",
        "launcher",
        {
            "TensorFlow MWMS, 2 ranks": refused("tensorflow", "gRPC servers"),
            "TensorFlow ps, 1 rank": refused(
                "tensorflow", "gRPC servers", nodes=1, tensorflow={"strategy": "ps"}
            ),
            "Caffe (mpirun)": refused("caffe", "mpirun"),
            "torch on loopback": loopback("torch"),
            "BigDL on loopback": loopback("bigdl"),
        },
    )
