"""A study's quality settings fail before any job when they cannot be met (dlscale.study.matrix):
each message names the key and says why."""

from __future__ import annotations

import pytest

from dlscale.study.validation import ConfigError, validate_config

LENET_TARGET = {"quality_target": {"lenet": {"metric": "top1", "value": 0.9}}, "eval_every": 10}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {
                "models": ["lenet"],
                "quality_target": {"lenet": {"metric": "mse", "value": 0.1}},
                "eval_every": 5,
            },
            r"'quality_target.lenet.metric': 'mse' is not a metric lenet is evaluated with \(top1\)",
        ),
        (
            {
                "models": ["lenet"],
                "quality_target": {"lenet": {"metric": "top1", "value": 1.5}},
                "eval_every": 5,
            },
            r"'quality_target.lenet.value': 1.5 is above 1",
        ),
        (
            {"models": ["lenet"], "quality_target": {"lenet": {"metric": "top1", "value": 0.9}}},
            r"'eval_every': 0 with a quality_target for lenet",
        ),
        (
            {"models": ["lenet"], "max_iterations": {"lenet": 100}},
            r"'max_iterations.lenet': lenet has no quality_target",
        ),
        (
            {"models": ["alexnet"], "init": "shared"},
            r"'init': shared has no initialisation for alexnet",
        ),
        (
            {
                "models": ["alexnet"],
                "quality_target": {"alexnet": {"metric": "top1", "value": 0.5}},
                "eval_every": 5,
            },
            r"'quality_target.alexnet': the synthetic ImageNet's held-out labels are random",
        ),
    ],
)
def test_quality_settings_that_cannot_be_met_are_refused(schema, config, message):
    with pytest.raises(ConfigError, match=message):
        validate_config({"frameworks": ["torch"], **config}, schema)


def test_a_target_on_real_imagenet_without_a_heldout_split_is_refused(schema, tmp_path):
    (tmp_path / "train" / "n01").mkdir(parents=True)
    config = {
        "frameworks": ["torch"],
        "models": ["resnet50"],
        "data": {"imagenet": {"source": str(tmp_path)}},
        "quality_target": {"resnet50": {"metric": "top5", "value": 0.5}},
        "eval_every": 5,
    }
    with pytest.raises(
        ConfigError, match=r"'quality_target.resnet50': ImageNet from .* has no held-out split"
    ):
        validate_config(config, schema, tmp_path)


def test_a_target_for_a_model_the_study_does_not_run_is_harmless(schema):
    study = validate_config({"frameworks": ["torch"], "models": ["lenet"], **LENET_TARGET,
                             "quality_target": {**LENET_TARGET["quality_target"],
                                                "alexnet": {"metric": "top1", "value": 0.5}}}, schema)  # fmt: skip
    assert set(study["quality_target"]) == {"lenet", "alexnet"}
