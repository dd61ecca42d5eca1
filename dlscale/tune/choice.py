"""The tuning stage's choice: which setting replaces a framework's default, decided by intervals.

The median throughput over each setting's repeats (the repeats are the samples; each run's
value is its median over timed iterations), with the interval of
``dlscale.analysis.stats.median_interval``. Failed and contended runs are left out (a setting that
fails to start, e.g. an engine that refuses a layer, is recorded with its reason and never
chosen), and so is a setting any of whose runs ended ok without its model learning (its
final held-out quality no better than chance, ``dlscale.quality.learned``) where a run of
the default learned: a speed bought by not training is no gain, so such a setting is
dropped and never chosen. Nor is a setting whose median throughput lies above the host's
matmul roofline (``dlscale.host.roofline.above_roofline``: the peak was measured slow or the
FLOP count is wrong, so the speed is not one to crown). Runs inside the tuning rule's job (pandas, scipy), never at DAG time.

Racing (``race``, one check per round of the tuning stage): after each round every
setting still in contention is judged against the default. It **wins** when the 95 %
interval of its gain over the default (``stats.ratio_interval``, bootstrap, from
``stats.MIN_CI_REPEATS`` repeats each) lies wholly above 1; it is **clearly worse** and is
measured no more when its interval lies wholly below the default's
(``stats.separated``: the min-max range below ``MIN_CI_REPEATS`` repeats, the 95 % order
statistics from there); a setting whose runs all failed is dropped too. While none has won
and some are in contention, the next round runs the default and each of those once more,
unless that would pass the (framework, model)'s run budget: then the rest are undecided
and the default stays. Of several winners the highest median is chosen; ties go to the
default.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlscale.analysis.stats import BOOTSTRAP, median_interval, ratio_interval, separated
from dlscale.analysis.tables import load_events
from dlscale.base import atomic
from dlscale.host import roofline


def choose(
    framework: str,
    model: str,
    settings: Mapping[str, Mapping[str, Any]],
    events: Mapping[str, Sequence[str | os.PathLike[str]]],
    default: str,
    peak: Mapping[str, Any] | None = None,
    race_record: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Choose a setting from its runs' events (module docstring: the race decides, ties go
    to the default). ``settings``: id -> setting; ``events``: id -> events files;
    ``race_record``: the race's last check (``race``), whose states say why each setting
    stopped (without it, the race's rules on these runs once).

    Returns the choice record (``choice.json``): every setting's throughput with its
    interval, its failed runs' reasons, its gain over the default, its roofline fraction
    (against ``peak``, the host's matmul peak, dlscale.host.roofline), and the one chosen.
    """
    rows: list[dict[str, Any]] = []
    intervals: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    fractions: dict[str, float] = {}
    loaded = _load_settings(events, settings, default)
    raced, failed, unlearned = _race_inputs(loaded)
    for sid, setting in settings.items():
        runs, not_learned = loaded[sid]
        usable = runs[_usable(runs, not_learned)]
        values = [float(v) for v in usable["throughput"]]
        interval = median_interval(values)
        fraction = math.nan
        if len(usable):
            first = usable.iloc[0]
            denominator = float(first["world_size"]) * roofline.peak_of(peak, first["threads_per_rank"])
            fraction = interval.value * roofline.flops_per_sample(model) / denominator
        intervals[sid], samples[sid], fractions[sid] = interval, values, fraction
        rows.append(
            {
                "id": sid,
                "settings": dict(setting),
                "default": sid == default,
                "runs": len(runs),
                "ok_runs": len(values),
                "failed": sorted({str(r) for r in runs.loc[runs["status"].ne("ok"), "reason"]}),
                "contended_runs": int(runs["contended"].astype(bool).sum()),
                "not_learned_runs": int(not_learned.sum()),
                "throughput": _num(interval.value),
                "low": _num(interval.low),
                "high": _num(interval.high),
                "interval": interval.method,
                "coverage": _num(interval.coverage),
                "roofline_fraction": _num(fraction),
            }
        )
    if race_record is None:
        spent = max(1, sum(len(v) for v in raced.values()))
        race_record = race(raced, default, budget=spent, failed=failed, unlearned=unlearned)
    status = {sid: dict(state) for sid, state in race_record["status"].items()}
    for sid, fraction in fractions.items():  # a speed the matmul roofline rules out is not crowned
        if sid != default and sid in status and roofline.above_roofline(fraction):
            status[sid]["state"] = ABOVE_ROOFLINE
    chosen, reason = decide(samples, default, status)
    above = [sid for sid, state in status.items() if state["state"] == ABOVE_ROOFLINE]
    if above:
        reason += "; not crowned, faster than the host's matmul roofline allows: " + ", ".join(above)
    for row in rows:
        gain = ratio_interval(samples[row["id"]], samples.get(default, []))
        row.update(gain=_num(gain.value - 1), gain_low=_num(gain.low - 1), gain_high=_num(gain.high - 1))
        row["chosen"] = row["id"] == chosen
        state = status.get(row["id"], {})
        row.update(state=state.get("state"), n=row["ok_runs"], after=state.get("after", row["runs"]))
        row["verdict"] = verdict(row, chosen)
    return {
        "framework": framework,
        "model": model,
        "default": default,
        "chosen": chosen,
        "chosen_settings": dict(settings[chosen]),
        "reason": reason,
        "settings": rows,
        "race": {"runs": race_record.get("runs"), "budget": race_record.get("budget")},
        "metric": "throughput (samples/s, median over repeats of each run's median over timed iterations)",
    }


def untuned(
    framework: str,
    model: str,
    settings: Mapping[str, Mapping[str, Any]],
    left_out: Mapping[str, tuple[Mapping[str, Any], str]],
) -> dict[str, Any]:
    """The choice record of a model with nothing to race: its grid (``settings``, id ->
    setting: the default alone) keeps the default, and the framework's other settings,
    ``left_out`` (id -> (setting, why): the same run as the default for this model,
    ``dlscale.tune.grid.model_grid_report``), are listed with their reason and no run. The
    same record ``choose`` writes, so that the study's runs and the tuning table read it as
    any other."""
    default = next(iter(settings))

    def row(sid: str, setting: Mapping[str, Any], why: str) -> dict[str, Any]:
        unmeasured = (
            "throughput",
            "low",
            "high",
            "coverage",
            "roofline_fraction",
            "gain",
            "gain_low",
            "gain_high",
        )
        return {
            "id": sid,
            "settings": dict(setting),
            "default": sid == default,
            "runs": 0,
            "ok_runs": 0,
            "failed": [],
            "contended_runs": 0,
            "not_learned_runs": 0,
            "interval": "none",
            "chosen": sid == default,
            "state": None,
            "n": 0,
            "after": 0,
            "verdict": why,
            **dict.fromkeys(unmeasured),
        }

    rows = [row(default, settings[default], "default: kept, unraced (no other setting computes differently)")]
    rows += [row(sid, setting, f"not run: {why}") for sid, (setting, why) in left_out.items()]
    return {
        "framework": framework,
        "model": model,
        "default": default,
        "chosen": default,
        "chosen_settings": dict(settings[default]),
        "reason": "no other setting of the grid computes differently for this model: the default stays, unraced",
        "settings": rows,
        "race": {"runs": 0, "budget": 0},
        "metric": "throughput (samples/s, median over repeats of each run's median over timed iterations)",
    }


def _learned_is(runs: Any, value: bool) -> Any:
    """Per run: it ended ok and its ``learned`` (runs.csv: final held-out quality against
    chance, ``dlscale.quality.learned``) is ``value``; None, unknown, is neither."""
    learned = runs["learned"] if "learned" in runs else pd.Series(None, index=runs.index, dtype=object)
    return runs["status"].eq("ok") & learned.map(
        lambda v: isinstance(v, (bool, np.bool_)) and bool(v) is value
    )


def _load_settings(
    events: Mapping[str, Sequence[str | os.PathLike[str]]], ids: Collection[str], default: str
) -> dict[str, tuple[Any, Any]]:
    """setting id -> (its runs, per run whether it did not learn). A run counts as not
    learning only where a run of the default learned: then the setting, not the run's
    length, kept it from training. Where no default run learned (runs too short for any
    setting to learn, or a default that failed), learning separates no setting; the
    study's own cells still say what its runs learned."""
    runs = {sid: load_events([str(p) for p in events.get(sid, ())])[0] for sid in ids}
    judged = default in runs and bool(_learned_is(runs[default], True).any())
    return {
        sid: (frame, _learned_is(frame, False) & (judged and sid != default)) for sid, frame in runs.items()
    }


def _usable(runs: Any, not_learned: Any) -> Any:
    """Per run: a sample of the setting's speed (ok, uncontended, not a run that did not learn)."""
    return runs["status"].eq("ok") & ~runs["contended"].astype(bool) & ~not_learned


def _race_values(runs: Any, not_learned: Any) -> list[float]:
    """The race's samples of a setting's runs: one per run, NaN for a failed, contended or
    unlearned one (it was spent, and says nothing of the setting's speed)."""
    usable = _usable(runs, not_learned)
    return [float(v) if ok else math.nan for v, ok in zip(runs["throughput"], usable, strict=True)]


def race_samples(
    events: Mapping[str, Sequence[str | os.PathLike[str]]], default: str
) -> tuple[dict[str, list[float]], set[str], set[str]]:
    """setting id -> the race's samples of its runs' events files; the settings none of
    whose runs ended ok; the settings with a run that did not learn where the default's
    did (``_load_settings``): ``race``'s ``samples``, ``failed`` and ``unlearned``."""
    return _race_inputs(_load_settings(events, events, default))


def _race_inputs(
    loaded: Mapping[str, tuple[Any, Any]],
) -> tuple[dict[str, list[float]], set[str], set[str]]:
    """``race``'s ``samples``, ``failed`` and ``unlearned`` of ``_load_settings``' runs."""
    samples = {sid: _race_values(runs, not_learned) for sid, (runs, not_learned) in loaded.items()}
    failed = {sid for sid, (runs, _) in loaded.items() if len(runs) and not runs["status"].eq("ok").any()}
    unlearned = {sid for sid, (_, not_learned) in loaded.items() if not_learned.any()}
    return samples, failed, unlearned


def _num(value: float) -> float | None:
    return None if math.isnan(value) else float(value)  # NaN -> null in JSON


def decide(
    samples: Mapping[str, Sequence[float]],
    default: str,
    status: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[str, str]:
    """The chosen setting id and why, from each setting's per-run throughputs (the
    repeats; NaN ignored) and the race's final ``status`` (``race``; without it, the race's
    rules applied to these samples once, with no budget left). The highest median of the
    settings that won; none won: the default stays; a default without an ok run gives way
    to the highest median."""
    if status is None:
        spent = max(1, sum(len(v) for v in samples.values()))
        failed = {sid for sid, values in samples.items() if values and all(math.isnan(v) for v in values)}
        status = race(samples, default, budget=spent, failed=failed)["status"]
    intervals = {sid: median_interval(values) for sid, values in samples.items()}
    ok = {
        sid: iv
        for sid, iv in intervals.items()
        if not math.isnan(iv.value) and status.get(sid, {}).get("state") not in REFUSED
    }
    if default not in ok:
        if not ok:
            return default, "no setting has an ok, uncontended run: the default stays"
        best = max(ok, key=lambda s: ok[s].value)
        return best, "the default has no ok run: the highest median of the settings that ran"
    won = [sid for sid in ok if status.get(sid, {}).get("state") == WON]
    if not won:
        return default, "no setting's gain over the default has a 95% interval above 1: the default stays"
    best = max(won, key=lambda s: ok[s].value)
    return best, "its gain's 95% interval lies above 1; the highest median of those that won"


def verdict(row: Mapping[str, Any], chosen: str) -> str:
    """Why a setting won or lost, in words for the table: ``won: +30% [+14, +49], n=6``,
    ``dropped after 3: clearly worse``, ``budget spent: undecided``."""
    state, n, after = row.get("state"), row.get("n"), row.get("after")
    gain = ""
    if row.get("gain") is not None and row.get("gain_low") is not None:
        gain = f"{100 * row['gain']:+.0f}% [{100 * row['gain_low']:+.0f}, {100 * row['gain_high']:+.0f}], "
    if row.get("default"):
        return f"default: {'kept' if row['id'] == chosen else 'replaced'}, n={n}"
    if state == WON:
        return f"{'won' if row['id'] == chosen else 'won, a higher median won too'}: {gain}n={n}"
    if state == WORSE:
        return f"dropped after {after}: clearly worse ({gain}n={n})"
    if state == FAILED:
        return f"dropped after {after}: every run failed"
    if state == UNLEARNED:
        return f"dropped after {after}: its model did not learn ({row.get('not_learned_runs', '?')} run(s))"
    if state == ABOVE_ROOFLINE:
        return (
            f"not chosen: {row.get('roofline_fraction', math.nan):.2f} of the matmul peak, above the"
            f" roofline (the peak measured slow, or the FLOP count wrong) ({gain}n={n})"
        )
    if state == BUDGET:
        return f"budget spent: undecided ({gain}n={n})"
    if row["id"] == chosen:
        return f"chosen: the default had no ok run ({gain}n={n})"
    return f"stopped undecided, the race ended ({gain}n={n})"


#: A setting's state in the race (``race``): still measured, or why it stopped.
CONTENTION = "in contention"
WON = "won"
WORSE = "clearly worse"
FAILED = "failed"
UNLEARNED = "did not learn"
#: Set by the choice (it has the host's peak; the race has not): a median throughput above
#: the matmul roofline (``roofline.above_roofline``), which no honest run reaches.
ABOVE_ROOFLINE = "above the roofline"
BUDGET = "budget spent: undecided"
#: The states after which a setting is measured no more (carried from check to check).
DROPPED = (WORSE, FAILED, UNLEARNED)
#: The states that are never chosen, not even where the default had no ok run.
REFUSED = (UNLEARNED, ABOVE_ROOFLINE)


def race(
    samples: Mapping[str, Sequence[float]],
    default: str,
    budget: int,
    dropped: Mapping[str, Mapping[str, Any]] | None = None,
    failed: Collection[str] = (),
    unlearned: Collection[str] = (),
) -> dict[str, Any]:
    """One racing check (module docstring) after a round of the tuning stage.

    ``samples``: setting id -> one value per run so far (NaN: a failed or contended run),
    ``default`` the default's id, ``budget`` the most runs of this (framework, model), all
    settings together; ``dropped``: the states of settings an earlier check dropped (they
    stay dropped: their samples no longer grow); ``failed``: the settings none of whose runs
    so far ended ok (dropped; a setting whose runs were only contended races on);
    ``unlearned``: the settings with a run that did not learn where the default's did
    (``race_samples``; dropped: never chosen, whatever its speed). Returns ``more`` (run another round),
    ``next`` (the ids that round runs, the default first), ``runs`` (spent so far) and
    ``status``: id -> {state, n (its ok runs), after (its runs when it stopped)}.
    """
    if budget < 1:
        raise ValueError(f"budget must be >= 1 run, not {budget}")
    if default not in samples:
        raise ValueError(f"the default setting {default!r} has no samples")
    dropped = dict(dropped or {})
    spent = sum(len(values) for values in samples.values())
    base_values = list(samples[default])
    base = median_interval(base_values)
    status: dict[str, dict[str, Any]] = {}
    for sid, values in samples.items():
        if sid == default:
            continue
        n_ok = sum(1 for v in values if not math.isnan(v))
        if sid in dropped and dropped[sid].get("state") in DROPPED:
            status[sid] = dict(dropped[sid])
            continue
        state = CONTENTION
        if values and sid in failed:
            state = FAILED
        elif sid in unlearned:
            state = UNLEARNED
        elif separated(base, median_interval(values), higher=True):
            state = WORSE
        else:
            gain = ratio_interval(values, base_values)
            if gain.method == BOOTSTRAP and gain.low > 1:
                state = WON
        status[sid] = {"state": state, "n": n_ok, "after": len(values)}
    n_base = sum(1 for v in base_values if not math.isnan(v))
    status[default] = {"state": "default", "n": n_base, "after": len(base_values)}
    contenders = [sid for sid, st in status.items() if st["state"] == CONTENTION]
    # A default that failed every run cannot be raced (the choice takes the best that ran);
    # one only contended so far is measured again with the rest.
    more = (
        bool(contenders) and default not in failed and not any(st["state"] == WON for st in status.values())
    )
    if more and spent + len(contenders) + 1 > budget:
        more = False
        for sid in contenders:
            status[sid]["state"] = BUDGET
    return {
        "more": more,
        "next": [default, *contenders] if more else [],
        "runs": spent,
        "budget": budget,
        "status": status,
    }


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
    "verdict",
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
                    "verdict": row.get("verdict", ""),
                    "failed": "; ".join(row["failed"]),
                    "reason": record["reason"] if row["chosen"] else "",
                }
            )
    return rows
