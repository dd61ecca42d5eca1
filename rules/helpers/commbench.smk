"""The communication micro-benchmarks' helpers (rules/commbench.smk, dlscale.commbench):
which jobs the study has, and each job's python, environment and arguments."""

from dlscale import catalog
from dlscale import commbench as dlcommbench
from dlscale import networks as dlnetworks

#: The study's micro-benchmark settings (defaults in the schema's ``commbench``).
COMMBENCH = STUDY["commbench"]
#: The study's frameworks that have a benchmark module, in the catalog's order, and the raw
#: TCP reference (a framework without one is calibrated on its host runs).
COMMBENCH_NAMES = [
    name
    for name in jobs.commbench_names(STUDY, dlcommbench.TCP)
    if dlcommbench.has_module(name)
]


def commbench_files():
    """Every micro-benchmark table of the study (none unless ``commbench.enabled``)."""
    return jobs.commbench_files(STUDY, COMMBENCH_NAMES)


def commbench_input(wildcards):
    """A framework's venv and what its runs need besides (``extra_inputs``: Caffe's
    micro-benchmarks run the Open MPI its build installs; a fresh machine's failed with
    "mpirun not found" when scheduled before it). The TCP reference needs only this python.
    """
    if wildcards.name not in catalog.FRAMEWORK_NAMES:
        return {}
    framework = catalog.framework(wildcards.name)
    return {"env": env_marker(framework.name), **extra_inputs(framework)}


def commbench_conda_env(wildcards):
    """A framework's conda env; the TCP reference runs in the workflow's."""
    name = wildcards.name if wildcards.name in catalog.FRAMEWORK_NAMES else "workflow"
    return os.path.join(workflow.basedir, "envs", f"{name}.yaml")


def commbench_python(wildcards):
    if wildcards.name in catalog.FRAMEWORK_NAMES:
        return env_python(wildcards.name)
    return "python" if USE_CONDA else sys.executable
