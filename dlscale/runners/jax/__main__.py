"""``python -m dlscale.runners.jax``: one rank of a JAX training run."""

from dlscale.runners.common import main
from dlscale.runners.jax import train

raise SystemExit(main(train))
