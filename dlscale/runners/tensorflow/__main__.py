"""``python -m dlscale.runners.tensorflow``: one training process (an MWMS worker or the ps chief)."""

from dlscale.runners.common import main
from dlscale.runners.tensorflow import train

raise SystemExit(main(train))
