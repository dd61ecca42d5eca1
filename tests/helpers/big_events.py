"""A long run's events file, written fast and line by line (no run's events held in memory):
the input of the aggregation's memory checks (``tests/unit/test_memory.py``, docs/memory.md).

``python -m helpers.big_events RUNS_DIR ITERATIONS [RANKS]`` (from ``tests/``) writes
``RUNS_DIR/torch/lenet/n{RANKS}x1/b64/r0/events.jsonl`` and prints its path and size: 780,000
iterations x 2 ranks is about 500 MB, the size of the long run that took 3.3 GB to aggregate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BATCH = 64


def write_big_run(root: Path, iterations: int, ranks: int = 2, *, warmup: int = 10) -> Path:
    """One ok run of ``ranks`` nodes x 1 rank and ``iterations`` timed iterations (plus
    ``warmup``), every rank reporting every iteration with full-precision floats, as a real
    runner writes them; returns the file's path."""
    run_id = f"torch/lenet/n{ranks}x1/b{BATCH}/r0"
    total = iterations + warmup
    start = {
        "event": "run_start",
        "run_id": run_id,
        "framework": "torch",
        "model": "lenet",
        "nodes": ranks,
        "ranks_per_node": 1,
        "batch": BATCH,
        "repeat": 0,
        "dataset": "mnist",
        "scaling": "weak",
        "global_batch": BATCH * ranks,
        "world_size": ranks,
        "hosts": [f"cn{rank}" for rank in range(ranks)],
        "threads_per_rank": 1,
        "versions": {"torch": "2.3.1", "python": "3.11.7"},
        "config_sha256": "c0ffee",
        "git_sha": "deadbeef",
        "time": 1_700_000_000.0,
        "startup_s": 2.5,
        "spec": {"run_id": run_id, "iterations": iterations, "warmup": warmup},
    }
    path = root / run_id / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    clock = 1_700_000_003.0
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(start, separators=(",", ":")) + "\n")
        for i in range(total):
            clock += 0.0312345678901234
            tail = ',"warmup":true}\n' if i < warmup else "}\n"
            for rank in range(ranks):
                step = 0.0301234567890123 + ((i * 7919 + rank * 104729) % 1000) * 1.234567e-6
                compute = step * 0.8123456789012345
                out.write(
                    f'{{"event":"iteration","rank":{rank},"iteration":{i},"samples":{BATCH},'
                    f'"step_s":{step!r},"compute_s":{compute!r},"comm_s":{step - compute!r},'
                    f'"input_s":{step * 0.0123456789!r},"loss":{2.3 / (1 + i * 1e-3)!r},'
                    f'"time":{clock + rank * 1e-4!r}{tail}'
                )
        out.write(
            json.dumps({"event": "run_end", "status": "ok", "reason": None, "time": clock + 1.0}) + "\n"
        )
    return path


if __name__ == "__main__":
    made = write_big_run(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 2)
    print(made, made.stat().st_size)
