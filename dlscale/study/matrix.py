"""From a validated study configuration (``dlscale.study.validation``) to its runs: the run
matrix with stable run ids, each run's spec (``dlscale.runspec.RunSpec``: its learning rate
from the study's rule, its quality fields), and the plan's summary line.

Imported when Snakemake builds the DAG, so it stays light: no framework, no pandas.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from dlscale import catalog, networks, runid
from dlscale.runid import Run
from dlscale.runspec import TUNED_RULE, RunSpec, SpecError

FRAMEWORKS = catalog.FRAMEWORK_NAMES
MODELS = catalog.MODEL_NAMES
# A framework is implemented when its runner folder has a launcher; checked on disk so that
# no framework is imported here (tests/unit/test_catalog.py checks every catalog entry has one).
IMPLEMENTED_FRAMEWORKS = tuple(
    fw.name for fw in catalog.FRAMEWORKS.values() if (fw.runner_dir / "launcher.py").is_file()
)


# Wildcard constraints for Snakemake, so that run paths never match ambiguously.
WILDCARD_CONSTRAINTS = {
    "framework": "|".join(FRAMEWORKS),
    "model": "|".join(MODELS),
    # The run id's numbers and its network suffix ("" or "-1gbe"), as the run id defines them.
    **runid.WILDCARD_CONSTRAINTS,
    # A framework venv's marker carries its requirements' hash (dlscale.envs.env_marker).
    "requirements": r"[0-9a-f]{16}",
    # repeats: auto: a cell's check after its first {done} repeats.
    "done": r"\d+",
}


def global_batch_of(study: dict[str, Any], model: str) -> int:
    """The fixed global batch of a model under strong scaling."""
    explicit = study.get("global_batch", {}).get(model)
    if explicit is not None:
        return int(explicit)
    smallest_world = min(study["nodes"]) * study["ranks_per_node"]
    return int(study["batch_per_rank"][model]) * smallest_world


def batch_per_rank(study: dict[str, Any], model: str, nodes: int) -> int:
    """Per-rank mini-batch of a model at a node count, under the study's scaling mode."""
    if study["scaling"] == "weak":
        return int(study["batch_per_rank"][model])
    return global_batch_of(study, model) // (nodes * study["ranks_per_node"])


def networks_of(study: dict[str, Any]) -> list[str]:
    """The networks the study runs on (``network`` may be one name or a list)."""
    value = study.get("network", networks.HOST)
    return [value] if isinstance(value, str) else list(value)


def expand_runs(study: dict[str, Any]) -> list[Run]:
    """Every run of the study matrix, in a stable order."""
    runs = [
        Run(fw, model, nodes, study["ranks_per_node"], batch_per_rank(study, model, nodes), repeat, network)
        for network in networks_of(study)
        for fw in study["frameworks"]
        for model in models_of(study, fw)
        for nodes in sorted(study["nodes"])
        for repeat in range(initial_repeats(study))
    ]
    return runs


def initial_repeats(study: dict[str, Any]) -> int:
    """Repeats every cell runs before any is judged: all of them, or ``repeats_auto.min``."""
    if study["repeats"] == "auto":
        return study["repeats_auto"]["min"]
    return study["repeats"]


def max_repeats(study: dict[str, Any]) -> int:
    """The most repeats a cell can get (what the node-hour estimate must count)."""
    if study["repeats"] == "auto":
        return max(study["repeats_auto"]["cap"], study["repeats_auto"]["min"])
    return study["repeats"]


def models_of(study: dict[str, Any], framework: str) -> list[str]:
    """The models a framework runs: all of ``models``, or its ``models_per_framework`` subset."""
    subset = study.get("models_per_framework", {}).get(framework)
    return [m for m in study["models"] if subset is None or m in subset]


def dataset_of(study: dict[str, Any], model: str) -> str:
    return study["datasets"][model]


def run_spec(
    study: dict[str, Any], run: Run, tuned: dict[str, Any] | None = None, lr_rate: float | None = None
) -> RunSpec:
    """Everything a runner needs to know about one run, and nothing that does not change it.

    The spec is passed to the job as a parameter: Snakemake reruns a run when its spec
    changes, and only then. Its hash is recorded in the events as ``config_sha256``.
    ``tuned``: the options the tuning stage chose for the run's framework and model
    (dlscale.tune.grid), over the framework's section of the study; a choice equal to the
    defaults leaves the spec, and its hash, as they were without tuning. ``lr_rate``: the
    rate the learning-rate sweep chose for the run's model and global batch, which a model
    under ``rule: tuned`` needs (``dlscale.tune.rates``) and any other refuses.
    """
    options = {**study[catalog.framework(run.framework).options_key], **(tuned or {})}
    return RunSpec(
        framework=run.framework,
        model=run.model,
        nodes=run.nodes,
        ranks_per_node=run.ranks_per_node,
        batch=run.batch,
        repeat=run.repeat,
        network=run.network,
        run_id=run.run_id,
        world_size=run.world_size,
        scaling=study["scaling"],
        global_batch=run.batch * run.world_size,
        dataset=dataset_of(study, run.model),
        iterations=study["iterations"][run.model],
        warmup=study["warmup"],
        threads_per_rank=study["threads_per_rank"],
        learning_rate=float(study["learning_rate"][run.model]),
        seed=1234 + run.repeat,
        timeout_s=study["run_timeout_min"] * 60,
        options=options,
        input=study["input"],
        input_workers=study["input_workers"],
        lr_rule=_with_rate(lr_rule_of(study, run.model), lr_rate, run),
        **quality_fields(study, run.model, run.batch * run.world_size),
    )


def _with_rate(rule: dict[str, Any] | None, rate: float | None, run: Run) -> dict[str, Any] | None:
    tuned = rule is not None and rule["rule"] == TUNED_RULE
    if tuned != (rate is not None):
        raise SpecError(
            f"run {run.run_id}: "
            + (
                f"{run.model}'s rate is tuned, and no swept rate was given for global batch {run.batch * run.world_size}"
                if tuned
                else f"a swept rate ({rate}) was given, and {run.model}'s rule is not {TUNED_RULE!r}"
            )
        )
    return rule if rate is None else {**rule, "rate": float(rate)}


def is_tuned_rate(study: dict[str, Any], model: str) -> bool:
    """Whether ``model``'s learning rate per global batch comes from a sweep (``rule: tuned``)."""
    rule = (study.get("lr_scaling") or {}).get(model)
    return rule is not None and rule["rule"] == TUNED_RULE


def lr_rule_of(study: dict[str, Any], model: str) -> dict[str, Any] | None:
    """The learning-rate rule of ``model``'s runs (``lr_scaling``), its base batch filled
    in (the model's global batch at the smallest node count), or None where the study
    declares none: those runs keep one rate at every batch, and their specs and hashes
    stay as they were before the key existed."""
    rule = (study.get("lr_scaling") or {}).get(model)
    if rule is None:
        return None
    smallest = min(study["nodes"])
    base = rule.get("base_batch", batch_per_rank(study, model, smallest) * study["ranks_per_node"] * smallest)
    return {
        "rule": rule["rule"],
        "base_batch": int(base),
        "warmup_iterations": int(rule.get("warmup_iterations", 0)),
    }


def parity_reference_runs(study: dict[str, Any]) -> list[Run]:
    """The reference runs the parity check needs beside the study's own (``init: shared``):
    for every model and global batch the study trains on more than one rank, the reference
    framework's 1-rank run of that global batch, one per repeat the study starts with (each
    repeat's seed is its own). Where the study already has that run (the reference
    framework at 1 node, 1 rank), none is added. Their specs: ``parity_reference_spec``.

    Cheap (a few seconds of steps each), and what lets the check prove the same work where
    the frameworks differ: the gradient average over nodes, the parameter servers.
    """
    if study.get("init", "framework") != "shared":
        return []
    runs = [r for r in expand_runs(study) if r.network == networks.HOST]
    own = {
        (r.model, r.batch, r.repeat)
        for r in runs
        if r.framework == catalog.PARITY_REFERENCE and r.world_size == 1
    }
    wanted = sorted({(r.model, r.batch * r.world_size, r.repeat) for r in runs if r.world_size > 1} - own)
    return [
        Run(catalog.PARITY_REFERENCE, model, 1, 1, global_batch, repeat, networks.HOST)
        for model, global_batch, repeat in wanted
    ]


def parity_references(
    study: dict[str, Any], lr_rate_of: Callable[[str, int], float] | None = None
) -> list[RunSpec]:
    """Every parity reference's spec (``parity_reference_runs``, ``parity_reference_spec``);
    ``lr_rate_of(model, global_batch)``: the swept rate of a model under ``rule: tuned``."""
    return [
        parity_reference_spec(
            study,
            run,
            lr_rate_of(run.model, run.batch) if lr_rate_of and is_tuned_rate(study, run.model) else None,
        )
        for run in parity_reference_runs(study)
    ]


def parity_reference_spec(study: dict[str, Any], run: Run, lr_rate: float | None = None) -> RunSpec:
    """One parity reference's spec: the study's run of ``run``, on the same learning-rate
    schedule, cut to the losses the check compares (``catalog.PARITY_ITERATIONS``, no
    warm-up, no evaluation)."""
    return dataclasses.replace(
        run_spec(study, run, lr_rate=lr_rate),
        iterations=catalog.PARITY_ITERATIONS,
        warmup=0,
        eval_every=0,
        quality_target=None,
        max_iterations=0,
        evaluates=False,
    )


#: How many times a model's ``iterations`` a run with a quality target may train by default.
DEFAULT_MAX_ITERATIONS_FACTOR = 10


#: Evaluations before the expected steps to target, where ``eval_spacing`` names none: ten
#: put the quantisation bracket at a tenth of the steps, below the spread of steps over
#: repeats measured on LeNet (docs/how-many-nodes.md: 50 [40, 50] at batch 128).
DEFAULT_EVALUATIONS_TO_TARGET = 10


def quality_fields(study: dict[str, Any], model: str, global_batch: int | None = None) -> dict[str, Any]:
    """The spec's evaluation fields for ``model`` (at ``global_batch``, where the study
    spaces evaluations per run: ``eval_spacing``): left at their defaults (and out of the
    spec's JSON and hash) unless the study evaluates during training or sets a target."""
    fields: dict[str, Any] = {}
    if study.get("init", "framework") != "framework":
        fields["init"] = study["init"]
    spacing = (study.get("eval_spacing") or {}).get(model)
    if spacing is not None and global_batch is not None:
        fields["eval_every"] = eval_every_at(study, model, global_batch)
    elif study.get("eval_every"):
        fields["eval_every"] = study["eval_every"]
    target = (study.get("quality_target") or {}).get(model)
    if target is not None:
        fields["quality_target"] = {"metric": target["metric"], "value": float(target["value"])}
        fields["max_iterations"] = (study.get("max_iterations") or {}).get(
            model, DEFAULT_MAX_ITERATIONS_FACTOR * study["iterations"][model]
        )
    return fields


def expected_steps_at(study: dict[str, Any], model: str, global_batch: int) -> float:
    """``eval_spacing``'s expected steps to target at ``global_batch``: the steps at the
    rule's base batch under the rule's ideal scaling (the schema's description says why)."""
    expected = float(study["eval_spacing"][model]["expected_steps"])
    rule = lr_rule_of(study, model)
    if rule is None or rule["rule"] == "fixed":
        return expected
    ratio = global_batch / rule["base_batch"]
    return expected / (math.sqrt(ratio) if rule["rule"] == "sqrt" else ratio)


def eval_every_at(study: dict[str, Any], model: str, global_batch: int) -> int:
    """A run's evaluation spacing under ``eval_spacing``: its expected steps over the
    evaluations wanted before them, at least 1."""
    evaluations = study["eval_spacing"][model].get("evaluations", DEFAULT_EVALUATIONS_TO_TARGET)
    return max(1, math.floor(expected_steps_at(study, model, global_batch) / evaluations))


def requested_node_hours(study: dict[str, Any], runs: list[Run]) -> float:
    """Node-hours the study's training runs ask for: nodes x the batch time limit per run.

    An upper bound (a run ends when it ends, but a batch system reserves, and some sites
    charge, the whole request): what a user must have in the allocation before submitting.
    """
    limit_h = (study["run_timeout_min"] + 5) / 60
    per_repeat = max_repeats(study) / initial_repeats(study)
    return sum(run.nodes for run in runs) * limit_h * per_repeat


def describe_plan(study: dict[str, Any], runs: list[Run]) -> str:
    """One line for the start of every invocation: runs, frameworks, nodes, node-hours."""
    frameworks = sorted({run.framework for run in runs}, key=catalog.FRAMEWORK_NAMES.index)
    return (
        f"study: {len(runs)} training runs ({', '.join(frameworks)}; nodes {sorted(set(study['nodes']))};"
        f" {study['repeats']} repeat(s)"
        + (f", {initial_repeats(study)} to {max_repeats(study)}" if study["repeats"] == "auto" else "")
        + f"); at most {requested_node_hours(study, runs):,.1f} node-hours"
        f" requested (nodes x {study['run_timeout_min'] + 5} min limit per run)"
    )
