"""The tuning stage's choice: which setting replaces a framework's default, decided by intervals.

The median throughput over each setting's repeats (the repeats are the samples; each run's
value is its median over timed iterations), with the interval of
``dlscale.stats.median_interval``. A setting replaces the framework's default only when
its interval lies wholly above the default's (``stats.separated``); of several such
settings the highest median wins; otherwise (overlap, too few repeats) the default stays.
Failed and contended runs are left out (a setting that fails to start, e.g. an engine that
refuses a layer, is recorded with its reason and never chosen). Runs inside the tuning
rule's job (pandas, scipy), never at DAG time.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlscale import atomic, roofline
from dlscale.stats import median_interval, ratio_interval, separated
from dlscale.tables import load_events


def choose(
    framework: str,
    model: str,
    settings: Mapping[str, Mapping[str, Any]],
    events: Mapping[str, Sequence[str | os.PathLike[str]]],
    default: str,
    peak: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Choose a setting from its runs' events (module docstring: the interval decides,
    ties go to the default). ``settings``: id -> setting; ``events``: id -> events files.

    Returns the choice record (``choice.json``): every setting's throughput with its
    interval, its failed runs' reasons, its gain over the default, its roofline fraction
    (against ``peak``, the host's matmul peak, dlscale.roofline), and the one chosen.
    """
    rows: list[dict[str, Any]] = []
    intervals: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    for sid, setting in settings.items():
        runs, _ = load_events([str(p) for p in events.get(sid, ())])
        usable = runs[runs["status"].eq("ok") & ~runs["contended"].astype(bool)]
        values = [float(v) for v in usable["throughput"]]
        interval = median_interval(values)
        fraction = math.nan
        if len(usable):
            first = usable.iloc[0]
            denominator = float(first["world_size"]) * roofline.peak_of(peak, first["threads_per_rank"])
            fraction = interval.value * roofline.flops_per_sample(model) / denominator
        intervals[sid], samples[sid] = interval, values
        rows.append(
            {
                "id": sid,
                "settings": dict(setting),
                "default": sid == default,
                "runs": len(runs),
                "ok_runs": len(values),
                "failed": sorted({str(r) for r in runs.loc[runs["status"].ne("ok"), "reason"]}),
                "contended_runs": int(runs["contended"].astype(bool).sum()),
                "throughput": _num(interval.value),
                "low": _num(interval.low),
                "high": _num(interval.high),
                "interval": interval.method,
                "coverage": _num(interval.coverage),
                "roofline_fraction": _num(fraction),
            }
        )
    chosen, reason = decide(samples, default)
    for row in rows:
        gain = ratio_interval(samples[row["id"]], samples.get(default, []))
        row.update(gain=_num(gain.value - 1), gain_low=_num(gain.low - 1), gain_high=_num(gain.high - 1))
        row["chosen"] = row["id"] == chosen
    return {
        "framework": framework,
        "model": model,
        "default": default,
        "chosen": chosen,
        "chosen_settings": dict(settings[chosen]),
        "reason": reason,
        "settings": rows,
        "metric": "throughput (samples/s, median over repeats of each run's median over timed iterations)",
    }


def _num(value: float) -> float | None:
    return None if math.isnan(value) else float(value)  # NaN -> null in JSON


def decide(samples: Mapping[str, Sequence[float]], default: str) -> tuple[str, str]:
    """The chosen setting id and why, from each setting's per-run throughputs (the
    repeats; NaN ignored). See the module docstring: the interval decides, ties go to
    ``default``; a default without an ok run gives way to the highest median."""
    intervals = {sid: median_interval(values) for sid, values in samples.items()}
    ok = {sid: iv for sid, iv in intervals.items() if not math.isnan(iv.value)}
    base = ok.get(default)
    if base is None:
        if not ok:
            return default, "no setting has an ok, uncontended run: the default stays"
        best = max(ok, key=lambda s: ok[s].value)
        return best, "the default has no ok run: the highest median of the settings that ran"
    clear = {sid: iv for sid, iv in ok.items() if sid != default and separated(iv, base, higher=True)}
    if not clear:
        return default, "no setting's interval lies above the default's: the default stays (ties go to it)"
    best = max(clear, key=lambda s: clear[s].value)
    return best, "its interval lies above the default's; the highest median of those that do"


def write_choice(path: str | os.PathLike[str], record: Mapping[str, Any]) -> Path:
    """Write a choice record atomically."""
    return atomic.write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


#: Columns of the tuning table (results/tune/tuning.csv), one row per setting.
TABLE_COLUMNS: tuple[str, ...] = (
    "framework",
    "model",
    "setting",
    "settings",
    "default",
    "chosen",
    "ok_runs",
    "runs",
    "contended_runs",
    "throughput",
    "low",
    "high",
    "interval",
    "gain",
    "gain_low",
    "gain_high",
    "roofline_fraction",
    "failed",
    "reason",
)


def choice_table(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (framework, model, setting) of the choice records: the report's table."""
    rows = []
    for record in records:
        for row in record["settings"]:
            rows.append(
                {
                    "framework": record["framework"],
                    "model": record["model"],
                    "setting": row["id"],
                    "settings": json.dumps(row["settings"], sort_keys=True),
                    "default": row["default"],
                    "chosen": row["chosen"],
                    "ok_runs": row["ok_runs"],
                    "runs": row["runs"],
                    "contended_runs": row["contended_runs"],
                    "throughput": row["throughput"],
                    "low": row["low"],
                    "high": row["high"],
                    "interval": row["interval"],
                    "gain": row["gain"],
                    "gain_low": row["gain_low"],
                    "gain_high": row["gain_high"],
                    "roofline_fraction": row.get("roofline_fraction"),
                    "failed": "; ".join(row["failed"]),
                    "reason": record["reason"] if row["chosen"] else "",
                }
            )
    return rows
