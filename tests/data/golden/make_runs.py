"""Writes the golden study's events (run from this folder: ``python make_runs.py``).

A small, seeded study of hand-made but realistic runs: three frameworks, LeNet and the
AutoEncoder, 1, 2 and 4 nodes, 6 repeats of some cells (bootstrap intervals) and 2 of others
(low-n ranges), an emulated network, a failed run and a contended one. Its tables, made by
``python -m dlscale.analysis runs --out expected``, are the reference the layers refactor
must reproduce byte for byte (tests/unit/test_golden.py).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "runs"
STEP = {"torch": 0.020, "tensorflow": 0.018, "bigdl": 0.030}
COMM = {"torch": 0.004, "tensorflow": 0.006, "bigdl": 0.015}


def write(framework: str, model: str, nodes: int, repeat: int, rng: random.Random, **extra: object) -> None:
    network = extra.get("network")
    layout = f"n{nodes}x1" + (f"-{str(network).removeprefix('emulated-')}" if network else "")
    run_id = f"{framework}/{model}/{layout}/b64/r{repeat}"
    base = STEP[framework] * (1.6 if model == "autoencoder" else 1.0)
    comm = COMM[framework] * (nodes - 1) * (3.0 if network else 1.0)
    t0 = 1_700_000_000.0 + 1000 * rng.random()
    start = {
        "event": "run_start",
        "run_id": run_id,
        "framework": framework,
        "model": model,
        "nodes": nodes,
        "ranks_per_node": 1,
        "batch": 64,
        "repeat": repeat,
        "world_size": nodes,
        "global_batch": 64 * nodes,
        "dataset": "mnist",
        "scaling": "weak",
        "hosts": [f"host/node{i}" for i in range(nodes)],
        "threads_per_rank": 1,
        "versions": {"python": "3.11.7", framework: "1.0"},
        "config_sha256": "0" * 64,
        "git_sha": "golden",
        "startup_s": round(2 + rng.random(), 3),
        "time": t0,
        "spec": {"run_id": run_id, "iterations": 5, "warmup": 1},
    }
    if network:
        start["network"] = network
    lines = [start]
    now = t0 + 3
    for it in range(6):
        for rank in range(nodes):
            compute = base * (1 + 0.05 * rng.random())
            step = compute + comm * (1 + 0.1 * rng.random())
            event = {
                "event": "iteration",
                "rank": rank,
                "iteration": it,
                "samples": 64,
                "step_s": round(step, 6),
                "compute_s": round(compute, 6),
                "comm_s": round(comm, 6),
                "loss": round(2.3 - 0.1 * it + 0.01 * rng.random(), 5),
                "time": round(now, 3),
            }
            if it < 1:
                event["warmup"] = True
            lines.append(event)
        now += step
    end = {
        "event": "run_end",
        "status": extra.get("status", "ok"),
        "reason": extra.get("reason"),
        "time": round(now + 1, 3),
    }
    if "contention" in extra:
        end["contention"] = extra["contention"]
    lines.append(end)
    folder = ROOT / run_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "events.jsonl").write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in lines))


def main() -> None:
    rng = random.Random(2018)
    for framework in ("torch", "tensorflow", "bigdl"):
        for model in ("lenet", "autoencoder"):
            repeats = 6 if model == "lenet" else 2
            for nodes in (1, 2, 4):
                for repeat in range(repeats):
                    write(framework, model, nodes, repeat, rng)
    for repeat in range(2):
        write("torch", "lenet", 2, repeat, rng, network="emulated-1gbe")
        write("tensorflow", "lenet", 2, repeat, rng, network="emulated-1gbe")
    write("torch", "autoencoder", 4, 2, rng, status="failed", reason="rank 1 died (exit 9) at iteration 5")
    write(
        "tensorflow",
        "autoencoder",
        2,
        2,
        rng,
        contention={"other_busy_share": 0.5, "steal_share": 0.0, "contended": True},
    )


if __name__ == "__main__":
    main()
