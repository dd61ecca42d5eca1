"""Runner options and their tuning rules: what each framework's settings are and which may be tuned.

Where the settings come from (one source of truth): a runner option in
``dlscale/runners/<fw>/options.schema.json`` carrying ``"x-tune": [candidates]`` is
tunable; its ``default`` is the framework's default and is always among the candidates.
The config's ``tune`` section (``schemas/config.schema.yaml``) may restrict which options
are tuned and over which values (``tune.options``) and pin options (``tune.pinned``, or
an x-tune option written in the framework's own section, e.g. ``torch: {mkldnn:
false}``): a pinned option is used as is and never tuned; when every option is pinned the
grid is skipped. An option marked ``"x-threads": true`` is a thread count: candidates above
the study's ``threads_per_rank`` are left out (a rank has that many cores; more would take
cores the other frameworks do not get).

``dlscale.study.matrix`` (config checks), ``dlscale.runspec`` (defaults of a spec) and
``dlscale.tune.grid`` (the grid's runs) read it. Standard library only: Snakemake calls it
when it builds the DAG, and every framework's venv imports it through runspec.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dlscale import catalog


def with_option_defaults(framework: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the defaults of the framework's options schema filled in."""
    schema = options_schema(framework)
    filled = copy.deepcopy(dict(options))
    for key, sub in schema.get("properties", {}).items():
        if key not in filled and "default" in sub:
            filled[key] = copy.deepcopy(sub["default"])
    return filled


_SCHEMAS: dict[str, dict[str, Any]] = {}


def options_schema(framework: str) -> dict[str, Any]:
    """The runner's ``options.schema.json`` (read once): the framework's options, defaults and x-tune rules."""
    if framework not in _SCHEMAS:
        with open(catalog.framework(framework).options_schema, encoding="utf-8") as handle:
            _SCHEMAS[framework] = json.load(handle)
    return _SCHEMAS[framework]


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
    props = options_schema(framework).get("properties", {})
    return {key: list(sub[TUNE_KEY]) for key, sub in props.items() if TUNE_KEY in sub}


def option_default(framework: str, option: str) -> Any:
    return options_schema(framework)["properties"][option].get("default")


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
    props = options_schema(framework).get("properties", {})
    out: dict[str, list[Any]] = {}
    for option, values in chosen.items():
        if option in pinned:
            continue
        default = study[catalog.framework(framework).options_key].get(
            option, option_default(framework, option)
        )
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
            _check_options(
                framework, f"settings.{framework}[{index}]", {k: [v] for k, v in setting.items()}, ""
            )
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
    props = options_schema(framework).get("properties", {})
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
        isinstance(value, python[k]) and not (k in ("integer", "number") and isinstance(value, bool))
        for k in kinds
    )
    if ok and "enum" in schema:
        ok = value in schema["enum"]
    if ok and isinstance(value, int) and not isinstance(value, bool) and "minimum" in schema:
        ok = value >= schema["minimum"]
    if not ok:
        raise TuneError(
            f"config key '{where}': {value!r} is not a valid value ({schema.get('description', '')})"
        )


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
