"""Caffe logs of several ranks: what MPI builds of Caffe write and what launchers do to it.

Each log here is written the way its source writes lines, from the code that prints them
(read 2026-12-06):
- Intel Caffe's MPI builds put the rank before a display: ``[3] Iteration N, loss = L``
  (``mpi_get_current_proc_rank_as_string``, solver.cpp), and its parameter-server solver
  ``[0] Iteration N (X iter/s, Ys/D iter), loss = L, Z iter/s avg``;
- Caffe-MPI (the seed study's Caffe) writes `` rank = 0 Iteration N (...)`` from a display
  thread it starts at every display, while its main thread logs ``Iter N transfer Done``
  and the learning rate;
- launchers tag each line of a rank when asked: Open MPI's ``--tag-output``
  (``[1,0]<stderr>:``), MPICH's and Intel MPI's ``-l`` (``[0] ``), SLURM's ``srun --label``
  (``0: ``); one public Intel Caffe log reads ``[0] W1110 03:39:03.050876 53580
  solver.cpp:304] [0] Iteration 360, loss = 10``.
A merged log interleaves the ranks' lines, each rank's stamps in order but not across ranks.
"""

from __future__ import annotations

import datetime as dt

import pytest

from dlscale.parse import ParseError
from dlscale.parse import caffe as parser

START = dt.datetime(2026, 12, 4, 15, 6, 1)


def glog(seconds: float, thread: int, message: str, level: str = "I", source: str = "solver.cpp:218") -> str:
    moment = START + dt.timedelta(seconds=seconds)
    return f"{level}{moment:%m%d %H:%M:%S.%f} {thread:5d} {source}] {message}"


def rank_display(rank: int, iteration: int, seconds: float, loss: float, tag: str = "[{r}] ") -> list[str]:
    """One rank's display as Intel Caffe's MPI build logs it, on thread 100 + rank."""
    thread = 100 + rank
    return [
        glog(seconds, thread, f"{tag.format(r=rank)}Iteration {iteration}, loss = {loss}"),
        glog(
            seconds,
            thread,
            f"    Train net output #0: loss = {loss} (* 1 = {loss} loss)",
            source="solver.cpp:237",
        ),
        glog(
            seconds, thread, f"Iteration {iteration}, lr = {0.01 * (rank + 1)}", source="sgd_solver.cpp:106"
        ),
    ]


def merged(launcher: str | None, per_rank: dict[int, list[str]]) -> str:
    """The ranks' lines interleaved line by line, each tagged as ``launcher`` tags it."""
    tags = {
        None: "",
        "openmpi": "[1,{r}]<stderr>:",
        "prrte": "[prterun-node1-4242@1,{r}]<stdout>: ",
        "mpich": "[{r}] ",
        "srun": "{r:>2}: ",
    }
    lines = []
    for row in range(max(len(v) for v in per_rank.values())):
        for rank in sorted(per_rank, reverse=True):  # rank 1 first: the merge is not in rank order
            if row < len(per_rank[rank]):
                lines.append(tags[launcher].format(r=rank) + per_rank[rank][row])
    return "\n".join(["mpirun: launching 2 ranks", *lines]) + "\n"


def two_ranks(tag: str = "[{r}] ", skew: float = -0.0005) -> dict[int, list[str]]:
    """Rank 1's stamps run ``skew`` seconds from rank 0's: written after rank 0's lines but
    stamped earlier, as merged logs are."""
    return {
        rank: [
            glog(
                0.1 + (skew if rank else 0), 100 + rank, "Top shape: 64 1 28 28 (50176)", source="net.cpp:150"
            ),
            *rank_display(rank, 0, 1.0 + (skew if rank else 0), 2.3 + rank, tag),
            *rank_display(rank, 20, 1.5 + (skew if rank else 0), 1.1 + rank, tag),
            *rank_display(rank, 40, 2.1 + (skew if rank else 0), 0.5 + rank, tag),
        ]
        for rank in (0, 1)
    }


@pytest.mark.parametrize("launcher", [None, "openmpi", "prrte", "mpich", "srun"])
def test_a_merged_log_of_two_ranks_is_read_for_one_ranks_displays(launcher):
    """Before: rank 1's stamps half a millisecond before rank 0's were "time goes backwards",
    and a tagged line was no glog line at all ("no Caffe solver lines found")."""
    events = parser.parse_text(merged(launcher, two_ranks()))
    assert [e["event"] for e in events] == ["display", "iteration", "iteration"]
    rank = events[0]["rank"]
    assert rank == 1  # the first display in the merged log is rank 1's, and only its are read
    assert {e["rank"] for e in events} == {rank}
    assert [e["iteration"] for e in events] == [0, 20, 40]
    assert [e["loss"] for e in events] == pytest.approx([2.3 + rank, 1.1 + rank, 0.5 + rank])
    assert [e["outputs"]["loss"] for e in events] == pytest.approx([2.3 + rank, 1.1 + rank, 0.5 + rank])
    assert all(e["lr"] == pytest.approx(0.01 * (rank + 1)) for e in events)  # its own rate, not the other's
    assert events[1]["step_s"] == pytest.approx(0.5 / 20)
    assert all(e["samples"] == 64 for e in events)


def test_rank_zeros_displays_are_read_when_they_come_first():
    ranks = two_ranks()
    text = merged("openmpi", {0: ranks[0]}) + merged("openmpi", {1: ranks[1]}).split("\n", 1)[1]
    events = parser.parse_text(text)
    assert [(e["rank"], e["iteration"]) for e in events] == [(0, 0), (0, 20), (0, 40)]
    assert [e["lr"] for e in events] == pytest.approx([0.01] * 3)


def test_launcher_tags_name_the_rank_where_caffe_does_not():
    """BVLC's displays carry no rank: the launcher's tag says whose they are."""
    ranks = two_ranks(tag="")
    events = parser.parse_text(merged("srun", ranks))
    assert [(e["rank"], e["iteration"]) for e in events] == [(1, 0), (1, 20), (1, 40)]
    with pytest.raises(ParseError, match=r"follows iteration .*merged without rank tags"):
        parser.parse_text(merged(None, ranks))  # neither Caffe nor the launcher says whose


def test_a_failure_on_any_rank_fails_the_run():
    ranks = two_ranks()
    ranks[0] = ranks[0][:4]  # rank 0 dies after its first display
    ranks[0].append(
        glog(1.2, 100, "Check failed: data_ MPI_Allreduce returned 15", level="F", source="mpi.cpp:88")
    )
    events = parser.parse_text(merged("openmpi", ranks))
    assert events[-1]["event"] == "run_end" and events[-1]["status"] == "failed"
    assert events[-1]["reason"].startswith("Check failed: data_ MPI_Allreduce")
    assert events[-1]["time"] == pytest.approx(1.2 - 0.0995)  # since the log's first stamp, rank 1's


def test_caffe_mpis_display_thread_and_intel_caffes_rate_format():
    """Caffe-MPI displays from a new thread each time, with the rate format; its main thread
    logs the learning rate and its transfers. Intel Caffe's server solver adds an average."""
    lines = [glog(0.0, 7000, "Top shape: 32 1 28 28 (25088)", source="net.cpp:150")]
    for k, (iteration, rate) in enumerate([(0, "0"), (20, "40"), (40, "50")]):
        display_thread, at = 7101 + k, 1.0 + 0.45 * k
        lines += [
            glog(at + 0.0002, 7000, f"Iteration {iteration}, lr = 0.02", source="sgd_solver.cpp:106"),
            glog(
                at,
                display_thread,
                f" rank = 0 Iteration {iteration} ({rate} iter/s, 0.4s/20 iters), loss = 1.5",
            ),
            glog(at + 0.0003, 7000, f"Iter {iteration} transfer Done", source="solver.cpp:222"),
            glog(
                at,
                display_thread,
                "    Train net output #0: loss = 1.5 (* 1 = 1.5 loss)",
                source="solver.cpp:237",
            ),
        ]
    events = parser.parse_text("\n".join(lines) + "\n")
    assert [(e["event"], e["iteration"]) for e in events] == [
        ("display", 0),
        ("iteration", 20),
        ("iteration", 40),
    ]
    assert [e["step_s"] for e in events] == [None, pytest.approx(1 / 40), pytest.approx(1 / 50)]
    assert all(e["outputs"] == {"loss": 1.5} and e["samples"] == 32 for e in events)
    assert all("lr" not in e for e in events)  # another thread's: not told apart from another rank's
    intel = glog(2.0, 100, "[0] Iteration 60 (5.2 iter/s, 3.8s/20 iter), loss = 2.1, 5.0 iter/s avg")
    events = parser.parse_text("\n".join([*lines, intel]) + "\n")
    assert events[-1]["iteration"] == 60 and events[-1]["iter_per_s"] == 5.2 and events[-1]["loss"] == 2.1
    fork = glog(
        2.0, 100, "Iteration 60 (5.2 iter/s, 3.8s/20 iter), loss = 2.1, remaining 3 hours and 4 minutes"
    )
    assert parser.parse_text(fork + "\n")[-1]["loss"] == 2.1  # a fork's BVLC display, untagged


def test_what_stays_refused_in_a_log_of_several_writers():
    ranks = two_ranks()
    # One writer's own stamps going backwards: nothing merged explains that.
    ranks[0][4] = glog(0.5, 100, "[0] Iteration 20, loss = 1.1")
    with pytest.raises(ParseError, match="time goes backwards"):
        parser.parse_text(merged("openmpi", ranks))
    # A display with a rank tag and one without: whose the untagged one is cannot be known.
    ranks = two_ranks()
    ranks[1][4] = glog(1.5, 101, "Iteration 20, loss = 2.1")
    with pytest.raises(ParseError, match="with and without a rank tag"):
        parser.parse_text(merged(None, ranks))
    # Two runs of one rank in one file, the second started later: its displays start over.
    run = two_ranks()[0]
    later = [line.replace("15:06:0", "15:07:0", 1) for line in run]
    with pytest.raises(ParseError, match="iteration 0 follows iteration 40"):
        parser.parse_text(merged("mpich", {0: run + later}))
