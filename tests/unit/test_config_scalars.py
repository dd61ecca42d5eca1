"""One value for every model (issue 33, item 7): ``iterations: 30`` as well as a map.

The per-model keys that take one value are the schema's (``dlscale.study.validation.per_model_keys``);
the value becomes the map of every model before defaults are filled, so the runs, their
ids and their spec hashes are those of the same map written out.
"""

from __future__ import annotations

import pytest

from dlscale import catalog
from dlscale.study.matrix import expand_runs, run_spec
from dlscale.study.validation import ConfigError, per_model_keys, validate_config

#: The keys that take one value for every model, and one such value of each.
ONE_VALUE = {"batch_per_rank": 32, "global_batch": 64, "iterations": 30, "learning_rate": 0.05}


def test_the_schema_names_the_keys_that_take_one_value(schema):
    """datasets and quality_target stay maps: no dataset or target fits every model; a
    learning-rate rule (an object) may be one for every model."""
    assert set(per_model_keys(schema)) == {*ONE_VALUE, "max_iterations", "lr_scaling"}


def test_the_one_value_and_the_map_are_bounded_alike(schema):
    """The one value's schema is the map's value schema (one set of bounds per key)."""
    for key, one in per_model_keys(schema).items():
        branches = schema["properties"][key]["oneOf"]
        (mapping,) = [b for b in branches if b is not one]
        assert mapping["additionalProperties"] == one, key


@pytest.mark.parametrize(("key", "value"), ONE_VALUE.items())
def test_one_value_is_every_models(schema, key, value):
    study = validate_config({key: value}, schema)
    assert study[key] == dict.fromkeys(catalog.MODEL_NAMES, value)


@pytest.mark.parametrize(("key", "value"), ONE_VALUE.items())
def test_one_value_gives_the_runs_and_hashes_of_the_map_written_out(schema, key, value):
    base = {"models": ["lenet", "autoencoder"], "nodes": [1, 2]}
    if key == "global_batch":
        base["scaling"] = "strong"
    one = validate_config({**base, key: value}, schema)
    spelled = validate_config({**base, key: dict.fromkeys(catalog.MODEL_NAMES, value)}, schema)
    assert one == spelled
    runs = expand_runs(one)
    assert [r.run_id for r in runs] == [r.run_id for r in expand_runs(spelled)]
    assert [run_spec(one, r).sha256 for r in runs] == [run_spec(spelled, r).sha256 for r in runs]


def test_a_map_is_read_as_before(schema):
    """A partial map keeps the other models' catalog defaults (unchanged behaviour)."""
    study = validate_config({"iterations": {"lenet": 7}}, schema)
    assert study["iterations"] == {
        **{m.name: m.iterations for m in catalog.MODELS.values()},
        "lenet": 7,
    }


def test_max_iterations_is_every_targeted_models(schema):
    target = {"lenet": {"metric": "top1", "value": 0.5}}
    study = validate_config({"quality_target": target, "eval_every": 5, "max_iterations": 500}, schema)
    assert study["max_iterations"] == {"lenet": 500}
    lenet = next(r for r in expand_runs(study) if r.model == "lenet")
    assert run_spec(study, lenet).max_iterations == 500
    with pytest.raises(ConfigError, match=r"config key 'max_iterations': 500 .* no model has one"):
        validate_config({"max_iterations": 500}, schema)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"iterations": -1}, "config key 'iterations': -1 is less than the minimum of 1"),
        ({"iterations": 0}, "config key 'iterations': 0 is less than the minimum of 1"),
        ({"iterations": 10**9}, "config key 'iterations': 1000000000 is greater than the maximum"),
        ({"iterations": 30.0}, "config key 'iterations': 30.0 is not an integer or a mapping"),
        ({"iterations": True}, "config key 'iterations': True is not an integer or a mapping"),
        ({"iterations": "30"}, "config key 'iterations': '30' is not an integer or a mapping"),
        ({"batch_per_rank": [32]}, "config key 'batch_per_rank': [32] is not an integer or a mapping"),
        ({"learning_rate": -0.1}, "config key 'learning_rate': -0.1 is less than the minimum of 0"),
        ({"learning_rate": float("nan")}, "config key 'learning_rate': nan is not a finite number"),
        ({"iterations": {"lenet": -1}}, "config key 'iterations.lenet': -1 is less than the minimum of 1"),
        (
            {"iterations": {"lenett": 3}},
            "config key 'iterations.lenett' is not a known key (known here: lenet",
        ),
    ],
)
def test_a_bad_value_names_the_key_and_the_value(schema, config, message):
    with pytest.raises(ConfigError) as err:
        validate_config(config, schema)
    assert message in str(err.value)
