"""Config validation, defaults and the run matrix (dlscale.study.matrix)."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dlscale.study.matrix import Run, expand_runs, run_spec
from dlscale.study.validation import ConfigError, validate_config


def test_default_config_is_valid(repo, schema):
    config = yaml.safe_load((repo / "config.yaml").read_text())
    study = validate_config(config, schema, repo)
    from dlscale import catalog

    # The seed's three and PyTorch; a framework added to the catalog joins the demo only
    # where the demo's time budget allows it (JAX runs in studies/five-frameworks-lenet.yaml).
    assert {"torch", "tensorflow", "bigdl", "caffe"} <= set(study["frameworks"])
    assert set(study["frameworks"]) <= set(catalog.FRAMEWORK_NAMES)
    assert study["repeats"] >= 3  # cells get intervals


def test_every_study_file_is_valid(repo, schema, tmp_path):
    for path in sorted((repo / "studies").glob("*.yaml")) + [repo / "profiles" / "tianhe" / "study.yaml"]:
        config = yaml.safe_load(path.read_text())
        base = repo
        pooled = config.get("projection", {}).get("pool_studies", [])
        if pooled:
            # a study that pools others runs in a working directory of its own, beside
            # theirs, once they have run: stand-ins of their aggregated tables
            base = tmp_path / path.stem / "work"
            for other in pooled:
                results = base / other / "results"
                results.mkdir(parents=True)
                for name in ("runs", "iterations"):
                    (results / f"{name}.parquet").write_bytes(b"")
        validate_config(config, schema, base)


def test_empty_config_gets_every_default(schema):
    study = validate_config({}, schema)
    assert study["nodes"] == [1, 2]
    assert study["batch_per_rank"] == {"lenet": 64, "autoencoder": 64, "alexnet": 16, "resnet50": 8}
    assert study["data"]["imagenet"]["source"] == "synthetic"
    assert study["torch"]["channels_last"] is True
    assert study["scaling"] == "weak"


def test_validation_does_not_mutate_input(schema):
    config = {"nodes": [1]}
    validate_config(config, schema)
    assert config == {"nodes": [1]}


@pytest.mark.parametrize(
    ("config", "key", "value"),
    [
        ({"frameworks": ["caffee"]}, "frameworks[0]", "caffee"),
        ({"models": ["vgg"]}, "models[0]", "vgg"),
        ({"nodes": [0]}, "nodes[0]", "0"),
        ({"nodes": []}, "nodes", "[]"),
        ({"ranks_per_node": "two"}, "ranks_per_node", "two"),
        ({"batch_per_rank": {"lenet": -1}}, "batch_per_rank.lenet", "-1"),
        ({"scaling": "linear"}, "scaling", "linear"),
    ],
)
def test_bad_values_name_key_and_value(schema, config, key, value):
    with pytest.raises(ConfigError) as err:
        validate_config(config, schema)
    message = str(err.value)
    assert f"'{key}'" in message
    assert value in message


def test_unknown_key_is_named(schema):
    with pytest.raises(ConfigError, match=r"'batch_per_rank\.lenett' is not a known key"):
        validate_config({"batch_per_rank": {"lenett": 3}}, schema)
    with pytest.raises(ConfigError, match=r"'node' is not a known key"):
        validate_config({"node": [1]}, schema)


def test_strong_scaling_batch_must_divide_world(schema):
    config = {"scaling": "strong", "models": ["lenet"], "nodes": [1, 3], "global_batch": {"lenet": 64}}
    with pytest.raises(ConfigError, match=r"'global_batch.lenet': 64 is not divisible by the world size 3"):
        validate_config(config, schema)


def test_strong_scaling_divides_global_batch(schema):
    study = validate_config(
        {"scaling": "strong", "models": ["lenet"], "nodes": [1, 2, 4], "global_batch": {"lenet": 64}}, schema
    )
    assert [r.batch for r in expand_runs(study)] == [64, 32, 16]


def test_missing_dataset_directory_is_named(schema, tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match=r"'data.mnist.source'.*nowhere"):
        validate_config({"data": {"mnist": {"source": str(missing)}}}, schema)
    missing.mkdir()  # a folder is not yet a dataset (issue 46: /etc passed the dry run)
    with pytest.raises(
        ConfigError, match=r"'data.mnist.source'.*not a MNIST dataset: no train-images-idx3-ubyte"
    ):
        validate_config({"data": {"mnist": {"source": str(missing)}}}, schema)
    for name in (
        "train-images-idx3-ubyte.gz",
        "train-labels.idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (missing / name).write_bytes(b"")
    assert validate_config({"data": {"mnist": {"source": str(missing)}}}, schema)


def test_a_pooled_study_must_have_its_runs(schema, tmp_path):
    other = tmp_path / "validation-quiet"
    (other / "results").mkdir(parents=True)
    config = {"projection": {"pool_studies": ["validation-quiet"]}}
    with pytest.raises(ConfigError, match=r"'projection.pool_studies\[0\]'.*validation-quiet.*runs.parquet"):
        validate_config(config, schema, base_dir=tmp_path)
    (other / "results" / "runs.parquet").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"iterations.parquet"):
        validate_config(config, schema, base_dir=tmp_path)
    (other / "results" / "iterations.parquet").write_bytes(b"")
    assert validate_config(config, schema, base_dir=tmp_path)["projection"]["pool_studies"] == [
        "validation-quiet"
    ]


def test_unimplemented_framework_is_refused(schema, monkeypatch):
    import dlscale.study.validation

    monkeypatch.setattr(dlscale.study.validation, "IMPLEMENTED_FRAMEWORKS", ("torch",))
    with pytest.raises(ConfigError, match=r"'frameworks': 'bigdl' has no runner yet"):
        validate_config({"frameworks": ["torch", "bigdl"]}, schema)


def test_run_matrix_and_ids(schema):
    study = validate_config(
        {"models": ["lenet", "resnet50"], "nodes": [4, 1, 2], "ranks_per_node": 2, "repeats": 3}, schema
    )
    runs = expand_runs(study)
    assert len(runs) == 2 * 3 * 3
    assert len({r.run_id for r in runs}) == len(runs)
    first = runs[0]
    assert first.run_id == "torch/lenet/n1x2/b64/r0"
    assert first.world_size == 2
    assert Run.from_run_id(first.run_id) == first


@given(
    fw=st.sampled_from(["torch", "tensorflow"]),
    model=st.sampled_from(["lenet", "alexnet"]),
    nodes=st.integers(1, 4096),
    rpn=st.integers(1, 64),
    batch=st.integers(1, 10**6),
    repeat=st.integers(0, 99),
)
def test_run_id_round_trip(fw, model, nodes, rpn, batch, repeat):
    run = Run(fw, model, nodes, rpn, batch, repeat)
    assert Run.from_run_id(run.run_id) == run


def test_spec_changes_only_with_what_changes_the_run(schema):
    base = validate_config({"models": ["lenet"]}, schema)
    run = expand_runs(base)[0]
    other = copy.deepcopy(base)
    other["models"] = ["lenet", "alexnet"]  # adding a model must not invalidate lenet's runs
    assert run_spec(base, run).sha256 == run_spec(other, run).sha256
    other["iterations"]["lenet"] = 7
    assert run_spec(base, run).sha256 != run_spec(other, run).sha256


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["frameworks", "models", "nodes", "ranks_per_node", "scaling", "warmup", "bogus"]),
        st.one_of(st.integers(-3, 5), st.text(max_size=5), st.lists(st.integers(-1, 4), max_size=3)),
        max_size=4,
    )
)
def test_any_config_is_valid_or_a_clear_error(schema, config):
    try:
        study = validate_config(config, schema)
    except ConfigError as err:
        assert str(err).startswith("config key '")
    else:
        assert expand_runs(study)


def test_models_per_framework_restricts_one_framework(schema, monkeypatch):
    import dlscale.study.matrix

    monkeypatch.setattr(dlscale.study.matrix, "IMPLEMENTED_FRAMEWORKS", ("torch", "bigdl"))
    study = validate_config(
        {"frameworks": ["torch", "bigdl"], "models_per_framework": {"bigdl": ["lenet"]}, "nodes": [1]}, schema
    )
    runs = expand_runs(study)
    assert sorted(r.model for r in runs if r.framework == "bigdl") == ["lenet"]
    assert len([r for r in runs if r.framework == "torch"]) == 4
    with pytest.raises(ConfigError, match=r"'models_per_framework.bigdl\[0\]'"):
        validate_config({"models_per_framework": {"bigdl": ["vgg"]}}, schema)


def test_networks_multiply_the_matrix_and_mark_emulated_run_ids(schema, monkeypatch):
    from dlscale.host import netns

    monkeypatch.setattr(netns, "unavailable", lambda shaping=False: None)
    study = validate_config(
        {"frameworks": ["torch"], "models": ["lenet"], "network": ["host", "emulated-1gbe"]}, schema
    )
    runs = expand_runs(study)
    assert [r.run_id for r in runs] == [
        "torch/lenet/n1x1/b64/r0",
        "torch/lenet/n2x1/b64/r0",
        "torch/lenet/n1x1-1gbe/b64/r0",
        "torch/lenet/n2x1-1gbe/b64/r0",
    ]
    for run in runs:
        assert Run.from_run_id(run.run_id) == run
    host, emulated = run_spec(study, runs[1]), run_spec(study, runs[3])
    # The host network adds nothing to a spec, so adding the option redid no existing run.
    assert "network" not in host.to_dict() and emulated.to_dict()["network"] == "emulated-1gbe"
    assert (
        host.sha256
        == run_spec(validate_config({"frameworks": ["torch"], "models": ["lenet"]}, schema), runs[1]).sha256
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("emulated-5gbe", "config key 'network': 'emulated-5gbe' is not one of"),
        (["host", "x"], "config key 'network[1]': 'x' is not one of"),
        ("emulated-th-express2", "is not one of"),  # projection only: faster than this host
    ],
)
def test_bad_network_names_the_key(schema, value, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate_config({"network": value}, schema)


def test_emulated_network_without_root_fails_before_any_job(schema, monkeypatch):
    from dlscale.host import netns

    monkeypatch.setattr(netns, "unavailable", lambda shaping=False: "network namespaces need root (test)")
    with pytest.raises(ConfigError, match="config key 'network': 'emulated-1gbe' .* need root"):
        validate_config({"network": "emulated-1gbe"}, schema)
    validate_config({"network": "host"}, schema)  # the host network never needs it


def test_schema_lists_exactly_the_emulable_networks(schema):
    """The schema's names and dlscale.networks' presets are one list, kept in step."""
    from dlscale.networks import network_choices

    assert schema["$defs"]["network_name"]["enum"] == network_choices()


# --- hostile or careless configs (issue 17): each fails before any job, naming the key ---


@pytest.mark.parametrize(
    ("config", "key", "message"),
    [
        ({"nodes": [2.0]}, "nodes[0]", "2.0 is not of type 'integer'"),
        ({"repeats": 2.0}, "repeats", "2.0 is not an integer or 'auto'"),
        ({"repeats": True}, "repeats", "True is not an integer or 'auto'"),
        ({"learning_rate": {"lenet": float("nan")}}, "learning_rate.lenet", "nan is not a finite number"),
        ({"iterations": {"lenet": float("inf")}}, "iterations.lenet", "inf is not a finite number"),
        ({"iterations": {"lenet": 10**9}}, "iterations.lenet", "is greater than the maximum"),
        ({"nodes": [1, 2**21]}, "nodes[1]", "is greater than the maximum"),
        ({"run_timeout_min": 10**6}, "run_timeout_min", "is greater than the maximum"),
    ],
)
def test_numbers_are_what_they_claim(schema, config, key, message):
    with pytest.raises(ConfigError) as err:
        validate_config(config, schema)
    assert f"config key '{key}'" in str(err.value) and message in str(err.value)


def test_yaml_aliases_are_refused_before_they_expand(schema):
    """A billion-laughs document: nine levels of ten aliases each would be 10^9 values."""
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for level in range(1, 10):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]")
    lines.append("nodes: *a9")
    document = yaml.safe_load("\n".join(lines))
    config = {"nodes": document["nodes"]}
    with pytest.raises(ConfigError, match=r"config key 'nodes\[1\]': YAML aliases"):
        validate_config(config, schema)


def test_local_profile_refuses_more_threads_than_the_host_by_far(schema):
    from dlscale.study.validation import LOCAL_OVERSUBSCRIPTION, check_local_capacity

    study = validate_config({"nodes": [1, 100000]}, schema)
    with pytest.raises(ConfigError, match=r"config key 'nodes': the largest run \(100000 nodes"):
        check_local_capacity(study, cores=2)
    fits = validate_config({"nodes": [1, 2 * LOCAL_OVERSUBSCRIPTION]}, schema)
    check_local_capacity(fits, cores=2)  # 8 ranks on 2 cores: what the validation study runs


def test_a_local_study_too_big_for_the_host_fails_before_any_job(tmp_path, repo):
    import os
    import signal
    import subprocess
    import sys

    study = {
        "frameworks": ["torch"],
        "models": ["lenet"],
        "nodes": [1, 100000],
        "envs_dir": str(tmp_path / "envs"),
    }
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(repo / "Snakefile"),
        "--directory",
        str(tmp_path),
        "--configfile",
        str(tmp_path / "study.yaml"),
        "--cores",
        "2",
    ]
    # Its own session, so that a regression (jobs started after all) is stopped whole.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0
    assert "config key 'nodes': the largest run (100000 nodes" in output
    assert not (tmp_path / "envs").exists() and not (tmp_path / "results" / "runs").exists()


def test_a_study_of_zero_runs_is_an_error(schema):
    """models_per_framework naming only models outside ``models`` once gave zero training
    runs (and still scheduled the Caffe build): an error naming the key (issue 17)."""
    config = {
        "frameworks": ["torch", "caffe"],
        "models": ["lenet"],
        "models_per_framework": {"torch": ["alexnet"], "caffe": ["resnet50"]},
    }
    with pytest.raises(ConfigError, match=r"config key 'models_per_framework': no framework runs any"):
        validate_config(config, schema)
