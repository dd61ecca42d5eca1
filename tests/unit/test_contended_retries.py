"""How often a contended run is redone: the launcher's default, or DLSCALE_CONTENDED_RETRIES."""

from __future__ import annotations

import pytest

from dlscale.launch import run


def test_the_environment_sets_the_redos_of_every_run_of_an_invocation():
    assert run.contended_retries_default({}) == run.CONTENDED_RETRIES
    assert run.contended_retries_default({"DLSCALE_CONTENDED_RETRIES": ""}) == run.CONTENDED_RETRIES
    assert run.contended_retries_default({"DLSCALE_CONTENDED_RETRIES": "0"}) == 0
    args = run.parse_args(
        ["--spec-json", "{}", "--data", "d", "--events", "e/events.jsonl", "--contended-retries", "5"]
    )
    assert args.contended_retries == 5


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_a_bad_value_is_one_line_naming_the_variable(value):
    with pytest.raises(SystemExit, match=f"DLSCALE_CONTENDED_RETRIES='{value}' is not an integer >= 0"):
        run.contended_retries_default({"DLSCALE_CONTENDED_RETRIES": value})
