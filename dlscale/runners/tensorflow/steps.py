"""The pieces of one training step in TensorFlow: settings, loss, gradient, SGD update.

Shared by both distributed modes so that they do the same arithmetic as the torch runner:
- the loss is the mean cross-entropy over the batch (sigmoid cross-entropy against the
  pixels for the autoencoder), as torch's CrossEntropyLoss / BCEWithLogitsLoss;
- the update is torch's SGD with momentum (``buf = momentum * buf + grad``,
  ``param -= lr * buf``), written out on plain variables. Keras' optimizer is not used:
  its distributed-update path differs between strategies, and the study needs the same
  update in every framework and mode.
Tensorflow is imported by the caller (``train.py``) and passed in, never at import time.
"""

from __future__ import annotations

import os
from typing import Any

ENV_INTRA = "DLSCALE_TF_INTRA_OP_THREADS"
ENV_INTER = "DLSCALE_TF_INTER_OP_THREADS"
_configured: dict[str, int] = {}


def thread_settings(env: dict[str, str] | None = None) -> dict[str, int]:
    """Intra/inter-op pool sizes the plan chose (explicit, never TensorFlow's guess)."""
    env = dict(os.environ) if env is None else env
    return {"intra_op": int(env.get(ENV_INTRA, "1")), "inter_op": int(env.get(ENV_INTER, "2"))}


def configure(tf: Any) -> dict[str, int]:
    """Apply the thread settings once, before TensorFlow's runtime starts; return them.

    TensorFlow fixes its pools when the first op runs, so this is called from
    ``versions()`` (the first thing a rank does) and again, harmlessly, from ``train``.
    """
    if not _configured:
        settings = thread_settings()
        tf.config.threading.set_intra_op_parallelism_threads(settings["intra_op"])
        tf.config.threading.set_inter_op_parallelism_threads(settings["inter_op"])
        _configured.update(settings)
    return dict(_configured)


def loss_function(tf: Any, model_name: str) -> Any:
    """``loss(logits, x, y)``: the batch-mean loss of the model's task."""
    if model_name == "autoencoder":

        def reconstruction(logits: Any, x: Any, y: Any) -> Any:
            target = tf.reshape(x, [tf.shape(x)[0], -1])
            return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=logits))

        return reconstruction

    def classification(logits: Any, x: Any, y: Any) -> Any:
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    return classification


def normalise_graph(tf: Any, images: Any, model_name: str, mean: float, std: float) -> Any:
    """``batches.normalise`` inside a graph (ps mode: uint8 travels, the worker converts)."""
    x = tf.cast(images, tf.float32) / 255.0
    if model_name == "autoencoder":
        return x
    return (x - mean) / std


class SGD:
    """torch.optim.SGD(momentum) on a list of variables; slots made under the active scope.

    One ``ResourceApplyMomentum`` per variable (``accum = momentum * accum + grad;
    var -= lr * accum``, torch's rule exactly). The op runs where the variable lives: on a
    parameter server in ps mode, so a worker pushes its gradient once and the update
    happens on the server, as TensorFlow's MomentumOptimizer did in 2018.
    """

    def __init__(self, tf: Any, variables: list[Any], lr: float, momentum: float):
        self.tf = tf
        self.variables = variables
        self.momentum = momentum
        self.slots = [
            tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"momentum_{i}")
            for i, v in enumerate(variables)
        ]
        # A variable, not a constant, so that a compiled step reads the rate of the moment
        # (a warm-up ramp sets it between steps: ``set_rate``).
        self.lr = tf.Variable(lr, trainable=False, dtype=tf.float32, name="learning_rate")

    def set_rate(self, lr: float) -> None:
        """The rate of the next steps (outside any compiled step)."""
        self.lr.assign(lr)

    def apply(self, grads: list[Any]) -> None:
        tf = self.tf
        for var, slot, grad in zip(self.variables, self.slots, grads, strict=True):
            tf.raw_ops.ResourceApplyMomentum(
                var=var.handle, accum=slot.handle, lr=tf.cast(self.lr, var.dtype),
                grad=grad, momentum=tf.constant(self.momentum, var.dtype), use_nesterov=False,
            )  # fmt: skip


def flatten(tf: Any, tensors: list[Any]) -> Any:
    """One flat float32 vector of all tensors (one collective moves the whole gradient)."""
    return tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)


def unflatten(tf: Any, flat: Any, like: list[Any]) -> list[Any]:
    sizes = [size_of(v.shape) for v in like]
    parts = tf.split(flat, sizes)
    return [tf.reshape(p, v.shape) for p, v in zip(parts, like, strict=True)]


def size_of(shape: Any) -> int:
    """Elements of a tensor shape (a TensorShape, a Keras tuple or a list)."""
    size = 1
    for dim in shape:
        size *= int(dim)
    return size


def sum_all_reduce(tf: Any, strategy: Any, spec: Any) -> Any:
    """A compiled MultiWorkerMirroredStrategy sum all-reduce of one tensor of ``spec``.

    What the mwms runner synchronises its flat gradient with, and what the communication
    micro-benchmarks (dlscale.commbench.tensorflow) time: the same call, so the model is
    calibrated on the operation the runs perform.
    """

    @tf.function(input_signature=[spec])
    def all_reduce(t: Any) -> Any:
        def replica(value: Any) -> Any:
            # identity places the input on this replica's device: a graph input has
            # none, and the collective needs one to know where the result goes.
            value = tf.identity(value)
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, value)

        return strategy.run(replica, args=(t,))

    return all_reduce
