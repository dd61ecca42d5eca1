"""dlscale.base.strictyaml and the study's config files read through it: what PyYAML's safe
loader lets through silently (a key given twice, aliases) is refused with its line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dlscale.archive import artifact
from dlscale.base import strictyaml
from dlscale.study.validation import ConfigError, check_config_files

PLAIN = "name: lenet\nnodes: [1, 2, 4]\nlearning_rate: {lenet: 0.01, alexnet: 0.02}\nnote: null\n"


def test_plain_yaml_reads_as_the_safe_loader_reads_it() -> None:
    assert strictyaml.load(PLAIN) == yaml.safe_load(PLAIN)
    assert strictyaml.load('{"a": [1, 2.5, "x"], "b": {"c": true}}') == {"a": [1, 2.5, "x"], "b": {"c": True}}


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("nodes: [1]\nmodels: [lenet]\nnodes: [2]\n", 3, "'nodes'"),
        ("learning_rate:\n  lenet: 0.1\n  lenet: 0.2\n", 3, "'lenet'"),
        ("measured: {1: 378, 2: 751, 1: 400}\n", 1, "1"),
        ('{"frameworks": ["torch"], "frameworks": ["bigdl"]}', 1, "'frameworks'"),
    ],
)
def test_a_key_given_twice_is_refused_with_its_line(text: str, line: int, key: str) -> None:
    with pytest.raises(strictyaml.RefusedYAML, match=f"key {key} is given twice") as err:
        strictyaml.load(text, "study.yaml")
    assert f'"study.yaml", line {line}' in str(err.value)
    assert yaml.safe_load(text)  # what the safe loader makes of it: the last one, silently


def test_aliases_are_refused_unless_let_through() -> None:
    laughs = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    laughs += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]
    with pytest.raises(strictyaml.RefusedYAML, match=r"alias \*l0: aliases are not allowed here"):
        strictyaml.load("\n".join(laughs))
    assert strictyaml.load("a: &x 1\nb: *x\n", aliases=True) == {"a": 1, "b": 1}
    with pytest.raises(strictyaml.RefusedYAML, match=r"alias \*x"):
        strictyaml.load("a: &x 1\nb: *x\n")


def test_a_study_s_config_file_with_a_key_twice_is_a_config_error_naming_it(tmp_path: Path) -> None:
    good, twice = tmp_path / "good.yaml", tmp_path / "twice.yaml"
    good.write_text(PLAIN + "repeats: &r 3\nwarmup: *r\n")  # a scalar's alias stays allowed in a study
    twice.write_text("frameworks: [torch]\nrepeats: 3\nframeworks: [bigdl]\n")
    check_config_files([good])
    with pytest.raises(ConfigError, match=r"(?s)twice.yaml: key 'frameworks' is given twice.*line 3"):
        check_config_files([good, twice])
    # what cannot be read or is not YAML is Snakemake's to report (it has read the files first)
    (tmp_path / "broken.yaml").write_text("name: [\n")
    check_config_files([tmp_path / "missing.yaml", tmp_path / "broken.yaml"])


def test_a_config_given_to_the_archive_tools_is_read_as_strictly(tmp_path: Path) -> None:
    """``verify --config`` and the archive read a study's files themselves: the same refusal."""
    twice = tmp_path / "study.yaml"
    twice.write_text("frameworks: [torch]\nnodes: [1]\nnodes: [1, 2]\n")
    with pytest.raises(ConfigError, match="study.yaml: key 'nodes' is given twice"):
        artifact.read_study_config([twice])
    twice.write_text("frameworks: [torch]\nnodes: [1, 2]\n")
    assert artifact.read_study_config([twice])["nodes"] == [1, 2]
