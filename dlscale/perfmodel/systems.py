"""The system-file contract: a published (or any foreign) scaling measurement as the replay
reads it (``schemas/system.schema.yaml``).

A system file says whose communication pattern the system runs (a framework of the
catalog, and its strategy), the gradient it moves, the network, the batch per node and the
global throughput measured at each node count. The schema refuses unknown keys and wrong
types; this module then refuses what a schema cannot say (a strategy the framework does
not have, parameter servers of a ring, a ``num_ps`` map that misses a measured count, an
anchor with neither a throughput nor ``compute_step_s``). Every error names the file and
the key, so a published record that cannot be replayed says why.

A system file is foreign input (``dlscale.base.foreign``): a regular file (no FIFO, link or
folder) of at most ``MAX_FILE_BYTES``, UTF-8, nested no deeper than YAML's bound, every
integer within ``dlscale.plausible.MAX_EXACT_INT``, and every number within the physical
bounds of ``dlscale.plausible`` (a throughput no step of ``MIN_STEP_S`` allows, a bandwidth
of 1e-300 Gbit/s, 10**9 parameter servers are refused, naming the key).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from dlscale import catalog, plausible
from dlscale.base import foreign, strictyaml
from dlscale.host import roofline
from dlscale.networks import GBIT, PRESETS, NetworkPreset
from dlscale.perfmodel.comm import Gradient
from dlscale.perfmodel.patterns import PS, RING, SETUP_PATTERN
from dlscale.perfmodel.runs import setup_of

SCHEMA = catalog.REPO_DIR / "schemas" / "system.schema.yaml"
#: A system file is a few dozen lines; anything far larger is not one (and is not parsed).
MAX_FILE_BYTES = 1 << 20


class SystemFileError(ValueError):
    """A system file that cannot be replayed; the message names the file and the key."""


@dataclass(frozen=True)
class System:
    """One validated system file: what ``replay`` needs to predict each measured count."""

    name: str
    source: str
    path: str
    framework: str
    setup: str
    pattern: str
    parameters: int
    model: str | None
    bytes_per_parameter: float
    network: NetworkPreset
    batch_per_node: int
    #: Node count -> global samples per second as published (None: not printed).
    measured: Mapping[int, float | None]
    compute_step_s: float | None
    #: Node count -> parameter servers at that count (1 where the pattern has none).
    num_ps: Mapping[int, int]
    notes: str = ""
    #: Pulls and pushes cross the servers' links at once (``Link.full_duplex``; ps only).
    full_duplex: bool = False
    #: Ranks a node (GPUs behind one link) in one flat ring of all ranks (ring only).
    ranks_per_node: int = 1
    #: Parameters of the largest variable, held whole by one server (ps only; None: the
    #: catalog model's largest blob, or an even split where the layers are not known).
    largest_variable_parameters: int | None = None

    @property
    def anchor(self) -> int:
        """The smallest measured node count: the compute step comes from it."""
        return min(self.measured)

    @property
    def gradient(self) -> Gradient:
        """The gradient one step synchronises: a catalog model's (its blobs too) or a flat
        one of ``parameters x bytes_per_parameter`` bytes (one blob: the layers are unknown)."""
        largest = self.largest_variable_parameters
        if self.model is not None:
            gradient = Gradient.of_model(self.model, self.bytes_per_parameter)
            if largest is None:
                return gradient
            return dataclasses.replace(gradient, largest=largest * self.bytes_per_parameter)
        return Gradient.flat(
            self.parameters * self.bytes_per_parameter, (largest or 0) * self.bytes_per_parameter
        )


@functools.cache
def load_schema() -> Mapping[str, Any]:
    """The system schema with the catalog's frameworks and models and the network presets
    as the enums of their keys (the catalog is the one list of them)."""
    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    props = schema["properties"]
    props["framework"]["enum"] = list(catalog.FRAMEWORK_NAMES)
    props["model"]["enum"] = list(catalog.MODEL_NAMES)
    props["network"]["oneOf"][0]["enum"] = sorted(PRESETS)
    return schema


def load(path: str | Path) -> System:
    """A system file, validated (``SystemFileError`` naming the file and the key)."""
    path = Path(path)
    try:
        data = strictyaml.load(foreign.read_text(path, MAX_FILE_BYTES, str(path)), str(path))
    except foreign.Refused as err:
        raise SystemFileError(str(err)) from None
    except strictyaml.RefusedYAML as err:
        raise SystemFileError(f"{path}: {_yaml_message(err)}") from None
    except yaml.YAMLError as err:
        raise SystemFileError(f"{path}: not YAML: {_yaml_message(err)}") from None
    except ValueError as err:  # an integer of more than 4,300 digits
        raise SystemFileError(f"{path}: {err}") from None
    return parse(data, str(path))


def _yaml_message(err: yaml.YAMLError) -> str:
    """A YAML error on one line: what is wrong and where (PyYAML's own has a snippet)."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        what = "; ".join(str(part) for part in (err.context, err.problem) if part)
        return f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark else what
    return " ".join(str(err).split())


def parse(data: Any, where: str = "<system>") -> System:
    """A system from its loaded YAML (``where`` names it in errors)."""
    if not isinstance(data, dict):
        raise SystemFileError(f"{where}: a system file is a mapping of keys to values")
    data = copy.deepcopy(data)
    for key in ("measured", "num_ps"):
        if isinstance(data.get(key), dict):
            data[key] = _string_keys(data[key], key, where)
    errors = sorted(
        _VALIDATOR(load_schema()).iter_errors(data),
        key=lambda e: (len(e.absolute_path), str(e.absolute_path)),
    )
    if errors:
        raise SystemFileError(f"{where}: {_capped(_message(errors[0]))}")
    try:  # the node counts are checked by the schema; a value of 10**400 overflows a float
        plausible.check_bounded_ints(data, where)
    except foreign.Refused as err:
        raise SystemFileError(str(err)) from None
    framework = data["framework"]
    setup = _setup(framework, data.get("strategy"), where)
    pattern = SETUP_PATTERN[setup]
    measured = {int(n): (None if v is None else float(v)) for n, v in data["measured"].items()}
    anchor = min(measured)
    compute = data.get("compute_step_s")
    if measured[anchor] is None and compute is None:
        raise SystemFileError(
            f"{where}: key 'measured.{anchor}' (the anchor, the smallest node count) has no throughput"
            " and key 'compute_step_s' is not given: the compute step comes from one of them"
        )
    model = data.get("model")
    parameters = int(data["parameters"]) if model is None else catalog.PARAMETERS[model]
    _check_plausible(data, measured, parameters, where)
    return System(
        name=data["name"],
        source=data["source"],
        path=where,
        framework=framework,
        setup=setup,
        pattern=pattern,
        parameters=parameters,
        model=model,
        bytes_per_parameter=float(data.get("bytes_per_parameter", 4)),
        network=_network(data["network"], data["name"], where),
        batch_per_node=int(data["batch_per_node"]),
        measured=measured,
        compute_step_s=None if compute is None else float(compute),
        num_ps=_num_ps(data.get("num_ps"), pattern, sorted(measured), where),
        notes=data.get("notes", ""),
        full_duplex=_full_duplex(bool(data.get("full_duplex", False)), pattern, where),
        ranks_per_node=_ranks_per_node(
            int(data.get("ranks_per_node", 1)), pattern, int(data["batch_per_node"]), where
        ),
        largest_variable_parameters=_largest_variable(
            data.get("largest_variable_parameters"), pattern, parameters, where
        ),
    )


#: The widest number a gradient is synchronised in is float64's 8 bytes; twice that is room.
MAX_BYTES_PER_PARAMETER = 16.0


def _check_plausible(
    data: Mapping[str, Any], measured: Mapping[int, float | None], parameters: int, where: str
) -> None:
    """What a schema's types let through but no system can measure (``dlscale.plausible``):
    a gradient of more than ``MAX_PARAMETERS``, a throughput that needs a step shorter than
    ``MIN_STEP_S`` or (a catalog model's) more FLOP/s a rank than ``MAX_RANK_FLOPS``, a
    network outside its bandwidth and latency bounds, more parameter servers than parameters
    or than ``MAX_NODES``."""
    bounds = plausible
    if parameters > bounds.MAX_PARAMETERS:
        raise SystemFileError(
            f"{where}: key 'parameters': {parameters:,} is more than the {bounds.MAX_PARAMETERS:.0e} any model has"
            " (dlscale.plausible.MAX_PARAMETERS)"
        )
    width = float(data.get("bytes_per_parameter", 4))
    if width > MAX_BYTES_PER_PARAMETER:
        raise SystemFileError(
            f"{where}: key 'bytes_per_parameter': {width:g} is wider than any number a gradient is sent in"
            f" (at most {MAX_BYTES_PER_PARAMETER:g})"
        )
    batch = int(data["batch_per_node"])
    for nodes, value in measured.items():
        ceiling = nodes * batch / bounds.MIN_STEP_S
        if value is not None and value > ceiling:
            raise SystemFileError(
                f"{where}: key 'measured.{nodes}': {value:g} samples/s would need a step shorter than"
                f" {bounds.MIN_STEP_S:g} s ({nodes} x {batch} samples a step; dlscale.plausible.MIN_STEP_S)"
            )
    model = data.get("model")
    if model is not None:  # a catalog model: its FLOPs a sample are known
        flops, ranks = roofline.flops_per_sample(model), int(data.get("ranks_per_node", 1))
        for nodes, value in measured.items():
            row = {"throughput": value, "flops_per_sample": flops, "nodes": nodes, "ranks_per_node": ranks}
            try:
                bounds.check_roofline(row, where)
            except foreign.Refused as err:
                raise SystemFileError(f"{where}: key 'measured.{nodes}': {err.rule}") from None
    compute = data.get("compute_step_s")
    if compute is not None and compute < bounds.MIN_STEP_S:
        raise SystemFileError(
            f"{where}: key 'compute_step_s': {compute:g} s is shorter than any training step"
            f" ({bounds.MIN_STEP_S:g} s, dlscale.plausible.MIN_STEP_S)"
        )
    network = data["network"]
    if isinstance(network, Mapping):
        for key in ("bandwidth_gbit", "effective_bandwidth_gbit"):
            value = network.get(key)
            if value is not None and not bounds.MIN_BANDWIDTH_GBIT <= value <= bounds.MAX_BANDWIDTH_GBIT:
                raise SystemFileError(
                    f"{where}: key 'network.{key}': {value:g} Gbit/s is outside"
                    f" {bounds.MIN_BANDWIDTH_GBIT:g} to {bounds.MAX_BANDWIDTH_GBIT:g} (dlscale.plausible)"
                )
        if network["latency_s"] > bounds.MAX_LATENCY_S:
            raise SystemFileError(
                f"{where}: key 'network.latency_s': {network['latency_s']:g} s is longer than any network's"
                f" ({bounds.MAX_LATENCY_S:g} s, dlscale.plausible.MAX_LATENCY_S)"
            )
    servers = data.get("num_ps")
    counts = servers.values() if isinstance(servers, Mapping) else [servers]
    for count in counts:
        if isinstance(count, int) and count > min(parameters, bounds.MAX_NODES):
            raise SystemFileError(
                f"{where}: key 'num_ps': {count:,} parameter servers, more than"
                f" {'the gradient has parameters' if parameters < bounds.MAX_NODES else 'any machine has nodes'}"
                f" ({min(parameters, bounds.MAX_NODES):,})"
            )


def _largest_variable(value: int | None, pattern: str, parameters: int, where: str) -> int | None:
    """The largest variable's parameters: a parameter server's (ps only), part of the gradient."""
    if value is None:
        return None
    if pattern != PS:
        raise SystemFileError(
            f"{where}: key 'largest_variable_parameters': the {pattern} pattern has no parameter servers"
        )
    if value > parameters:
        raise SystemFileError(
            f"{where}: key 'largest_variable_parameters': {value} is more than the gradient's {parameters}"
        )
    return int(value)


def _ranks_per_node(value: int, pattern: str, batch_per_node: int, where: str) -> int:
    """Ranks a node: a ring's only (the other patterns' node is one peer), dividing the batch."""
    if value != 1 and pattern != RING:
        raise SystemFileError(
            f"{where}: key 'ranks_per_node': the {pattern} pattern's node is one peer (ring only)"
        )
    if batch_per_node % value:
        raise SystemFileError(
            f"{where}: key 'ranks_per_node': {value} ranks do not divide 'batch_per_node' ({batch_per_node})"
        )
    return value


def _full_duplex(value: bool, pattern: str, where: str) -> bool:
    """Pulls and pushes at once: a property of parameter servers' links only."""
    if value and pattern != PS:
        raise SystemFileError(f"{where}: key 'full_duplex': the {pattern} pattern has no parameter servers")
    return value


def _string_keys(mapping: dict[Any, Any], key: str, where: str) -> dict[str, Any]:
    """A node-count map with its keys as the schema reads them (YAML gives ``1:`` as an
    int): a key that is no whole node count is named, not silently converted."""
    out: dict[str, Any] = {}
    for name, value in mapping.items():
        if isinstance(name, bool) or not isinstance(name, int | str):
            raise SystemFileError(f"{where}: key '{key}.{name}' is not a node count")
        text = str(name)
        if text in out:
            raise SystemFileError(f"{where}: key '{key}.{text}' is given twice")
        out[text] = value
    return out


def _setup(framework: str, strategy: str | None, where: str) -> str:
    """The set-up a framework and its strategy name (``tensorflow-ps``): the strategy must be
    one of the framework's (its runner's options schema lists them)."""
    options = json.loads(catalog.FRAMEWORKS[framework].options_schema.read_text(encoding="utf-8"))
    known = options.get("properties", {}).get("strategy", {}).get("enum", [])
    if strategy is not None and strategy not in known:
        choices = f"one of {', '.join(known)}" if known else "not given: it has one strategy"
        raise SystemFileError(f"{where}: key 'strategy': {strategy!r} is not {framework}'s ({choices})")
    return setup_of(framework, {"strategy": strategy} if strategy else None)


def _network(value: str | Mapping[str, float], name: str, where: str) -> NetworkPreset:
    """A preset by name, or the file's own latency and bandwidth as a preset of its own (at
    ``effective_bandwidth_gbit`` where the file gives the rate its transport achieved)."""
    if isinstance(value, str):
        return PRESETS[value]
    named = float(value["bandwidth_gbit"])
    effective = float(value.get("effective_bandwidth_gbit", named))
    if effective > named:
        raise SystemFileError(
            f"{where}: key 'network.effective_bandwidth_gbit': {effective:g} is above the link's"
            f" bandwidth_gbit ({named:g})"
        )
    return NetworkPreset(
        f"{name}-network",
        float(value["latency_s"]),
        effective * GBIT,
        False,
        "system file" if effective == named else f"system file: {effective:g} of {named:g} Gbit/s effective",
    )


def _num_ps(value: Any, pattern: str, counts: list[int], where: str) -> dict[int, int]:
    """Parameter servers at each measured count: ``nodes`` is one per node, a map must cover
    every count; a pattern without servers takes none (and a file giving some is refused)."""
    if value is None:
        return dict.fromkeys(counts, 1)
    if pattern != PS:
        raise SystemFileError(f"{where}: key 'num_ps': the {pattern} pattern has no parameter servers")
    if value == "nodes":
        return {n: n for n in counts}
    if isinstance(value, int):
        return dict.fromkeys(counts, value)
    given = {int(n): int(v) for n, v in value.items()}
    missing = [n for n in counts if n not in given]
    if missing:
        raise SystemFileError(
            f"{where}: key 'num_ps.{missing[0]}' is missing: the map covers every measured count"
        )
    return {n: given[n] for n in counts}


def _strict_integer(checker: Any, instance: Any) -> bool:
    """An integer is an int (not 2.0, not YAML's ``true``)."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def _finite_number(checker: Any, instance: Any) -> bool:
    """A number is a finite int or float (not ``.inf``/``.nan``, not a bool)."""
    if not isinstance(instance, int | float) or isinstance(instance, bool):
        return False
    try:
        return math.isfinite(instance)
    except OverflowError:  # an integer beyond a float
        return False


_VALIDATOR = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _strict_integer, "number": _finite_number}
    ),
)


def _key_path(path: Any) -> str:
    """A key as a dotted path (``measured.8``)."""
    return ".".join(str(part) for part in path)


#: The most of a schema error's message shown: it quotes the value, which may be megabytes.
MESSAGE_CHARS = 300


def _capped(message: str) -> str:
    """``message`` cut in its middle (the key first, the rule last) to about MESSAGE_CHARS."""
    if len(message) <= MESSAGE_CHARS:
        return message
    head, tail = MESSAGE_CHARS * 2 // 3, MESSAGE_CHARS // 3
    return f"{message[:head]} [... {len(message) - head - tail:,} characters ...] {message[-tail:]}"


def _message(err: jsonschema.ValidationError) -> str:
    """A schema error in words that name the key and the value."""
    where = _key_path(err.absolute_path)
    if err.validator == "additionalProperties":
        known = sorted(err.schema.get("properties", {}))
        unknown = sorted(set(err.instance) - set(known))
        if known:
            prefix = f"{where}." if where else ""
            return f"key '{prefix}{unknown[0]}' is not a known key (known here: {', '.join(known)})"
    if err.validator == "required":
        missing = next(k for k in err.validator_value if k not in err.instance)
        prefix = f"{where}." if where else ""
        return f"key '{prefix}{missing}' is required"
    if err.validator == "oneOf" and not err.absolute_path:
        both = "parameters" in err.instance and "model" in err.instance
        return (
            "keys 'parameters' and 'model' are both given: give one"
            if both
            else "key 'parameters' (or 'model') is required: the gradient's size"
        )
    if "propertyNames" in err.schema_path:
        return f"key '{where}.{err.instance}' is not a node count (a whole number from 1 to 9999999)"
    if err.validator == "oneOf" and err.context:
        if err.absolute_path and err.absolute_path[-1] == "network" and isinstance(err.instance, str):
            return f"key 'network': {err.instance!r} is not a network preset (known: {', '.join(sorted(PRESETS))})"
        # the branches of the value's own type (a branch with a type error is another type's)
        mistyped = {e.relative_schema_path[0] for e in err.context if e.validator == "type"}
        fitting = [e for e in err.context if e.relative_schema_path[0] not in mistyped]
        if fitting:
            return _message(max(fitting, key=lambda e: len(e.absolute_path)))
        return f"key '{where}': {err.instance!r} is not of an allowed form (schemas/system.schema.yaml)"
    return f"key '{where}': {err.message}"
