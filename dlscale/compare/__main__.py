"""``python -m dlscale.compare BASE NEW --out DIR``: two studies, cell by cell."""

from dlscale.compare.comparison import main

raise SystemExit(main())
