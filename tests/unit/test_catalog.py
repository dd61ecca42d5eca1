"""The catalog is the only list of frameworks and models, and every entry is complete.

A framework is one catalog entry, one runner folder and one requirements file: these tests
fail when an entry lacks any of its parts (the runner's as ``dlscale.runners.contract``
states them), or when a list of frameworks or models appears somewhere else than the
catalog.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from helpers.paths import REPO, SCHEMA

from dlscale import catalog
from dlscale.host import sitecheck
from dlscale.runners import contract
from dlscale.study.matrix import WILDCARD_CONSTRAINTS
from dlscale.study.validation import ConfigError, load_schema, validate_config

#: The runner modules that import no framework (checked by import), and the trainer's
#: (checked by parsing: importing it needs the framework's venv).
LIGHT_MODULES = ("launcher", "settings")
TRAINER_MODULE = "train"
#: What a light module must not import: every framework's own module, from the catalog.
HEAVY_MODULES = tuple(
    dict.fromkeys(
        m for fw in catalog.FRAMEWORKS.values() for m in (fw.name, fw.venv_import.split(".")[0], "pyspark")
    )
)


@pytest.mark.parametrize("framework", catalog.FRAMEWORK_NAMES)
def test_every_framework_has_its_runner_folder_env_file_and_options(framework):
    fw = catalog.framework(framework)
    missing = [name for name in contract.RUNNER_FILES if not (fw.runner_dir / name).is_file()]
    assert missing == [], f"dlscale/runners/{framework}/ lacks {missing}"
    assert fw.requirements.is_file(), f"envs/{framework}.txt is missing"
    options = json.loads(fw.options_schema.read_text())
    jsonschema.Draft202012Validator.check_schema(options)
    assert options["type"] == "object" and options.get("additionalProperties") is False
    assert set(fw.setups) and set(fw.setups.values()) <= set(catalog.PATTERNS)
    assert framework in fw.setups, "the framework's default set-up is named after it"
    assert set(fw.libraries) == set(fw.setups), "every set-up names its communication library"


def test_the_contract_names_every_file_the_runners_share():
    """The contract's list of files is what every runner folder has, no more and no less:
    a file all runners gain belongs in the contract, one it names must be in every folder."""
    folders = [catalog.framework(name).runner_dir for name in catalog.FRAMEWORK_NAMES]
    shared = set.intersection(*({p.name for p in folder.iterdir() if p.is_file()} for folder in folders))
    assert shared == set(contract.RUNNER_FILES)
    assert set(contract.MODULES) == {*LIGHT_MODULES, TRAINER_MODULE}
    assert {f"{module}.py" for module in contract.MODULES} <= set(contract.RUNNER_FILES)


@pytest.mark.parametrize("framework", catalog.FRAMEWORK_NAMES)
def test_every_launcher_and_settings_module_keeps_the_contract_without_its_framework(framework):
    """The launcher and settings modules (imported by dlscale.launch and the tuning stage in
    the workflow venv) import no framework and have every member of their Protocol, with
    its parameters."""
    probe = (
        "import importlib, inspect, json, sys\n"
        "found = {}\n"
        f"for name in {list(LIGHT_MODULES)!r}:\n"
        f"    mod = importlib.import_module('dlscale.runners.{framework}.' + name)\n"
        "    found[name] = {k: list(inspect.signature(v).parameters) for k, v in vars(mod).items()\n"
        "                   if inspect.isfunction(v) and v.__module__ == mod.__name__}\n"
        f"heavy = [m for m in {HEAVY_MODULES!r} if m in sys.modules]\n"
        "print(json.dumps({'functions': found, 'heavy': heavy}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["heavy"] == []
    for name in LIGHT_MODULES:
        assert _unkept(seen["functions"][name], contract.MODULES[name]) == [], f"{framework}/{name}.py"


@pytest.mark.parametrize("framework", catalog.FRAMEWORK_NAMES)
def test_every_trainer_module_keeps_the_contract(framework):
    """The trainer's functions, read from its source (no framework needed)."""
    path = catalog.framework(framework).runner_dir / f"{TRAINER_MODULE}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    functions = {
        node.name: [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }
    assert _unkept(functions, contract.MODULES[TRAINER_MODULE]) == [], f"{framework}/{TRAINER_MODULE}.py"


def _unkept(functions: dict[str, list[str]], protocol: type) -> list[str]:
    """What of ``protocol`` a module's top-level ``functions`` (name -> parameter names) lacks."""
    problems = []
    for name, parameters in contract.members(protocol).items():
        if name not in functions:
            problems.append(f"no {name}()")
        elif tuple(functions[name]) != parameters:
            problems.append(f"{name}({', '.join(functions[name])}), expected {name}({', '.join(parameters)})")
    return problems


def test_schema_enums_and_defaults_come_from_the_catalog():
    schema = load_schema(SCHEMA)
    assert schema["$defs"]["framework_name"]["enum"] == list(catalog.FRAMEWORK_NAMES)
    assert schema["$defs"]["model_name"]["enum"] == list(catalog.MODEL_NAMES)
    study = validate_config({}, schema)
    assert study["models"] == list(catalog.MODEL_NAMES)
    for model in catalog.MODELS.values():
        assert study["batch_per_rank"][model.name] == model.batch_per_rank
        assert study["iterations"][model.name] == model.iterations
        assert study["datasets"][model.name] == model.datasets[0]
    for fw in catalog.FRAMEWORKS.values():
        assert fw.options_key in study, f"options of {fw.name} not in the validated config"


def test_a_partial_per_model_map_keeps_the_other_models_defaults():
    study = validate_config({"batch_per_rank": {"lenet": 32}}, load_schema(SCHEMA))
    assert study["batch_per_rank"]["lenet"] == 32
    assert study["batch_per_rank"]["resnet50"] == catalog.model("resnet50").batch_per_rank


def test_unknown_framework_and_model_named_in_the_error():
    schema = load_schema(SCHEMA)
    with pytest.raises(ConfigError, match="frameworks\\[0\\].*'mxnet' is not one of"):
        validate_config({"frameworks": ["mxnet"]}, schema)
    with pytest.raises(ConfigError, match="batch_per_rank.vgg16' is not a known key"):
        validate_config({"batch_per_rank": {"vgg16": 8}}, schema)


def test_dataset_must_fit_the_model():
    with pytest.raises(ConfigError, match="datasets.alexnet.*'mnist' is not a dataset alexnet can train on"):
        validate_config({"datasets": {"alexnet": "mnist"}}, load_schema(SCHEMA))


def test_a_study_without_runs_is_an_error():
    config = {"frameworks": ["caffe"], "models": ["lenet"], "models_per_framework": {"caffe": ["resnet50"]}}
    with pytest.raises(ConfigError, match="models_per_framework.*no training run"):
        validate_config(config, load_schema(SCHEMA))


def test_wildcards_are_the_catalog_names():
    assert WILDCARD_CONSTRAINTS["framework"] == "|".join(catalog.FRAMEWORK_NAMES)
    assert WILDCARD_CONSTRAINTS["model"] == "|".join(catalog.MODEL_NAMES)


def _python_sources() -> list[Path]:
    roots = [REPO / "dlscale", REPO / "scripts", REPO / "benchmarks", REPO / "rules"]
    return [p for root in roots for p in root.rglob("*") if p.suffix in (".py", ".smk") and p.is_file()]


def test_no_other_module_lists_the_frameworks_or_models():
    """A literal naming every framework (or every model) outside the catalog is a second
    list: it would silently miss an entry added to the catalog. So is a second definition
    of a catalog fact such as the MNIST-sized models or the parameter counts."""
    offenders = []
    for path in _python_sources():
        if path.name == "catalog.py":
            continue
        text = path.read_text(encoding="utf-8")
        for kind, group in {"frameworks": catalog.FRAMEWORK_NAMES, "models": catalog.MODEL_NAMES}.items():
            name = "|".join(re.escape(n) for n in group)
            # A sequence of names (a runner's dict of model builders is its implementation
            # of each model, not a list: the runner tests check its keys are the catalog's).
            item = rf"[\"']({name})[\"']"
            literal = rf"[\(\[\{{]\s*{item}(\s*,\s*{item}){{{len(group) - 1},}}\s*,?\s*[\)\]\}}]"
            for match in re.finditer(literal, text):
                line = text.count("\n", 0, match.start()) + 1
                offenders.append(f"{path.relative_to(REPO)}:{line}: every {kind[:-1]} listed")
        for fact in ("MNIST_MODELS", "EXPECTED_PARAMETERS", "PARAMETERS"):
            for match in re.finditer(rf"^\s*{fact}\s*(:[^=]*)?=\s*[\(\[\{{]", text, re.M):
                line = text.count("\n", 0, match.start()) + 1
                offenders.append(f"{path.relative_to(REPO)}:{line}: {fact} defined again")
    assert offenders == []


def test_nothing_sets_the_import_path():
    """dlscale is installed into every venv: no script, rule or module puts it on sys.path."""
    hits = [
        f"{path.relative_to(REPO)}:{n}"
        for path in _python_sources()
        if path.parts[len(REPO.parts)] != "benchmarks"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "sys.path" in line
    ]
    assert hits == []


def test_the_site_check_imports_what_the_catalog_names():
    """The module that proves a framework's venv on a node is its catalog entry's (one
    list): the site check's table is read from it, and its venv check imports it."""
    assert sitecheck.IMPORTS == {fw.name: fw.venv_import for fw in catalog.FRAMEWORKS.values()}
    for fw in catalog.FRAMEWORKS.values():
        assert re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*", fw.venv_import), fw.name
        planned = dict(sitecheck.checks([fw.name], Path("/envs"), Path("/shared"), "python"))
        assert f"import {fw.venv_import}," in " ".join(planned[f"venv:{fw.name}"])
