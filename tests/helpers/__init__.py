"""What the tests share: plain modules imported as ``helpers.<name>`` (pyproject.toml puts
tests/ on the import path). Fixtures live in the conftest.py files, except the SLURM test
cluster's (``slurm_fixtures``: tests/conftest.py re-exports them, and a bare pytest session
loads them as a plugin, ``-p helpers.slurm_fixtures``).

- ``paths``: the repository, the venvs' folder, the config schema, the test cache, and each
  framework venv's python (built as the workflow builds it, once per machine);
- ``workflow``: Snakemake run as a user runs it, and the job counts of a dry run;
- ``events``: hand-written events files and events (iterations, runs, run_start/run_end);
- ``hostile_logs``: BigDL and Caffe log builders and the real captured logs they cut up;
- ``torch_runs``, ``tensorflow_runs``, ``caffe_runs``, ``bigdl_runs``: each runner's run
  spec and launch through ``dlscale.launch``, as the training rule launches it (and BigDL's
  daemon checks);
- ``faults``: the fault suite's launcher, fault injection and fault table;
- ``slurm_cluster``, ``slurm_fixtures``, ``slurm_jobs``: the SLURM test cluster, its
  session fixtures (re-exported by tests/conftest.py) and what tests do to its jobs.
"""
