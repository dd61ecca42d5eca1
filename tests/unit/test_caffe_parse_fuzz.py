"""Property test of the Caffe log parser: any input is events or a clear ParseError.

Inputs are built from real log lines (tests/data/caffe), cut, shuffled, garbled and
mixed with random text and with the lines of a crash (a failed CHECK, glog's abort
report), because a parser meets logs cut short by a killed job, glog lines from other
components, and editors' mistakes; it must never answer with a traceback of its own, and
a failure it reports is the last event. tests/unit/test_parse_hostile.py has the properties
(round trips, time and iterations going backwards, bytes that are not text).
"""

from __future__ import annotations

from helpers.paths import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlscale.events import validate_event
from dlscale.parse import ParseError
from dlscale.parse.caffe import parse

DATA = REPO / "tests" / "data" / "caffe"
REAL_LINES = [
    line
    for name in ("lenet_solver.log", "lenet_time.log", "alexnet_time.log")
    for line in (DATA / name).read_text(errors="replace").splitlines()
]

CRASH_LINES = [
    "F20261129 20:08:10.300000 10425 blob.cpp:133] Check failed: data_ ",
    "*** Check failure stack trace: ***",
    '*** Aborted at 1795982889 (unix time) try "date -d @1795982889" if you are using GNU date ***',
    "*** SIGSEGV (@0x0) received by PID 10425 (TID 0x7f3c1b5e6740) from PID 0; stack trace: ***",
]

line = st.one_of(
    st.sampled_from(REAL_LINES),
    st.sampled_from(CRASH_LINES),
    st.sampled_from(REAL_LINES).map(lambda text: text[: len(text) // 2]),
    st.sampled_from(REAL_LINES).map(lambda text: text.replace("=", "= nan").replace("ms", "")),
    st.text(max_size=80),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(line, max_size=40), newline_at_end=st.booleans())
def test_any_log_is_events_or_a_clear_error(tmp_path, lines, newline_at_end):
    log = tmp_path / "caffe.log"
    log.write_text("\n".join(lines) + ("\n" if newline_at_end else ""), errors="surrogateescape")
    try:
        events = parse(log)
    except ParseError as err:
        assert str(err).startswith(f"{log}:"), err
        return
    for event in events:
        if event.get("event") in ("run_start", "iteration", "run_end"):
            validate_event(event)
    ends = [i for i, event in enumerate(events) if event["event"] == "run_end"]
    assert ends in ([], [len(events) - 1])
    if ends:
        assert events[-1]["status"] == "failed" and events[-1]["reason"]
