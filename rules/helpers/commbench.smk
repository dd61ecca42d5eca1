"""The communication micro-benchmarks' helpers (rules/commbench.smk, dlscale.commbench):
which jobs the study has, and each job's python, environment and arguments."""

from dlscale import catalog
from dlscale import commbench as dlcommbench
from dlscale import networks as dlnetworks

#: The study's micro-benchmark settings (defaults in the schema's ``commbench``).
COMMBENCH = STUDY["commbench"]
#: The study's frameworks in the catalog's order, and the raw TCP reference.
COMMBENCH_NAMES = jobs.commbench_names(STUDY, dlcommbench.TCP)


def commbench_files():
    """Every micro-benchmark table of the study (none unless ``commbench.enabled``)."""
    return jobs.commbench_files(STUDY, COMMBENCH_NAMES)


def commbench_input(wildcards):
    """A framework's venv and what its runs need besides (catalog ``extra_inputs``: Java
    for Spark; the Caffe build for Caffe, whose system step installs the Open MPI that
    Caffe's micro-benchmarks' mpirun is: without it a fresh machine's first Caffe
    micro-benchmark failed with "mpirun not found"). The TCP reference needs only this
    python."""
    if wildcards.name not in catalog.FRAMEWORK_NAMES:
        return {}
    framework = catalog.framework(wildcards.name)
    extra = {name: EXTRA_INPUTS[name] for name in framework.extra_inputs}
    return {"env": env_marker(framework.name), **extra}


def commbench_conda_env(wildcards):
    """A framework's conda env; the TCP reference runs in the workflow's."""
    name = wildcards.name if wildcards.name in catalog.FRAMEWORK_NAMES else "workflow"
    return os.path.join(workflow.basedir, "envs", f"{name}.yaml")


def commbench_python(wildcards):
    if wildcards.name in catalog.FRAMEWORK_NAMES:
        return env_python(wildcards.name)
    return "python" if USE_CONDA else sys.executable
