"""``python -m dlscale.runners.bigdl``: the driver of a BigDL training run."""

from dlscale.runners.bigdl import train
from dlscale.runners.common import main

raise SystemExit(main(train))
