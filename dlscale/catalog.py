"""The only list of frameworks and models: what each is, and what the rest needs to know.

Everything that names a framework or a model reads it here: the config schema's enums
(filled in by ``dlscale.study.validation.load_schema``), the training rule's wildcard constraint and
extra inputs, the figures' order and labels, the scaling model's synchronisation patterns,
the benchmarks and the tests. Adding a framework is one catalog entry, one runner folder
(``dlscale/runners/<name>/``, its files and modules as ``dlscale.runners.contract`` states
them) and one requirements file (``envs/<name>.txt``); ``tests/unit/test_catalog.py`` fails when
any of them is missing.

Standard library only: Snakemake imports this when it builds the DAG.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

#: Synchronisation patterns the scaling model knows (dlscale.perfmodel).
RING, PS, BIGDL = "ring", "ps", "bigdl"
PATTERNS = (RING, PS, BIGDL)

RUNNERS_DIR = Path(__file__).resolve().parent / "runners"
REPO_DIR = Path(__file__).resolve().parent.parent
#: The study config's JSON schema (defaults filled by validation): the workflow, the archive,
#: the benchmarks and the tests read it from here.
CONFIG_SCHEMA = REPO_DIR / "schemas" / "config.schema.yaml"


@dataclass(frozen=True)
class Framework:
    """One framework of the study and how the workflow runs it."""

    name: str
    #: Name in figures and the report.
    label: str
    #: Gradient synchronisation pattern of each set-up, for the scaling model: the
    #: framework itself under its name, and variants (TensorFlow's parameter servers) as
    #: ``<name>-<variant>`` -> pattern. Keys are the set-ups ``perfmodel.setup_of`` returns.
    setups: Mapping[str, str]
    #: The module whose import proves the framework's venv works on a node (the first its
    #: runner needs; Caffe's is mpi4py, its runs' transport): ``dlscale.host.sitecheck``'s venv check.
    venv_import: str
    #: The communication library of each set-up (``setups``' keys), as its micro-benchmark
    #: rows name it (``dlscale.commbench``; the scaling model fits each library's costs).
    libraries: Mapping[str, str]
    #: What a run needs besides its venv and data, by the name of the rule output in
    #: rules/envs.smk's EXTRA_INPUTS (``caffe``: the Caffe build; ``java``: a Java runtime for Spark).
    #: The training rule passes each to the launcher as ``DLSCALE_<NAME>_MARKER``.
    extra_inputs: tuple[str, ...] = ()
    #: Set-ups whose optimisation differs from the reference on purpose (the parity check
    #: measures it; the runs table and the report name it): set-up -> what differs.
    differences: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def env(self) -> str:
        """The virtual environment (``.venvs/<env>``) and requirements (``envs/<env>.txt``)."""
        return self.name

    @property
    def options_key(self) -> str:
        """The config key of this framework's options (schema in the runner folder)."""
        return self.name

    @property
    def launcher(self) -> str:
        """The module that plans and describes a run (``dlscale.runners.contract.Launcher``)."""
        return f"dlscale.runners.{self.name}.launcher"

    @property
    def runner_dir(self) -> Path:
        return RUNNERS_DIR / self.name

    @property
    def options_schema(self) -> Path:
        return self.runner_dir / "options.schema.json"

    @property
    def requirements(self) -> Path:
        return REPO_DIR / "envs" / f"{self.env}.txt"


@dataclass(frozen=True)
class Model:
    """One model of the study: the same architecture in every framework."""

    name: str
    label: str
    #: Learnable parameters (every runner's count is tested equal to this).
    parameters: int
    #: Datasets it can train on; the first is the default.
    datasets: tuple[str, ...]
    #: Per-model defaults of the study config (filled in by dlscale.study.matrix).
    batch_per_rank: int
    iterations: int
    learning_rate: float = 0.01
    #: Has convolutions, so 4-D weights and activations that a memory format (channels_last)
    #: lays out; a model of fully connected layers alone has none, and such a setting
    #: computes for it exactly as the default does (the tuning grid leaves it out for it).
    convolutional: bool = True

    @property
    def mnist_sized(self) -> bool:
        """Trains on 28x28 greyscale digits (MNIST or Fashion-MNIST), not ImageNet crops."""
        return "imagenet" not in self.datasets


FRAMEWORKS: Mapping[str, Framework] = MappingProxyType(
    {
        fw.name: fw
        for fw in (
            Framework("torch", "PyTorch", {"torch": RING}, venv_import="torch", libraries={"torch": "gloo"}),
            Framework(
                "tensorflow",
                "TensorFlow",
                # MultiWorkerMirroredStrategy with CommunicationImplementation.RING; ps mode.
                {"tensorflow": RING, "tensorflow-ps": PS},
                venv_import="tensorflow",
                libraries={"tensorflow": "tf-ring", "tensorflow-ps": "tf-ps"},
                differences=MappingProxyType(
                    {
                        "tensorflow-ps": "asynchronous updates: parameter servers apply each worker's gradient as it arrives"
                    }
                ),
            ),
            Framework(
                "bigdl",
                "BigDL",
                {"bigdl": BIGDL},
                venv_import="bigdl.dllib",
                libraries={"bigdl": "spark"},
                extra_inputs=("java",),
                differences=MappingProxyType(
                    {
                        "bigdl": "FP16 parameter exchange (AllReduceParameter's FP16CompressedTensor) and"
                        " batches drawn by its own optimizer from an RDD"
                    }
                ),
            ),
            Framework(
                "caffe",
                "Caffe",
                {"caffe": RING},
                venv_import="mpi4py",
                libraries={"caffe": "mpi"},
                extra_inputs=("caffe",),
            ),
            # psum of the gradients inside a jitted step over gloo: an all-reduce, as torch's.
            Framework("jax", "JAX", {"jax": RING}, venv_import="jax", libraries={"jax": "jax-gloo"}),
        )
    }
)

MODELS: Mapping[str, Model] = MappingProxyType(
    {
        m.name: m
        for m in (
            Model("lenet", "LeNet", 431_080, ("mnist", "fashion-mnist"), batch_per_rank=64, iterations=100),
            Model("autoencoder", "AutoEncoder", 2_837_314, ("mnist", "fashion-mnist"), batch_per_rank=64, iterations=100, convolutional=False),
            Model("alexnet", "AlexNet", 61_100_840, ("imagenet",), batch_per_rank=16, iterations=12),
            Model("resnet50", "ResNet-50", 25_557_032, ("imagenet",), batch_per_rank=8, iterations=8),
        )
    }
)  # fmt: skip

FRAMEWORK_NAMES: tuple[str, ...] = tuple(FRAMEWORKS)
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)
MNIST_MODELS: tuple[str, ...] = tuple(m.name for m in MODELS.values() if m.mnist_sized)
DATASETS: tuple[str, ...] = tuple(dict.fromkeys(d for m in MODELS.values() for d in m.datasets))
#: Learnable parameters per model.
PARAMETERS: Mapping[str, int] = MappingProxyType({m.name: m.parameters for m in MODELS.values()})
#: The framework whose semantics are the reference of the parity check (every other
#: framework's first losses are compared with its 1-rank run of the same global batch).
PARITY_REFERENCE = "torch"
#: Losses the parity check compares per run: the first iterations (float32 differences
#: grow chaotically after them).
PARITY_ITERATIONS = 20
#: Set-ups whose optimisation differs from the reference by design -> what differs.
DIFFERENCES: Mapping[str, str] = MappingProxyType(
    {setup: text for fw in FRAMEWORKS.values() for setup, text in fw.differences.items()}
)
#: Every set-up -> its communication library (``Framework.libraries``).
SETUP_LIBRARIES: Mapping[str, str] = MappingProxyType(
    {setup: library for fw in FRAMEWORKS.values() for setup, library in fw.libraries.items()}
)
#: Every set-up the scaling model knows -> its synchronisation pattern.
SETUP_PATTERNS: Mapping[str, str] = MappingProxyType(
    {setup: pattern for fw in FRAMEWORKS.values() for setup, pattern in fw.setups.items()}
)


def framework(name: str) -> Framework:
    """The catalog entry of a framework, or a KeyError that lists the known ones."""
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise KeyError(f"unknown framework {name!r} (known: {', '.join(FRAMEWORK_NAMES)})") from None


def model(name: str) -> Model:
    """The catalog entry of a model, or a KeyError that lists the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r} (known: {', '.join(MODEL_NAMES)})") from None
