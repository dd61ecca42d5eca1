"""How the logs in this folder were captured (run in the caffe venv, Caffe on PYTHONPATH).

    GLOG_logtostderr=1 PYTHONPATH=<caffe home>/python:<repo> \
        .venvs/caffe/bin/python tests/data/caffe/capture.py <mnist shards> <caffe home> <out dir>

lenet_solver.log: pycaffe trains LeNet (batch 64, lr 0.01) on real MNIST with display: 5
for 30 iterations; lenet_time.log / alexnet_time.log: ``caffe time -iterations 3`` on the
generated nets at batch 64 / 4. The logs are Caffe's own output, unedited.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from dlscale.data.shards import ShardSet
from dlscale.runners.caffe.models import net_prototxt
from dlscale.runners.caffe.train import feed, make_solver, preprocess

shards_dir, home, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
env = {**os.environ, "GLOG_logtostderr": "1", "GLOG_minloglevel": "0", "OPENBLAS_NUM_THREADS": "1"}

# The solver log: this process's own stderr (glog) goes to the file.
solver_log = open(out / "lenet_solver.log", "w")
os.dup2(solver_log.fileno(), 2)
spec = {
    "model": "lenet",
    "learning_rate": 0.01,
    "momentum": 0.9,
    "warmup": 0,
    "iterations": 30,
    "seed": 1,
    "options": {"log_every": 5},
}
shards = ShardSet(shards_dir)
images, labels = shards.load_part(0, 1)
with tempfile.TemporaryDirectory() as tmp:
    solver = make_solver(spec, 64, Path(tmp))
for step in range(30):
    index = np.arange(step * 64, (step + 1) * 64)
    feed(
        solver.net,
        preprocess(images[index], "lenet", shards.mean, shards.std),
        labels[index].astype(np.float32),
    )
    solver.step(1)

for model, batch in (("lenet", 64), ("alexnet", 4)):
    with tempfile.NamedTemporaryFile("w", suffix=".prototxt") as net:
        net.write(net_prototxt(model, batch))
        net.flush()
        with open(out / f"{model}_time.log", "w") as log:
            subprocess.run(
                [str(home / "build/tools/caffe"), "time", f"-model={net.name}", "-iterations=3"],
                stderr=log,
                stdout=log,
                env=env,
                check=True,
            )
