"""``python -m dlscale.analysis RUNS_DIR --out DIR``: the aggregation on copied run folders."""

from dlscale.analysis.aggregate import main

raise SystemExit(main())
