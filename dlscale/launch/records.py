"""Run records: the ranks' part files and the spec in, ``run_start`` ... ``run_end`` out.

Each rank writes its own part file (``rank<k>.jsonl`` in the run's work dir); the
launcher merges them into the run's events: one run_start saying where and how the run
ran (hosts, versions, config hash, git sha, network, CPU settings, the venv's lock), the
iterations, and one run_end with the status and its reason. A spec that is not a run is
recorded the same way, as a failure naming the field, so that its row is well typed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from dlscale import envs, networks, quality
from dlscale.base.sysutil import git_sha
from dlscale.runners.plan import Plan
from dlscale.runspec import RunSpec, SpecError, run_id_fields

#: The thread variables every rank's environment may set, recorded with the settings.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "MKL_THREADING_LAYER",
    "OMP_WAIT_POLICY",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "MKL_DEBUG_CPU_TYPE",
)

#: The contention record of a run whose host load the launcher cannot attribute (SLURM).
NOT_MEASURED: dict[str, Any] = {"other_busy_share": None, "steal_share": None, "contended": None}

#: The run id fields run_start carries, in its order.
RUN_ID_FIELDS = ("framework", "model", "nodes", "ranks_per_node", "batch", "repeat")


def read_parts(work_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """Each rank's events so far. A line cut off by a killed rank is evidence lost, not an error."""
    parts: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(work_dir.glob("rank*.jsonl")):
        rank = int(path.stem.removeprefix("rank"))
        events = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                break
        parts[rank] = events
    return parts


def read_spec(text: str) -> tuple[RunSpec | None, dict[str, Any], str | None]:
    """The run spec the rule passed, the plain data it was made of, and why it is not a run.

    A spec that is not a run (a field missing, of the wrong type, unknown) is a recorded
    failure like any other: the reason names the field, and the run's record keeps what
    could be read of it.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        return None, {}, f"bad run spec: not JSON: {err}"
    raw = data if isinstance(data, dict) else {}
    try:
        return RunSpec.from_dict(data), raw, None
    except SpecError as err:
        return None, raw, f"bad run spec: {err}"
    except KeyError as err:  # the catalog's: an unknown framework or model, named
        return None, raw, f"bad run spec: {err.args[0] if err.args else err}"


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def identity_of_bad_spec(run_dir: Path, spec_data: Mapping[str, Any]) -> dict[str, Any]:
    """Which run a spec that is not a run was for: read off the run's folder
    (``results/runs/<run id>/``), so that its failed record is well typed and names the
    right run; the raw spec stays under ``spec`` as evidence."""
    run_id = "/".join(run_dir.parts[-5:])
    fields = run_id_fields(run_id)
    if fields is None:
        world = _positive_int(spec_data.get("world_size")) or 1
        return {"world_size": world}
    world = fields["nodes"] * fields["ranks_per_node"]
    return {**fields, "run_id": run_id, "world_size": world, "global_batch": fields["batch"] * world}


def run_settings(launcher: ModuleType, spec: RunSpec, plan: Plan) -> dict[str, Any]:
    """The CPU settings a run uses: the runner launcher's ``settings(spec)`` (engine, BLAS,
    thread pools, ...; every launcher has it: ``dlscale.runners.contract.Launcher``) and the
    thread variables its first process is given (what the ranks really get, not what the
    spec meant). A hook that fails is recorded with its error, never a crash.
    """
    record: dict[str, Any] = {}
    try:
        record.update(launcher.settings(spec))
    except (KeyError, ValueError, TypeError) as err:
        record["error"] = f"{type(err).__name__}: {err}"
    env = plan.processes[0].env if plan.processes else {}
    record["env"] = {name: env[name] for name in THREAD_VARIABLES if name in env}
    return record


def environment_record(env: Mapping[str, str]) -> dict[str, Any]:
    """What the run ran with: its venv's lock (from the marker the training rule passes as
    ``DLSCALE_ENV_MARKER``) and, for Caffe, the key of its build. Empty where unknown
    (a run started by hand, ``--sdm conda``)."""
    record: dict[str, Any] = {}
    marker = env.get("DLSCALE_ENV_MARKER")
    if marker and Path(marker).is_file():
        try:
            record["env"] = envs.env_record(marker)
        except (OSError, ValueError) as err:
            record["env"] = {"error": f"{marker}: {err}"}
    caffe = env.get("DLSCALE_CAFFE_MARKER")
    if caffe:
        try:
            record["caffe_build_key"] = envs.marker_key(caffe)
        except ValueError:
            pass  # a user's caffe.home named by hand: its marker carries no key
    return record


def trained_iterations(spec: RunSpec, evals: list[dict[str, Any]]) -> int:
    """How many iterations the run's ranks must have trained: every one of the spec's, or,
    with a quality target, those up to the first evaluation that met it (where it stopped)."""
    target = spec.quality_target
    if target is None:
        return spec.total_iterations
    met = [
        int(e["iteration"])
        for e in evals
        if e.get("metric") == target["metric"]
        and quality.meets(target["metric"], float(e["value"]), target["value"])
    ]
    return min(met) if met else spec.total_iterations


def measured_by_ranks(parts: Mapping[int, list[dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    """What each rank measured about its own set-up (``rank_measured`` events, later ones
    adding to earlier ones: ``RunContext.record_measured``), by rank."""
    out: dict[int, dict[str, Any]] = {}
    for rank, events in parts.items():
        for event in events:
            if event.get("event") == "rank_measured" and isinstance(event.get("measured"), dict):
                out.setdefault(rank, {}).update(event["measured"])
    return out


def measured_differences(measured: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """A warning for each rank whose measurement differs from rank 0's (run_start keeps
    rank 0's): ranks of one run that loaded different libraries did not run the same code."""
    first = measured.get(0) or {}
    return [
        f"rank {rank} measured {key} = {json.dumps(value.get(key), sort_keys=True)}, rank 0"
        f" {json.dumps(first.get(key), sort_keys=True)}"
        for rank, value in sorted(measured.items())
        if rank != 0
        for key in sorted(set(value) | set(first))
        if value.get(key) != first.get(key)
    ]


def merge(
    parts: Mapping[int, list[dict[str, Any]]],
    *,
    spec: RunSpec | None,
    spec_data: Mapping[str, Any],
    failure: str | None,
    run_dir: Path,
    reporting_ranks: int,
    started: float,
    loadavg_start: list[float],
    config_sha256: str,
    repo: Path,
    mode: str,
    network_info: Mapping[str, Any],
    settings: Mapping[str, Any],
    exit_warnings: Mapping[int, str],
) -> list[dict[str, Any]]:
    """The run's events from its ranks' ``parts``: run_start, every iteration, run_end.

    The run failed if the launcher says why (``failure``), if the spec is not a run, or if
    the ranks that report (``reporting_ranks``) did not record every iteration the spec
    asks for. run_end's warnings are the launcher's own (``exit_warnings``: a rank crashed
    after its last event) and those the ranks recorded in their rank_end.
    """
    starts = {r: next((e for e in ev if e.get("event") == "rank_start"), None) for r, ev in parts.items()}
    measured = measured_by_ranks(parts)
    record = spec.to_dict() if spec else dict(spec_data)
    identity = record if spec else identity_of_bad_spec(run_dir, spec_data)
    world = spec.world_size if spec else identity["world_size"]
    hosts = [(starts.get(r) or {}).get("host") for r in range(world)]
    rank0 = starts.get(0) or {}
    iterations = [e for r in sorted(parts) for e in parts[r] if e.get("event") == "iteration"]
    # Held-out quality: rank 0 evaluates (dlscale.runners.common.RunContext.evaluate).
    evals = [e for e in parts.get(0, []) if e.get("event") == "eval"]
    timed0 = [e for e in parts.get(0, []) if e.get("event") == "iteration" and not e.get("warmup")]
    startup_s = (timed0[0]["time"] - timed0[0]["step_s"] - started) if timed0 else None
    status = "ok"
    reason = None
    if failure or spec is None:
        status, reason = "failed", failure
    else:
        expected = reporting_ranks * trained_iterations(spec, evals)
        if len(iterations) != expected:
            status, reason = "failed", f"expected {expected} iteration events, found {len(iterations)}"
    run_start = {
        "event": "run_start",
        "run_id": identity.get("run_id"),
        **{k: identity.get(k) for k in RUN_ID_FIELDS},
        "dataset": record.get("dataset"),
        "scaling": record.get("scaling"),
        "global_batch": identity.get("global_batch"),
        "world_size": world,
        "hosts": hosts,
        "threads_per_rank": record.get("threads_per_rank"),
        "versions": rank0.get("versions", {}),
        "config_sha256": config_sha256,
        "git_sha": git_sha(repo),
        "launcher": mode,
        "network": network_info.get("name", networks.HOST),
        "network_setup": network_info,
        "loadavg": loadavg_start,
        "startup_s": startup_s,
        "spec": record,
        **({"learning_rate": spec.lr_record()} if spec else {}),
        "settings": settings,
        **({"measured": measured[0]} if measured.get(0) else {}),
        **environment_record(os.environ),
        "time": started,
    }
    run_end = {
        "event": "run_end",
        "status": status,
        "reason": reason,
        "loadavg": list(os.getloadavg()),
        "wall_s": time.time() - started,
        "warnings": sorted(
            [*exit_warnings.values(), *measured_differences(measured)]
            + [
                str(w)
                for r in sorted(parts)
                for e in parts[r]
                if e.get("event") == "rank_end"
                for w in e.get("warnings") or ()
            ]
        ),
        "time": time.time(),
    }
    return [run_start, *iterations, *evals, run_end]
