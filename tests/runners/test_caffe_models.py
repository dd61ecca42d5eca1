"""The Caffe nets: generated prototxt, loaded by real pycaffe, same architectures as torch.

The prototxt tests need no Caffe; the parameter-count and shape tests load every net in
the caffe venv with the Caffe build (made once per machine by scripts/build_caffe.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dlscale import catalog
from dlscale.runners.caffe import models
from dlscale.runners.caffe.launcher import caffe_env, caffe_home


def test_prototxt_text_format():
    text = models.to_prototxt(
        {"name": 'a"b', "layer": [{"pool": models.Enum("MAX"), "flag": True, "dim": [1, 2], "lr": 0.5}]}
    )
    assert text == 'name: "a\\"b"\nlayer {\n  pool: MAX\n  flag: true\n  dim: 1\n  dim: 2\n  lr: 0.5\n}'


@pytest.mark.parametrize("model", catalog.MODEL_NAMES)
def test_nets_have_unique_layers_and_one_loss(model):
    text = models.net_prototxt(model, 4)
    types = models.layer_types(model)
    assert list(types)[0] == "data" and types["data"] == "Input"
    assert list(types.values()).count("Input") == 1
    assert list(types)[-1] == "loss" and types["loss"].endswith("Loss")
    assert text.count("layer {") == len(types)  # names are unique
    assert "dim: 4" in text


def test_cli_prints_a_net_and_rejects_bad_arguments():
    run = [sys.executable, "-m", "dlscale.runners.caffe.models"]
    env = dict(os.environ)
    out = subprocess.run([*run, "lenet", "64"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith('name: "LeNet"')
    bad = subprocess.run([*run, "vgg", "64"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr


PROBE = r"""
import json, sys, tempfile, os
import caffe
from dlscale import catalog
from dlscale.runners.caffe import models
caffe.set_mode_cpu()
out = {}
for model in catalog.MODEL_NAMES:
    with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as handle:
        handle.write(models.net_prototxt(model, 2))
    net = caffe.Net(handle.name, caffe.TRAIN)
    os.unlink(handle.name)
    out[model] = {
        "parameters": models.parameter_count(net),
        "all_blobs": sum(int(b.count) for params in net.params.values() for b in params),
        "shapes": {name: list(blob.data.shape) for name, blob in net.blobs.items()},
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def loaded_nets(caffe_py):
    home = caffe_home({}, os.environ, str(caffe_py))
    env = {**os.environ, **caffe_env(home, {}), "GLOG_minloglevel": "2"}
    out = subprocess.run([str(caffe_py), "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_parameter_counts_match_torch(loaded_nets):
    """Same architectures as the torch runner: learnable parameters equal, exactly."""
    counts = {model: info["parameters"] for model, info in loaded_nets.items()}
    assert counts == dict(catalog.PARAMETERS)
    # The only difference: Caffe keeps BatchNorm's running mean and variance (2 x channels)
    # and a scale factor (1) as blobs of the BatchNorm layer; torch keeps them as buffers.
    bn_channels = 64 + sum(
        planes * (2 + 4) + (planes * 4 if first else 0)
        for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3))
        for first in [True] + [False] * (blocks - 1)
    )
    bn_layers = 1 + 4 + 3 * 16
    assert loaded_nets["resnet50"]["all_blobs"] - counts["resnet50"] == 2 * bn_channels + bn_layers
    for model in ("lenet", "autoencoder", "alexnet"):
        assert loaded_nets[model]["all_blobs"] == counts[model]


def test_feature_maps_match_torch(loaded_nets):
    """Caffe rounds pooled sizes up: the nets are laid out so that the maps equal torch's."""
    alex, resnet = loaded_nets["alexnet"]["shapes"], loaded_nets["resnet50"]["shapes"]
    assert alex["conv1"] == [2, 64, 55, 55] and alex["pool5"] == [2, 256, 6, 6]
    assert resnet["pool1"] == [2, 64, 56, 56]  # torch: 3x3/2 pad 1, floor -> 56
    assert resnet["res3a"] == [2, 512, 28, 28] and resnet["res5c"] == [2, 2048, 7, 7]
    assert resnet["pool5"] == [2, 2048, 1, 1] and resnet["fc1000"] == [2, 1000]
    assert loaded_nets["lenet"]["shapes"]["pool2"] == [2, 50, 4, 4]
    assert loaded_nets["autoencoder"]["shapes"]["encode4"] == [2, 30]
