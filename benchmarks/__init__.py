"""dlscale's performance benchmarks (``make bench`` / ``python -m benchmarks``).

Every figure here is a ratio of two things measured side by side in one run (A/B
alternated, so that a noisy neighbour on a shared node hurts both arms alike), reported as
the median with its interval over repeats (``dlscale.analysis.stats``). Benchmarks report; tests
never assert timings.

Modules with one job each: ``stats`` (summaries over repeats and verdicts, on
``dlscale.analysis.stats`` and ``dlscale.thresholds``), ``timing`` (the workers' loop arithmetic,
standard library), ``common`` (driver-side helpers and
``FrameworkBench``, what a framework plugs in), ``<framework>_bench`` (each framework's
entry, declared in its own module), ``registry`` (collects the entries by the catalog's
framework names), ``harness_overhead`` / ``compute_efficiency`` / ``comm_efficiency`` /
``workflow_scale`` / ``startup`` (one benchmark each, one csv each), ``summary`` and
``figures`` (the markdown summary and charts). What runs inside a framework's own venv
(``<framework>_worker``; one command line for all: ``worker_cli``) imports nothing from
the workflow venv. Communication is timed by ``dlscale.commbench``'s modules, the scaling
model's micro-benchmarks, in each framework's venv. Importing this package imports no
framework.
"""
