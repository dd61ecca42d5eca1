"""``python -m dlscale.runners.torch``: one rank of a PyTorch training run.

The rank exits without the interpreter's teardown once its end is written: gloo's native
destructors could abort there after a whole run (``common.exit_skipping_teardown``).
"""

from dlscale.runners.common import exit_skipping_teardown, main
from dlscale.runners.torch import train

exit_skipping_teardown(main(train))
