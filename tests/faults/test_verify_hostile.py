"""``python -m dlscale.archive.verify`` on hostile archives and folders (issue 33, item 1).

Each class of hostile input a sender could craft is put through the real entry point (a
subprocess, as a receiver runs it, with its temporary folder inside the test's own): it
must end with exit 2 and one line on stderr, ``verify: refused: WHERE: RULE``, naming the
member (or file) and the rule it broke, with no traceback, and with nothing created, left
or read outside verify's temporary folder (the test's folder is compared before and after;
a ``PWNED`` path outside is looked for; host files' contents and hashes must not show).
Each class is one row of the fault table (``make test-faults``).
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.faults import FaultRow, record
from helpers.paths import REPO
from helpers.verify_study import make_archive, make_study

from dlscale.archive import artifact as dlartifact
from dlscale.archive import safety as archive_safety
from dlscale.archive import verify as dlverify

pytestmark = pytest.mark.faults

TOP = "artifact"


# --- building hostile archives ---------------------------------------------------------


class Zeros(io.RawIOBase):
    """``size`` zero bytes, made as they are read (a bomb's member without the disk)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def entry(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, **fields: Any) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode = kind, len(data) if kind == tarfile.REGTYPE else 0, 0o644
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def manifest_member(files: dict[str, Any] | None = None) -> tuple[tarfile.TarInfo, bytes]:
    data = json.dumps({"format": dlartifact.FORMAT, "files": files or {}}).encode()
    return entry(f"{TOP}/MANIFEST.json", data), data


def tar_gz(path: Path, members: list[tuple[tarfile.TarInfo, bytes | io.RawIOBase | None]]) -> Path:
    """A gzip'd tar of ``members`` (header, data), written as given (no name cleaned)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if isinstance(data, bytes):
                data = io.BytesIO(data)
            tar.addfile(info, data)
    return path


def a_study_tar(path: Path, *extra: tuple[tarfile.TarInfo, bytes | io.RawIOBase | None]) -> Path:
    """An archive with a manifest and one honest file, then ``extra`` members."""
    return tar_gz(
        path,
        [manifest_member(), (entry(f"{TOP}/config/config.yaml", b"nodes: [1]\n"), b"nodes: [1]\n"), *extra],
    )


def a_zip(path: Path, name: str, data: bytes = b"x", mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zipped:
        zipped.writestr(f"{TOP}/MANIFEST.json", json.dumps({"files": {}}))
        info = zipfile.ZipInfo(name)
        if mode is not None:
            info.create_system, info.external_attr = 3, mode << 16
        zipped.writestr(info, data)
    return path


def rewritten(archive_path: Path, out: Path, edit: Callable[[Path], None]) -> Path:
    """The honest archive unpacked, edited by ``edit(root)``, its manifest's checksums made
    to match again (as a careful sender would), and packed as dlscale.archive.artifact packs."""
    unpacked = out.parent / f"{out.name}.unpacked"
    with tarfile.open(archive_path) as tar:
        tar.extractall(unpacked, filter="data")
    root = unpacked / TOP
    edit(root)
    manifest = json.loads((root / "MANIFEST.json").read_text())
    members = {name: root / name for name in manifest["files"]}
    manifest["files"] = dlartifact.file_entries(members)
    dlartifact.write_archive(out, TOP, members, manifest)
    shutil.rmtree(unpacked)
    return out


def escape_events_paths(results: Path, target: str) -> None:
    """runs.csv's events_path of every row pointed at ``target``/runs/<run id>/events.jsonl."""
    table = results / "runs.csv"
    with open(table, newline="") as handle:
        header, *rows = list(csv.reader(handle))
    column = header.index("events_path")
    for row in rows:
        run_id = row[column].removeprefix("results/runs/").removesuffix("/events.jsonl")
        row[column] = f"{target}/runs/{run_id}/events.jsonl"
    with open(table, "w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows([header, *rows])


# --- judging ---------------------------------------------------------------------------


def tree(top: Path) -> set[str]:
    """Every path under ``top`` (folders, files, links), relative, links not followed."""
    found = set()
    for folder, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            found.add((Path(folder) / name).relative_to(top).as_posix())
    return found


def host_secrets(tmp_path: Path) -> list[str]:
    """What must never show in verify's output: the host files a hostile name points at,
    their contents' first lines and their hashes (as verify printed them: 16 hex digits);
    none so short or common that the test's own paths could hold it."""
    secrets = [socket.gethostname()]
    for path in (Path("/etc/passwd"), Path("/etc/hostname")):
        with contextlib.suppress(OSError):
            data = path.read_bytes()
            secrets.append(hashlib.sha256(data).hexdigest()[:16])
            first = data.decode(errors="replace").splitlines()[0].strip() if data.strip() else ""
            secrets.append(first)
    return [secret for secret in secrets if len(secret) >= 6 and secret not in str(tmp_path)]


class Case:
    """One hostile input put through ``python -m dlscale.archive.verify``; ``problems`` says what
    went wrong (empty: refused as it should be)."""

    def __init__(self, tmp_path: Path, target: Path, where: str, rule: str, *args: str) -> None:
        self.tmp_path, self.target, self.where, self.rule, self.args = tmp_path, target, where, rule, args
        self.problems: list[str] = []
        self.line = ""
        self.returncode: int | None = None
        self.seconds = 0.0

    def run(self, outside: Path | None = None, secrets: list[str] | None = None) -> Case:
        temp, cwd = self.tmp_path / "verify-tmp", self.tmp_path / "cwd"
        temp.mkdir(exist_ok=True)
        cwd.mkdir(exist_ok=True)
        before = tree(self.tmp_path)
        env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO)}
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "dlscale.archive.verify", str(self.target), *self.args],
            capture_output=True, text=True, timeout=120, env=env, cwd=cwd,
        )  # fmt: skip
        self.seconds = time.perf_counter() - started
        self.returncode = proc.returncode
        lines = proc.stderr.splitlines()
        self.line = lines[0] if lines else ""
        expected = f"verify: refused: {self.where}: "
        if proc.returncode != 2:
            self.problems.append(f"exit {proc.returncode}, not 2")
        if "Traceback" in proc.stderr or "Traceback" in proc.stdout:
            self.problems.append(f"a traceback: {proc.stderr[-400:]}")
        elif len(lines) != 1 or not self.line.startswith(expected) or self.rule not in self.line:
            self.problems.append(
                f"stderr is not one line {expected}...{self.rule}...: {proc.stderr[-400:]!r}"
            )
        if proc.stdout:
            self.problems.append(f"stdout not empty: {proc.stdout[-300:]!r}")
        changed = sorted(tree(self.tmp_path) ^ before)
        if changed:
            self.problems.append(f"written or left beside the archive: {changed[:5]}")
        if outside is not None and (outside.exists() or outside.is_symlink()):
            self.problems.append(f"created outside: {outside}")
        for secret in secrets or []:
            if secret in proc.stdout or secret in proc.stderr:
                self.problems.append(f"a host file's content or hash shows: {secret[:20]!r}")
        return self


def judge(fault: str, cases: list[Case]) -> None:
    """Record the class as one row of the fault table; fail naming the cases gone wrong."""
    wrong = {case.where: case.problems for case in cases if case.problems}
    outcome = "wrong result" if wrong else "rejected cleanly"
    codes = {case.returncode for case in cases}
    detail = " | ".join(case.line for case in cases) if not wrong else json.dumps(wrong)
    record(
        FaultRow(
            fault,
            "verify",
            outcome,
            round(max(case.seconds for case in cases), 2),
            detail,
            exit_code=codes.pop() if len(codes) == 1 else None,
        )
    )
    assert not wrong, wrong


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """An honest study (helpers.verify_study), the base of the hostile ones made from it."""
    return make_study(tmp_path)


@pytest.fixture
def archive(study: Path) -> Path:
    return make_archive(study)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A path outside the test's folder where a hostile archive would plant ``PWNED``."""
    place = Path("/tmp") / f"dlscale-hostile-{uuid.uuid4().hex[:12]}"
    yield place / "PWNED"
    shutil.rmtree(place, ignore_errors=True)


# --- names -----------------------------------------------------------------------------


def test_an_absolute_name_is_refused(tmp_path: Path, outside: Path):
    name = f"{outside}/abs.txt"
    tar = a_study_tar(tmp_path / "in" / "abs.tar.gz", (entry(name, b"x"), b"x"))
    zipped = a_zip(tmp_path / "in" / "abs.zip", "/etc/cron.d/dlscale")
    judge(
        "hostile archive: absolute name",
        [
            Case(tmp_path, tar, f"member {name!r}", "the name is absolute").run(outside.parent),
            Case(tmp_path, zipped, "member '/etc/cron.d/dlscale'", "the name is absolute").run(),
        ],
    )


def test_a_member_outside_the_study_folder_is_refused(tmp_path: Path):
    """The relative kin of an absolute name: it would land beside the study's folder, where
    the unlisted-file check does not look, and verify said OK."""
    tar = a_study_tar(tmp_path / "in" / "beside.tar.gz", (entry("elsewhere/x.txt", b"x"), b"x"))
    judge(
        "hostile archive: outside the top folder",
        [Case(tmp_path, tar, "member 'elsewhere/x.txt'", "outside the study's top folder 'artifact/'").run()],
    )


def test_a_dotdot_name_is_refused(tmp_path: Path):
    name = f"{TOP}/../../etc/passwd"
    tar = a_study_tar(
        tmp_path / "in" / "dotdot.tar.gz", (entry(name, b"root::0:0::/:/bin/sh\n"), b"root::0:0::/:/bin/sh\n")
    )
    zipped = a_zip(tmp_path / "in" / "dotdot.zip", f"{TOP}/../../x")
    judge(
        "hostile archive: '..' in a name",
        [
            Case(tmp_path, tar, f"member {name!r}", "'..' in the name").run(),
            Case(tmp_path, zipped, f"member '{TOP}/../../x'", "'..' in the name").run(),
        ],
    )


def test_a_member_twice_is_refused(tmp_path: Path):
    """The second copy would overwrite the first after the first was checked."""
    again = entry(f"{TOP}/config/config.yaml", b"nodes: [64]\n")
    tar = a_study_tar(tmp_path / "in" / "twice.tar.gz", (again, b"nodes: [64]\n"))
    judge(
        "hostile archive: a member twice",
        [Case(tmp_path, tar, f"member '{TOP}/config/config.yaml'", "already in the archive").run()],
    )


# --- types -----------------------------------------------------------------------------


def test_a_symbolic_link_out_is_refused(tmp_path: Path):
    link = entry(f"{TOP}/results/runs", kind=tarfile.SYMTYPE, linkname="/etc")
    tar = a_study_tar(tmp_path / "in" / "symlink.tar.gz", (link, None))
    zipped = a_zip(tmp_path / "in" / "symlink.zip", f"{TOP}/results", b"/etc", mode=0o120777)
    judge(
        "hostile archive: symbolic link out",
        [
            Case(tmp_path, tar, f"member '{TOP}/results/runs'", "a symbolic link (to '/etc')").run(),
            Case(tmp_path, zipped, f"member '{TOP}/results'", "a symbolic link").run(),
        ],
    )


def test_a_hard_link_to_a_host_file_is_refused(tmp_path: Path):
    link = entry(f"{TOP}/results/passwd", kind=tarfile.LNKTYPE, linkname="/etc/passwd")
    tar = a_study_tar(tmp_path / "in" / "hardlink.tar.gz", (link, None))
    judge(
        "hostile archive: hard link to /etc/passwd",
        [
            Case(tmp_path, tar, f"member '{TOP}/results/passwd'", "a hard link (to '/etc/passwd')").run(
                secrets=host_secrets(tmp_path)
            )
        ],
    )


def test_a_device_file_is_refused(tmp_path: Path):
    device = entry(f"{TOP}/results/null", kind=tarfile.CHRTYPE, devmajor=1, devminor=3)
    disk = entry(f"{TOP}/results/sda", kind=tarfile.BLKTYPE, devmajor=8, devminor=0)
    judge(
        "hostile archive: device file",
        [
            Case(tmp_path, a_study_tar(tmp_path / "in" / "chr.tar.gz", (device, None)), f"member '{TOP}/results/null'", "a device file").run(),
            Case(tmp_path, a_study_tar(tmp_path / "in" / "blk.tar.gz", (disk, None)), f"member '{TOP}/results/sda'", "a device file").run(),
        ],
    )  # fmt: skip


def test_a_fifo_is_refused(tmp_path: Path):
    fifo = entry(f"{TOP}/results/runs.csv", kind=tarfile.FIFOTYPE)
    tar = a_study_tar(tmp_path / "in" / "fifo.tar.gz", (fifo, None))
    judge("hostile archive: FIFO", [Case(tmp_path, tar, f"member '{TOP}/results/runs.csv'", "a FIFO").run()])


# --- sizes -----------------------------------------------------------------------------


def test_a_bomb_is_refused_by_each_limit(tmp_path: Path):
    """Small limits from the command line, so each rule is met by a 2 MiB member of zeros."""
    size = 2 << 20
    bomb = a_study_tar(
        tmp_path / "in" / "bomb.tar.gz", (entry(f"{TOP}/results/zeros", size=size), Zeros(size))
    )
    where = f"member '{TOP}/results/zeros'"
    many = a_study_tar(
        tmp_path / "in" / "many.tar.gz", *((entry(f"{TOP}/results/f{i}", b""), b"") for i in range(5))
    )
    judge(
        "hostile archive: bomb (limits given)",
        [
            Case(
                tmp_path, bomb, where, "unpacks to more than 1,048,576 bytes", "--max-unpacked-bytes", "1M"
            ).run(),
            Case(
                tmp_path, bomb, where, "over the 1,048,576 a member may have", "--max-member-bytes", "1M"
            ).run(),
            Case(tmp_path, bomb, where, "a compression ratio of", "--max-ratio", "5").run(),
            Case(
                tmp_path, many, f"member '{TOP}/results/f2'", "more than 4 members", "--max-members", "4"
            ).run(),
        ],
    )


def test_the_default_limits_refuse_a_bomb_before_unpacking_it(tmp_path: Path, monkeypatch, capsys):
    """A 64 MiB member of zeros (the largest dlscale.archive.artifact archives; gzip makes it 65 KB,
    a ratio of about 1030) is refused by the default ratio limit, and a header claiming 3
    GiB by the member limit, both from their headers: nothing is unpacked, and the 3 GiB
    one's data is never even decompressed (the archive holds none)."""
    size = 64 << 20
    zeros = a_study_tar(
        tmp_path / "in" / "zeros.tar.gz", (entry(f"{TOP}/results/zeros", size=size), Zeros(size))
    )
    assert zeros.stat().st_size < 200_000
    head = entry(f"{TOP}/results/huge", size=3 << 30).tobuf(tarfile.PAX_FORMAT)
    huge = tmp_path / "in" / "huge.tar.gz"
    huge.write_bytes(gzip.compress(head + b"\0" * 4096))  # a lying header: 4 KB for 3 GiB
    written: list[str] = []
    monkeypatch.setattr(archive_safety, "_write", lambda dest, found, source: written.append(found.name) or 0)
    monkeypatch.setattr(dlverify.tempfile, "tempdir", str(tmp_path / "verify-tmp"))
    (tmp_path / "verify-tmp").mkdir()
    lines, problems, started = [], [], time.perf_counter()
    for archive_path, rule in (
        (zeros, "over 100 (--max-ratio)"),
        (huge, "over the 67,108,864 a member may have"),
    ):
        code = dlverify.main([str(archive_path)])
        err = capsys.readouterr().err
        lines.append(err.strip())
        if (
            code != 2
            or err.count("\n") != 1
            or not err.startswith("verify: refused: member")
            or rule not in err
        ):
            problems.append(f"exit {code}: {err!r}")
    took = time.perf_counter() - started
    if written or any((tmp_path / "verify-tmp").iterdir()):
        problems.append(f"unpacked: {written}")
    if took > 10:
        problems.append(f"took {took:.1f} s: the data was read")
    outcome = "wrong result" if problems else "rejected cleanly"
    record(FaultRow("hostile archive: bomb (default limits)", "verify", outcome, round(took, 2), " | ".join(lines), exit_code=2))  # fmt: skip
    assert not problems, problems


def test_oversized_headers_are_refused(tmp_path: Path):
    """A PAX record of 1 MiB: tarfile would hold it in memory; refused past 64 KiB."""
    info = entry(f"{TOP}/results/x", b"x")
    info.pax_headers = {"comment": "z" * (1 << 20)}
    tar = a_study_tar(tmp_path / "in" / "pax.tar.gz", (info, b"x"))
    judge(
        "hostile archive: oversized headers",
        [
            Case(
                tmp_path,
                tar,
                f"the member after member '{TOP}/config/config.yaml'",
                "its headers take more than",
            ).run()
        ],
    )


def test_a_member_longer_than_its_header_is_refused():
    """Unpacking counts the bytes it writes: a stream holding more than the header said
    (or less) is refused, whatever tarfile or zipfile let through."""
    out = io.BytesIO()
    with pytest.raises(archive_safety.Refused, match="holds more than the 10 bytes its header says"):
        archive_safety.copy_counted(io.BytesIO(b"y" * 11), out, 10, "member 'x'")
    assert len(out.getvalue()) <= 10
    with pytest.raises(archive_safety.Refused, match="truncated: 3 of the 10 bytes"):
        archive_safety.copy_counted(io.BytesIO(b"abc"), io.BytesIO(), 10, "member 'x'")


# --- broken archives and manifests -------------------------------------------------------


def test_a_truncated_or_foreign_archive_is_refused(tmp_path: Path, archive: Path):  # noqa: F811
    whole = archive.read_bytes()
    cut = tmp_path / "in" / "cut.tar.gz"
    cut.parent.mkdir(parents=True)
    cut.write_bytes(whole[: len(whole) // 2])
    head = tmp_path / "in" / "head.tar.gz"
    head.write_bytes(whole[:20])
    junk = tmp_path / "in" / "junk.tar.gz"
    junk.write_bytes(b"this is no archive\n" * 100)
    judge(
        "hostile archive: truncated gzip, not a tar",
        [
            Case(
                tmp_path, cut, f"archive {str(cut)!r}", "truncated or corrupt after member 'artifact/"
            ).run(),
            Case(tmp_path, head, f"archive {str(head)!r}", "truncated or corrupt compressed data").run(),
            Case(tmp_path, junk, f"archive {str(junk)!r}", "neither a tar").run(),
        ],
    )


def test_a_manifest_that_is_not_an_object_is_refused(tmp_path: Path):
    listed = entry(f"{TOP}/MANIFEST.json", b"[1, 2]")
    broken = entry(f"{TOP}/MANIFEST.json", b'{"files": ')
    files = entry(f"{TOP}/MANIFEST.json", b'{"files": ["results/runs.csv"]}')
    judge(
        "hostile archive: manifest not an object",
        [
            Case(tmp_path, tar_gz(tmp_path / "in" / "list.tar.gz", [(listed, b"[1, 2]")]), "file 'MANIFEST.json'", "not a JSON object but a JSON list").run(),
            Case(tmp_path, tar_gz(tmp_path / "in" / "cut.tar.gz", [(broken, b'{"files": ')]), "file 'MANIFEST.json'", "not JSON").run(),
            Case(tmp_path, tar_gz(tmp_path / "in" / "files.tar.gz", [(files, b'{"files": ["results/runs.csv"]}')]), "file 'MANIFEST.json'", "'files' is not a JSON object").run(),
        ],
    )  # fmt: skip


def test_a_manifest_naming_host_files_is_refused_without_reading_them(tmp_path: Path, monkeypatch, capsys):
    entry_of = {"sha256": "0" * 64, "bytes": 1}
    up = f"{'../' * 6}etc/passwd"
    cases = []
    for label, files, rule in (
        ("up", {up: entry_of}, f"'..' in the files entry {up!r}"),
        ("abs", {"/etc/hostname": entry_of}, "the files entry '/etc/hostname' is absolute"),
        ("run", None, "'..' in the run id '../../../../etc'"),
    ):
        if files is None:
            data = json.dumps({"files": {}, "study": {"run_ids": ["../../../../etc"]}}).encode()
            members = [(entry(f"{TOP}/MANIFEST.json", data), data)]
        else:
            members = [manifest_member(files)]
        tar = tar_gz(tmp_path / "in" / f"{label}.tar.gz", members)
        cases.append(Case(tmp_path, tar, "file 'MANIFEST.json'", rule).run(secrets=host_secrets(tmp_path)))
    # In-process too: no host file is hashed or even looked at for its checksum.
    hashed: list[str] = []
    monkeypatch.setattr(dlverify, "sha256_file", lambda path: hashed.append(str(path)) or "0" * 64)
    monkeypatch.setattr(dlverify.tempfile, "tempdir", str(tmp_path / "verify-tmp"))
    for case in cases:
        assert dlverify.main([str(case.target)]) == 2
        capsys.readouterr()
    assert not hashed, hashed
    judge("hostile archive: manifest names host files", cases)


# --- paths inside the tables ---------------------------------------------------------------


def test_an_events_path_out_of_the_study_is_refused(tmp_path, archive, study, outside):  # noqa: F811
    """runs.csv's events_path rewritten to ``../../..../tmp/x/PWNED/...``: verify once made
    that folder and a link in it; now refused, in an archive and in a results folder."""
    escape = f"{'../' * 12}{str(outside).lstrip('/')}"
    hostile = rewritten(
        archive, tmp_path / "in" / "pwned.tar.gz", lambda root: escape_events_paths(root / "results", escape)
    )
    escape_events_paths(study / "results", escape)
    rule = f"'..' in the events_path '{escape}/runs/"
    judge(
        "hostile archive/folder: events_path out",
        [
            Case(tmp_path, hostile, "file 'results/runs.csv' line 2", rule).run(outside.parent),
            Case(tmp_path, study / "results", "file 'results/runs.csv' line 2", rule).run(outside.parent),
        ],
    )  # fmt: skip


# --- a results folder given directly -----------------------------------------------------


def test_a_results_folder_with_links_or_fifos_is_refused(tmp_path: Path, study: Path):  # noqa: F811
    """A folder given directly is held to the archive's rules: an events file that is a
    link to a host file (it was read, and its lines could show in the error), a FIFO."""
    run = study / "results" / "runs" / "torch" / "lenet" / "n2x1" / "b64" / "r0"
    (run / "events.jsonl").unlink()
    (run / "events.jsonl").symlink_to("/etc/passwd")
    fifo = tmp_path / "fifo" / "results" / "runs" / "torch" / "lenet" / "n1x1" / "b64" / "r0" / "events.jsonl"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    judge(
        "hostile folder: link out, FIFO",
        [
            Case(tmp_path, study / "results", "file 'results/runs/torch/lenet/n2x1/b64/r0/events.jsonl'", "a symbolic link (to '/etc/passwd')").run(secrets=host_secrets(tmp_path)),
            Case(tmp_path, fifo.parents[6], "file 'results/runs/torch/lenet/n1x1/b64/r0/events.jsonl'", "a FIFO").run(),
        ],
    )  # fmt: skip


# --- what stays accepted -----------------------------------------------------------------


def test_a_failed_runs_work_folder_does_not_refuse_a_results_folder(study: Path):  # noqa: F811
    """A failed run keeps its hidden ``.work`` (never archived, never read): links and
    sockets its ranks left there do not make an honest results folder hostile."""
    work = study / "results" / "runs" / "torch" / "lenet" / "n1x1" / "b64" / "r0" / ".work" / "tmp"
    work.mkdir(parents=True)
    (work / "spark-local").symlink_to("/etc")
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as sock:
        with contextlib.chdir(work):  # a relative name: AF_UNIX paths are short
            sock.bind("s")
        report = dlverify.verify(study / "results")
    assert report.ok, report.lines()


def test_sizes_on_the_command_line():
    assert dlverify.byte_count("4G") == 4 << 30
    assert dlverify.byte_count("64MiB") == 64 << 20
    assert dlverify.byte_count("1000") == 1000
    with pytest.raises(Exception, match="not a size"):
        dlverify.byte_count("lots")
    assert dlverify.DEFAULT_LIMITS.max_member_bytes == dlartifact.MAX_FILE_BYTES
