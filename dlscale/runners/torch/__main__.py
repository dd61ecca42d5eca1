"""``python -m dlscale.runners.torch``: one rank of a PyTorch training run."""

from dlscale.runners.common import main
from dlscale.runners.torch import train

raise SystemExit(main(train))
