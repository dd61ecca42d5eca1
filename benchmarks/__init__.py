"""dlscale's performance benchmarks (``make bench`` / ``python -m benchmarks``).

Every figure here is a ratio of two things measured side by side in one run (A/B
alternated, so that a noisy neighbour on a shared node hurts both arms alike), reported as
the median with min/max over repeats. Benchmarks report; tests never assert timings.

Modules with one job each: ``stats`` (pure arithmetic), ``registry`` (what each framework
plugs in), ``harness_overhead`` / ``compute_efficiency`` / ``comm_efficiency`` /
``workflow_scale`` / ``startup`` (one benchmark each, one csv each), ``summary`` and
``figures`` (the markdown summary and charts). Worker scripts that run inside a framework's
own venv (``torch_worker``, ``mpi_allreduce``) and the plain TCP stream (``tcp_stream``)
import nothing from the workflow venv. Importing this package imports no framework.
"""
