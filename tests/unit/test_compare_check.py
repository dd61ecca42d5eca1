"""benchmarks.compare_check's pure parts: the --change argument and the judgement of the two
comparisons (the studies themselves are ``make compare-check``'s, too long for the suite)."""

from __future__ import annotations

import argparse

import pandas as pd
import pytest

from benchmarks.compare_check import judge, parse_change, study_config


def test_a_change_is_framework_option_and_a_yaml_value() -> None:
    assert parse_change("torch.mkldnn=false") == ("torch", "mkldnn", False)
    assert parse_change("caffe.blas=mkl") == ("caffe", "blas", "mkl")
    for bad in ("torch.mkldnn", "mkldnn=false"):
        with pytest.raises(argparse.ArgumentTypeError, match="FRAMEWORK.OPTION=VALUE"):
            parse_change(bad)


def test_only_the_changed_study_carries_the_change() -> None:
    change = ("torch", "mkldnn", False)
    assert study_config("changed", 3, change)["torch"] == {"mkldnn": False}
    assert "torch" not in study_config("same", 3, change) and study_config("base", 3, change)["repeats"] == 3


def _table(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["framework", "metric", "change"])


def test_the_changed_framework_must_change_and_no_other() -> None:
    same = _table([("torch", "throughput", "no change"), ("tensorflow", "throughput", "improved")])
    found = _table(
        [("torch", "throughput", "no change"), ("torch", "exposed_comm_share", "improved"),
         ("tensorflow", "throughput", "no change")]
    )  # fmt: skip
    result = judge(same, found, "torch")
    assert result["changed_framework_found"] and result["other_frameworks_changed"] == 0
    assert (result["same_changed"], result["same_cells"]) == (1, 2)
    missed = _table([("torch", "throughput", "no change"), ("tensorflow", "efficiency", "improved")])
    result = judge(same, missed, "torch")
    assert not result["changed_framework_found"] and result["other_frameworks_changed"] == 1
    assert not judge(same, _table([("tensorflow", "throughput", "no change")]), "torch")[
        "changed_framework_found"
    ]
