"""RunSpec: everything one training run needs to know, typed, with its defaults, built once.

``dlscale.study.matrix.run_spec`` builds it from the validated study config; the training rule
passes it to the launcher as JSON (``RunSpec.to_json``), and the launcher and every rank
read it back (``RunSpec.from_json``). Runners receive this object: they never re-default
or cast a field. Its JSON is canonical (sorted keys, defaults that were added to the spec
after runs existed left out), so its hash (``sha256``, recorded as ``config_sha256``) is
stable: runs of existing studies keep their hash.

The framework's options (config key ``<framework>``) are completed here from the runner's
``options.schema.json`` defaults, so that a spec written by hand (a test, a benchmark)
means the same as one built from a config. Standard library only: every framework's venv
imports it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlscale import catalog
from dlscale.options import options_schema, with_option_defaults

# A run's identity lives in dlscale.runid; the launcher reads a run id's fields through here.
from dlscale.runid import RUN_ID_PATTERN as RUN_ID_PATTERN
from dlscale.runid import run_id_fields as run_id_fields

#: The host network (no emulated interconnect); the default of ``network``.
HOST_NETWORK = "host"
#: Fields added after studies existed: left out of the JSON at their default value, so
#: that adding them changed no existing run's hash.
_OMITTED_AT_DEFAULT: Mapping[str, Any] = {
    "network": HOST_NETWORK,
    "input": "memory",
    "eval_every": 0,
    "quality_target": None,
    "max_iterations": 0,
    "init": "framework",
    "lr_rule": None,
    "evaluates": True,
}

#: How the learning rate follows the global batch (``lr_rule``'s ``rule``): the rate at
#: global batch B is ``learning_rate`` (the rate at ``base_batch``) times 1, B / base_batch
#: or sqrt(B / base_batch).
LR_RULES: Mapping[str, Any] = {
    "fixed": lambda ratio: 1.0,
    "linear": lambda ratio: ratio,
    "sqrt": math.sqrt,
}
#: The rule whose rate per global batch is measured, not computed: a sweep on the reference
#: framework chooses it (``dlscale.tune.rates``) and every framework borrows it, so a run's
#: spec carries the chosen ``rate`` (MLPerf's hyperparameter borrowing).
TUNED_RULE = "tuned"
#: Every rule a study may declare (the config schema's and the run_start event's enum).
LR_RULE_NAMES: tuple[str, ...] = (*LR_RULES, TUNED_RULE)


def scheduled_rate(base: float, target: float, ramp: int, step: int) -> float:
    """The rate of optimiser step ``step`` on a gradual warm-up (Goyal et al. 2017) from
    ``base`` to ``target`` over ``ramp`` steps: step 0 at the base rate, the same amount
    added each step, the target from step ``ramp`` on. Runs apply it (RunSpec) and the
    parity check holds their recorded rates against it."""
    if step >= ramp:
        return target
    return base + (target - base) * step / ramp


class SpecError(ValueError):
    """A run spec that cannot be a run: the message names the field and the value."""


def _checked_lr_rule(rule: Any) -> dict[str, Any]:
    """``lr_rule`` as the spec keeps it (every key, integers as integers), or SpecError."""
    shape = (
        f"{{rule: {'|'.join(LR_RULES)}, base_batch: >= 1, warmup_iterations: >= 0}}"
        f" or {{rule: {TUNED_RULE}, ..., rate: > 0}}"
    )
    if not isinstance(rule, Mapping) or not set(rule) <= {"rule", "base_batch", "warmup_iterations", "rate"}:
        raise SpecError(f"run spec field 'lr_rule': {rule!r} is not {shape}")
    name, base, warmup = rule.get("rule"), rule.get("base_batch"), rule.get("warmup_iterations", 0)
    rate = rule.get("rate")
    tuned_rate_ok = (
        isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate) and rate > 0
    )
    if (
        name not in LR_RULE_NAMES
        or (name == TUNED_RULE) != ("rate" in rule)
        or (name == TUNED_RULE and not tuned_rate_ok)
        or not isinstance(base, int)
        or not isinstance(warmup, int)
        or isinstance(base, bool)
        or isinstance(warmup, bool)
        or base < 1
        or warmup < 0
    ):
        raise SpecError(f"run spec field 'lr_rule': {dict(rule)!r} is not {shape}")
    checked = {"rule": name, "base_batch": base, "warmup_iterations": warmup}
    if name == TUNED_RULE:
        checked["rate"] = float(rate)
    return checked


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One run of the study matrix, with every setting that changes its result."""

    framework: str
    model: str
    nodes: int
    ranks_per_node: int
    batch: int
    repeat: int
    run_id: str
    world_size: int
    scaling: str
    global_batch: int
    dataset: str
    iterations: int
    warmup: int
    threads_per_rank: int
    learning_rate: float
    seed: int
    timeout_s: int
    momentum: float = 0.9
    network: str = HOST_NETWORK
    #: ``memory`` or ``pipeline`` (see the config schema's ``input``).
    input: str = "memory"
    input_workers: int = 1
    #: Evaluate held-out quality every this many iterations (0: only after the last one).
    eval_every: int = 0
    #: ``{"metric": "top1"|"top5"|"mse", "value": v}``: train until an evaluation meets it
    #: (time to target) or ``max_iterations`` timed iterations have run; None: ``iterations``.
    quality_target: Mapping[str, Any] | None = None
    #: The cap on timed iterations of a run with a quality target.
    max_iterations: int = 0
    #: ``framework``: each framework's own initialiser and per-rank data blocks. ``shared``:
    #: the same initial weights in every framework (``dlscale.data.initweights``) and every rank's
    #: slice of one global batch sequence (``dlscale.data.shards.GlobalBatchSlices``), so runs
    #: compute the same optimisation step for step (the parity check, ``dlscale.analysis.parity``).
    init: str = "framework"
    #: The learning rate as a declared function of the global batch: ``{"rule": fixed|linear|
    #: sqrt, "base_batch": B0, "warmup_iterations": W}``; ``learning_rate`` is the rate at B0.
    #: ``{"rule": "tuned", ..., "rate": r}``: the rate a sweep chose for this global batch.
    #: None: ``learning_rate`` at every batch, from the first step (``fixed`` without warm-up).
    lr_rule: Mapping[str, Any] | None = None
    #: The framework's options, defaults filled (``dlscale/runners/<fw>/options.schema.json``).
    options: Mapping[str, Any] = field(default_factory=dict)
    #: False: the run measures no held-out quality at all, not even after its last iteration
    #: (a parity reference: the check compares its losses alone).
    evaluates: bool = True

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            expected = {"int": int, "float": float, "str": str}.get(str(f.type))
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
                value = float(value)
            if expected is not None and (not isinstance(value, expected) or isinstance(value, bool)):
                raise SpecError(f"run spec field {f.name!r}: {value!r} is not {expected.__name__}")
            if expected is float and not math.isfinite(value):
                raise SpecError(f"run spec field {f.name!r}: {value!r} is not a finite number")
        for name, lookup in (("framework", catalog.framework), ("model", catalog.model)):
            try:
                lookup(getattr(self, name))
            except KeyError as err:
                raise SpecError(f"run spec field {name!r}: {err.args[0]}") from None
        if self.world_size != self.nodes * self.ranks_per_node:
            raise SpecError(
                f"run spec field 'world_size': {self.world_size} is not nodes x ranks_per_node"
                f" ({self.nodes} x {self.ranks_per_node})"
            )
        if self.input not in ("memory", "pipeline"):
            raise SpecError(f"run spec field 'input': {self.input!r} is not 'memory' or 'pipeline'")
        if self.init not in ("framework", "shared"):
            raise SpecError(f"run spec field 'init': {self.init!r} is not 'framework' or 'shared'")
        if not isinstance(self.evaluates, bool):
            raise SpecError(f"run spec field 'evaluates': {self.evaluates!r} is not true or false")
        if self.eval_every < 0:
            raise SpecError(f"run spec field 'eval_every': {self.eval_every!r} is below 0")
        if self.quality_target is not None:
            target = self.quality_target
            if (
                not isinstance(target, Mapping)
                or set(target) != {"metric", "value"}
                or target["metric"] not in ("top1", "top5", "mse")
                or not isinstance(target["value"], (int, float))
                or isinstance(target["value"], bool)
                or not math.isfinite(target["value"])
            ):
                raise SpecError(
                    f"run spec field 'quality_target': {target!r} is not {{metric: top1|top5|mse, value: number}}"
                )
            if self.max_iterations < 1 or self.eval_every < 1 or not self.evaluates:
                raise SpecError(
                    "run spec with a quality_target needs max_iterations >= 1, eval_every >= 1"
                    f" and evaluates (got {self.max_iterations}, {self.eval_every} and {self.evaluates})"
                )
            object.__setattr__(
                self, "quality_target", {"metric": target["metric"], "value": float(target["value"])}
            )
        if self.lr_rule is not None:
            object.__setattr__(self, "lr_rule", _checked_lr_rule(self.lr_rule))
        object.__setattr__(self, "options", with_option_defaults(self.framework, self.options))

    # --- what runners ask of a spec ---------------------------------------------------------

    @property
    def timed_iterations(self) -> int:
        """The most timed iterations the run trains: ``iterations``, or with a quality
        target ``max_iterations`` (it stops at the first evaluation that meets it)."""
        return self.max_iterations if self.quality_target is not None else self.iterations

    @property
    def total_iterations(self) -> int:
        """Warm-up plus the most timed iterations."""
        return self.warmup + self.timed_iterations

    def eval_due(self, completed: int) -> bool:
        """Whether to evaluate after ``completed`` training iterations (warm-up included):
        every ``eval_every``, and always after the last; never when the run ``evaluates``
        nothing."""
        if not self.evaluates:
            return False
        if completed >= self.total_iterations:
            return True
        return self.eval_every > 0 and completed % self.eval_every == 0

    @property
    def target_learning_rate(self) -> float:
        """The rate at this run's global batch, after any warm-up: the rule applied to
        ``learning_rate`` (the rate at the rule's base batch)."""
        if self.lr_rule is None:
            return self.learning_rate
        if self.lr_rule["rule"] == TUNED_RULE:
            return float(self.lr_rule["rate"])
        ratio = self.global_batch / self.lr_rule["base_batch"]
        return self.learning_rate * LR_RULES[self.lr_rule["rule"]](ratio)

    @property
    def warmup_ramp(self) -> int:
        """Optimiser steps over which the rate climbs to its target (0: none). Gradual
        warm-up (Goyal et al. 2017): step 0 at the base rate, the same amount added each
        step, the target from step ``warmup_iterations`` on (BigDL's ``Warmup`` schedule
        counts the same way); a target at or below the base rate needs no ramp."""
        if self.lr_rule is None or self.target_learning_rate <= self.learning_rate:
            return 0
        return int(self.lr_rule["warmup_iterations"])

    def learning_rate_at(self, step: int) -> float:
        """The rate of optimiser step ``step`` (0-based, counted from the run's first
        iteration, the un-timed warm-up iterations included: they train too)."""
        return scheduled_rate(self.learning_rate, self.target_learning_rate, self.warmup_ramp, step)

    def lr_record(self) -> dict[str, Any]:
        """What a run records of its learning rate: the rule, its base, and the rate used."""
        rule = self.lr_rule or {"rule": "fixed", "base_batch": self.global_batch, "warmup_iterations": 0}
        return {
            "lr_rule": rule["rule"],
            "lr_base_rate": self.learning_rate,
            "lr_base_batch": rule["base_batch"],
            "lr_warmup_iterations": self.warmup_ramp,
            "lr_rate": self.target_learning_rate,
        }

    @property
    def mnist_sized(self) -> bool:
        return catalog.model(self.model).mnist_sized

    # --- serialisation ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data, with the fields added later left out at their default."""
        data = dataclasses.asdict(self)
        data["options"] = copy.deepcopy(dict(self.options))
        for key, sub in options_schema(self.framework).get("properties", {}).items():
            # Options added after studies existed (``x-omitted-at-default`` in the runner's
            # schema) are left out at their default, as the top-level fields above are.
            if sub.get("x-omitted-at-default") and data["options"].get(key) == sub.get("default"):
                del data["options"][key]
        for name, default in _OMITTED_AT_DEFAULT.items():
            if data[name] == default:
                del data[name]
        if "input" not in data:
            # input_workers only matters to (and was only recorded for) the pipeline input.
            del data["input_workers"]
        return data

    def to_json(self) -> str:
        """Canonical JSON (sorted keys): what the rule passes and what is hashed."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @property
    def sha256(self) -> str:
        """The spec's hash, recorded in every run's start event as ``config_sha256``."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        """A spec from plain data (``to_dict``'s, or one written by hand), checked."""
        if not isinstance(data, Mapping):
            raise SpecError(f"a run spec is a mapping of fields, not {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(
                f"run spec field {unknown[0]!r} is not a known field (known: {', '.join(sorted(known))})"
            )
        required = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        missing = [name for name in required if name not in data]
        if missing:
            raise SpecError(f"run spec field {missing[0]!r} is missing")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise SpecError(f"run spec is not JSON: {err}") from None
        return cls.from_dict(data)
