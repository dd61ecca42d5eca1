"""dlscale: comparative benchmarking of distributed deep-learning frameworks on CPU clusters.

The package holds all logic; Snakemake rules only orchestrate it. Modules imported at DAG
time (study, events, placement, analysis) must never import a deep-learning framework.
"""

__version__ = "0.1.0"
