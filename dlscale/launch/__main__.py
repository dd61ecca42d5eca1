"""``python -m dlscale.launch``: what the training rule runs (see ``dlscale.launch.run``)."""

import sys

from dlscale.launch.run import main

sys.exit(main())
