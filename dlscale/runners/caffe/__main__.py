"""``python -m dlscale.runners.caffe``: one MPI rank of a Caffe training run.

Under mpirun, Open MPI tells each rank its place through ``OMPI_COMM_WORLD_*``; the
common harness reads placement from ``DLSCALE_*`` (local) or ``SLURM_*`` (srun), so the
Open MPI variables are translated first (see ``mpi_env``). Under srun SLURM's own
variables already describe the rank and nothing is translated.
"""

import os

from dlscale.runners.caffe.mpi_env import placement_env
from dlscale.runners.common import main

os.environ.update(placement_env(os.environ))

from dlscale.runners.caffe import train  # noqa: E402 - after the environment is complete

raise SystemExit(main(train))
