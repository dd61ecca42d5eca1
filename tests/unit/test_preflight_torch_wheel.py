"""The preflight that names the CPU torch wheel's source before any job: it asks pip only
while the torch venv is still to be built for a study with torch runs, and fails with one
message naming the setting when pip sees no pinned wheel."""

from __future__ import annotations

import pytest

from dlscale import envs
from dlscale.catalog import REPO_DIR
from dlscale.study import preflight

TORCH_LOCK = envs.lock_path(REPO_DIR / "envs" / "torch.txt")
PINNED = envs.parse_lock(TORCH_LOCK)["torch"]["version"]


class Probe:
    """A stand-in for pip: its answer, and the questions it was asked."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str]] = []

    def __call__(self, package: str, version: str) -> bool | None:
        self.asked.append((package, version))
        return self.answer


def test_a_missing_wheel_source_fails_naming_the_setting():
    probe = Probe(False)
    with pytest.raises(preflight.PreflightError) as err:
        preflight.check_torch_wheel_source(["bigdl", "torch"], False, TORCH_LOCK, probe)
    assert probe.asked == [("torch", PINNED)]
    message = str(err.value)
    assert f"torch=={PINNED}" in message
    assert "PIP_FIND_LINKS" in message and "PIP_EXTRA_INDEX_URL" in message
    assert "https://download.pytorch.org/whl/cpu" in message


@pytest.mark.parametrize("answer", [True, None])
def test_a_visible_wheel_or_an_unknown_answer_passes(answer):
    probe = Probe(answer)
    preflight.check_torch_wheel_source(["torch"], False, TORCH_LOCK, probe)
    assert probe.asked == [("torch", PINNED)]


@pytest.mark.parametrize(("frameworks", "venv_built"), [(["torch"], True), (["bigdl", "caffe"], False)])
def test_pip_is_not_asked_when_the_venv_exists_or_no_torch_runs(frameworks, venv_built):
    probe = Probe(False)
    preflight.check_torch_wheel_source(frameworks, venv_built, TORCH_LOCK, probe)
    assert probe.asked == []


def test_the_readme_says_what_the_message_quotes():
    readme = " ".join((REPO_DIR / "README.md").read_text(encoding="utf-8").split())
    assert preflight.TORCH_WHEEL_README in readme


def test_pip_here_sees_the_pinned_wheel():
    """The real probe, against this machine's pip configuration (its find-links folder)."""
    assert preflight.pip_offers("torch", PINNED) is True
    assert preflight.pip_offers("torch", "0.0.1+nowhere") is False
