"""dlscale: comparative benchmarking of distributed deep-learning frameworks on CPU clusters.

The package holds all logic; Snakemake rules only orchestrate it. What the workflow imports
while it plans (the top-level tables such as catalog, outputs and runid, and dlscale.study)
must never import a deep-learning framework: the runners import theirs in their own venvs.
"""

__version__ = "0.1.0"
