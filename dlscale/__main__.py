"""``python -m dlscale``: the ``dlscale`` command (its help without a subcommand)."""

from dlscale.cli import main

raise SystemExit(main())
