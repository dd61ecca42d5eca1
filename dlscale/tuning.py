"""The tuning stage: each framework at its best documented CPU settings, chosen by measurement.

A comparison is only as fair as its weakest configuration. Before the study's runs, every
framework trains every model of the study at 1 node (the study's batch, threads, ranks
per node and data) under each combination of its tunable settings; the best setting per
(framework, model) is chosen from those measurements and is what the study's runs use.

Where the settings come from (one source of truth): a runner option in
``dlscale/runners/<fw>/options.schema.json`` carrying ``"x-tune": [candidates]`` is
tunable; its ``default`` is the framework's default and is always among the candidates.
The config's ``tune`` section (``schemas/config.schema.yaml``) may restrict which options
are tuned and over which values (``tune.options``) and pin options (``tune.pinned``, or
an x-tune option written in the framework's own section, e.g. ``torch: {channels_last:
true}``): a pinned option is used as is and never tuned; when every option is pinned the
grid is skipped. An option marked ``"x-threads": true`` is a thread count: candidates above
the study's ``threads_per_rank`` are left out (a rank has that many cores; more would take
cores the other frameworks do not get).

The choice (``choose``): the median throughput over each setting's repeats (the repeats
are the samples; each run's value is its median over timed iterations), with the interval
of ``dlscale.verdicts.median_interval``. A setting replaces the framework's default only
when its interval lies wholly above the default's (``verdicts.separated``); of several such
settings the highest median wins; otherwise (overlap, too few repeats) the default stays.
Failed and contended runs are left out (a setting that fails to start, e.g. an engine that
refuses a layer, is recorded with its reason and never chosen).

Everything but ``choose`` is standard library only: Snakemake calls it when it builds the
DAG. ``choose`` imports the analysis (pandas, scipy) inside the job.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlscale import atomic, catalog
from dlscale.runspec import RunSpec, _options_schema

#: The options-schema keyword that makes a runner option tunable (its candidate values).
TUNE_KEY = "x-tune"
#: The options-schema keyword of a thread count (candidates above threads_per_rank dropped).
THREADS_KEY = "x-threads"
#: The prefix of a setting id (``s`` + 10 hex digits of the setting's hash).
SETTING_PREFIX = "s"
#: Wildcard constraint of a setting id: never a run id's part (``n1x1``, ``b64``, ``r0``).
SETTING_PATTERN = r"s[0-9a-f]{10}"


class TuneError(ValueError):
    """A tune section that cannot be a grid: the message names the key and the value."""


def tunable(framework: str) -> dict[str, list[Any]]:
    """The framework's tunable options: option -> every candidate its schema lists."""
    props = _options_schema(framework).get("properties", {})
    return {key: list(sub[TUNE_KEY]) for key, sub in props.items() if TUNE_KEY in sub}


def _option_default(framework: str, option: str) -> Any:
    return _options_schema(framework)["properties"][option].get("default")


def tuned_options(study: Mapping[str, Any], framework: str) -> dict[str, list[Any]]:
    """The options tuned for ``framework`` in this study, with their candidates in order.

    ``tune.options.<fw>`` (if given) names the options and values; otherwise every x-tune
    option with its whole list. Pinned options are left out. The study's value of each
    option (the framework's default unless the config set it) is always a candidate, and
    comes first: it is the setting the others must beat. Empty when tuning is off.
    """
    tune = study.get("tune") or {}
    if not tune.get("enabled"):
        return {}
    candidates = tunable(framework)
    restricted = (tune.get("options") or {}).get(framework)
    listed = (tune.get("settings") or {}).get(framework)
    if listed is not None:  # the options the listed settings name, with their values
        restricted = {}
        for setting in listed:
            for option, value in setting.items():
                restricted.setdefault(option, [])
                if value not in restricted[option]:
                    restricted[option].append(value)
    pinned = (tune.get("pinned") or {}).get(framework) or {}
    chosen = restricted if restricted is not None else candidates
    props = _options_schema(framework).get("properties", {})
    out: dict[str, list[Any]] = {}
    for option, values in chosen.items():
        if option in pinned:
            continue
        default = study[catalog.framework(framework).options_key].get(option, _option_default(framework, option))
        values = [default, *(v for v in values if v != default)]
        if props.get(option, {}).get(THREADS_KEY):
            values = _thread_candidates(values, study["threads_per_rank"])
        out[option] = values
    return out


def _thread_candidates(values: list[Any], threads: int) -> list[Any]:
    """A thread count's candidates within the rank's ``threads`` (the first, the default,
    always kept), one per effective count (null means ``threads``: 1 beside null at one
    thread per rank would measure the same setting twice)."""
    kept: list[Any] = []
    seen: set[int] = set()
    for index, value in enumerate(values):
        effective = threads if value is None else value
        if index and (effective > threads or effective in seen):
            continue
        kept.append(value)
        seen.add(effective)
    return kept


def setting_id(setting: Mapping[str, Any]) -> str:
    """A stable id of a setting (option -> value): the same setting, the same folder."""
    text = json.dumps(dict(setting), sort_keys=True, separators=(",", ":"))
    return SETTING_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:10]


def grid(study: Mapping[str, Any], framework: str) -> list[dict[str, Any]]:
    """Every setting of the framework's grid, the default first; [] when nothing is tuned.

    The product of the tuned options' candidates, or, where ``tune.settings.<fw>`` lists
    settings, the default and each listed setting (options it leaves out at the default).
    """
    options = tuned_options(study, framework)
    if not options:
        return []
    names = list(options)
    listed = ((study.get("tune") or {}).get("settings") or {}).get(framework)
    if listed is None:
        return [dict(zip(names, values, strict=True)) for values in itertools.product(*options.values())]
    default = {name: values[0] for name, values in options.items()}
    out = [default]
    for setting in listed:
        full = {**default, **{k: v for k, v in setting.items() if k in options}}
        if full not in out:
            out.append(full)
    return out


def grid_ids(study: Mapping[str, Any], framework: str) -> dict[str, dict[str, Any]]:
    """setting id -> setting, the default first."""
    return {setting_id(s): s for s in grid(study, framework)}


def is_tuned(study: Mapping[str, Any], framework: str) -> bool:
    """Does this framework have a grid (tuning on, and more than one setting to try)?"""
    return len(grid(study, framework)) > 1


def check(study: Mapping[str, Any]) -> None:
    """What the schema cannot say about ``tune``: options exist, are tunable, values valid.

    Raises TuneError naming the key (``tune.options.torch.mkldnn``) and the value.
    """
    tune = study.get("tune") or {}
    for framework, options in (tune.get("options") or {}).items():
        _check_options(framework, "options", options)
    for framework, listed in (tune.get("settings") or {}).items():
        if framework in (tune.get("options") or {}):
            raise TuneError(
                f"config key 'tune.settings.{framework}': {framework} has tune.options too; give its"
                " grid one way (a product of options, or a list of settings)"
            )
        for index, setting in enumerate(listed):
            _check_options(framework, f"settings.{framework}[{index}]", {k: [v] for k, v in setting.items()}, "")
    limit = tune.get("max_settings")
    if tune.get("enabled") and limit:
        for framework in study["frameworks"]:
            size = len(grid(study, framework))
            if size > limit:
                raise TuneError(
                    f"config key 'tune.max_settings': {framework}'s grid has {size} settings, more than"
                    f" {limit}; restrict it with tune.options.{framework} or pin options"
                )


def _check_options(
    framework: str, section: str, options: Mapping[str, Sequence[Any]], name: str | None = None
) -> None:
    """Each option of ``tune.<section>.<framework>`` exists, is tunable, and each of its
    values is valid for it (TuneError naming the key otherwise)."""
    props = _options_schema(framework).get("properties", {})
    prefix = f"tune.{section}" + (f".{framework}" if name is None else name)
    for option, values in options.items():
        where = f"{prefix}.{option}"
        if option not in props:
            raise TuneError(f"config key '{where}': {framework} has no option {option!r}")
        if TUNE_KEY not in props[option]:
            raise TuneError(
                f"config key '{where}': {option!r} is not a tunable option of {framework}"
                f" (tunable: {', '.join(tunable(framework)) or 'none'})"
            )
        for item in values:
            _check_value(props[option], item, where)


def _check_value(schema: Mapping[str, Any], value: Any, where: str) -> None:
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    python = {"boolean": bool, "integer": int, "string": str, "null": type(None), "number": (int, float)}
    ok = not kinds or any(
        isinstance(value, python[k]) and not (k in ("integer", "number") and isinstance(value, bool)) for k in kinds
    )
    if ok and "enum" in schema:
        ok = value in schema["enum"]
    if ok and isinstance(value, int) and not isinstance(value, bool) and "minimum" in schema:
        ok = value >= schema["minimum"]
    if not ok:
        raise TuneError(f"config key '{where}': {value!r} is not a valid value ({schema.get('description', '')})")


def pin_explicit_options(config: Mapping[str, Any], study: dict[str, Any]) -> None:
    """Merge ``tune.pinned`` into the framework sections of ``study`` (before defaults
    are filled) and record in ``tune.pinned`` every x-tune option the config set in a
    framework's own section: set by the user, it is used as is, never tuned.

    A value pinned in both places, differently, is an error naming both keys.
    """
    tune = study.setdefault("tune", {})
    if not isinstance(tune, dict):
        return  # the schema names it
    pinned = tune.setdefault("pinned", {})
    if not isinstance(pinned, dict):
        return
    for name in catalog.FRAMEWORK_NAMES:
        key = catalog.framework(name).options_key
        section = config.get(key)
        pins = pinned.get(name)
        if pins is not None and not isinstance(pins, dict):
            continue
        pins = dict(pins or {})
        _check_options(name, "pinned", {option: [value] for option, value in pins.items()})
        explicit = section if isinstance(section, dict) else {}
        for option in tunable(name):
            if option in explicit:
                if option in pins and pins[option] != explicit[option]:
                    raise TuneError(
                        f"config key 'tune.pinned.{name}.{option}': {pins[option]!r} differs from"
                        f" '{key}.{option}': {explicit[option]!r}; pin it in one place"
                    )
                pins[option] = explicit[option]
        if pins:
            pinned[name] = pins
            merged = dict(explicit)
            merged.update(pins)
            study[key] = merged


# --- paths and specs ------------------------------------------------------------------------


def tune_dir(framework: str, model: str) -> str:
    return f"results/tune/{framework}/{model}"


def choice_path(framework: str, model: str) -> str:
    return f"{tune_dir(framework, model)}/choice.json"


def run_path(framework: str, model: str, setting: str, repeat: int) -> str:
    return f"{tune_dir(framework, model)}/{setting}/r{repeat}/events.jsonl"


def tune_runs(study: Mapping[str, Any], framework: str, model: str) -> list[str]:
    """The events files of one (framework, model)'s grid, every setting and repeat.

    Ordered repeat-major (every setting's r0, then every r1, ...): Snakemake schedules
    ready jobs in about that order, so the settings are measured interleaved, side by
    side, rather than one setting's repeats in a row.
    """
    ids = list(grid_ids(study, framework))
    return [run_path(framework, model, sid, r) for r in range(study["tune"]["repeats"]) for sid in ids]


def tune_spec(study: Mapping[str, Any], framework: str, model: str, setting: str, repeat: int) -> RunSpec:
    """The spec of one tuning run: the study's 1-node run of (framework, model) with the
    setting's options and the tune section's iterations. Its run id is that 1-node run's
    (``<fw>/<model>/n1x<p>/b<batch>/r<k>``); its folder says which setting it was."""
    from dlscale import study as dlstudy

    settings = grid_ids(study, framework)
    if setting not in settings:
        raise TuneError(f"{framework} has no setting {setting!r} in this study's grid")
    run = dlstudy.Run(
        framework, model, 1, study["ranks_per_node"], dlstudy.batch_per_rank(study, model, 1), repeat
    )
    spec = dlstudy.run_spec(study, run, settings[setting])
    iterations = study["tune"].get("iterations")
    if iterations:
        data = spec.to_dict()
        data["iterations"] = iterations
        spec = RunSpec.from_dict(data)
    return spec


def read_choice(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings a choice file chose (option -> value)."""
    with open(path, encoding="utf-8") as handle:
        choice = json.load(handle)
    return dict(choice["chosen_settings"])


# --- the choice -------------------------------------------------------------------------------


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
    from dlscale import analysis, roofline, verdicts

    rows: list[dict[str, Any]] = []
    intervals: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    for sid, setting in settings.items():
        runs, _ = analysis.load_events([str(p) for p in events.get(sid, ())])
        usable = runs[runs["status"].eq("ok") & ~runs["contended"].astype(bool)]
        values = [float(v) for v in usable["throughput"]]
        interval = verdicts.median_interval(values)
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
        gain = verdicts.ratio_interval(samples[row["id"]], samples.get(default, []))
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
    from dlscale import verdicts

    intervals = {sid: verdicts.median_interval(values) for sid, values in samples.items()}
    ok = {sid: iv for sid, iv in intervals.items() if not math.isnan(iv.value)}
    base = ok.get(default)
    if base is None:
        if not ok:
            return default, "no setting has an ok, uncontended run: the default stays"
        best = max(ok, key=lambda s: ok[s].value)
        return best, "the default has no ok run: the highest median of the settings that ran"
    clear = {sid: iv for sid, iv in ok.items() if sid != default and verdicts.separated(iv, base, higher=True)}
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


__all__ = [
    "TuneError",
    "check",
    "choice_table",
    "choose",
    "decide",
    "grid",
    "grid_ids",
    "is_tuned",
    "pin_explicit_options",
    "read_choice",
    "setting_id",
    "tunable",
    "tune_runs",
    "tune_spec",
    "tuned_options",
    "write_choice",
]
