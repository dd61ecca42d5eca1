"""Start, watch, record and retry one training run's ranks (``python -m dlscale.launch``).

The training rule calls ``python -m dlscale.launch``. It starts the run's ranks (locally:
n x p processes on this host, each told its place through ``DLSCALE_*`` variables, the way
srun tells ranks through ``SLURM_*``), watches them, and when one dies stops the others
instead of letting them hang in a collective. Whatever happens, it merges the ranks' part
files into ``events.jsonl`` written atomically, with a run_end that says ok, or failed and
why ("rank 1 died (SIGKILL) at iteration 37", "time limit ...").

A failed run's events file still feeds the tables (a row with status failed), and a copy
is kept in ``attempts/failed-<time>.jsonl`` beside it, its logs (its part of run.log, the
work dir's logs: BigDL's driver, Spark's daemons and executors, the ranks' part files) in
``attempts/failed-<time>/``, which its reason names; a contended attempt that is redone
keeps the same, as ``contended-<time>``. The training rule takes the number of such
attempts as a parameter, so the next invocation sees a changed parameter and redoes that
run, and only that run (Snakemake's ``params`` rerun trigger); a successful rerun leaves
the count unchanged, so it is not redone again. Nothing of a failure is lost.

The modules, each importing only those above it in this list:
    process    spawning ranks (die with the launcher, own session), stopping them by PID
    runner     the framework runner's light launcher module
    network    launch mode, master address, the run's network namespaces
    failures   a reason a person understands, from how ranks ended
    records    part files, the run spec, run_start/run_end, the CPU settings recorded
    attempts   attempt ids, the logs kept with a failed or redone attempt, the final write
    ranks      ``Launch``: the ranks of one attempt and what became of them
    run        one attempt, the contended-retry loop and the command line (``main``)
This file imports none of them, so that a rank can import ``dlscale.launch.process``
without the rest.
"""
