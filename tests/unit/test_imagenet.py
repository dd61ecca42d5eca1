"""Real ImageNet preparation on a small ImageFolder of real JPEGs made with Pillow.

The folder has three classes (named so that sorted order differs from creation order),
odd sizes, a greyscale and a CMYK JPEG, a PNG with alpha, a truncated JPEG and a file of
garbage. Every image of class k is filled with COLORS[k], so each sample's label can be
checked against its own pixels after decoding, resizing and cropping.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.paths import REPO
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from dlscale.data import imagenet
from dlscale.data.shards import DatasetError, ShardSet
from dlscale.study.validation import ConfigError, validate_config

CLASSES = ["n02085620", "n01440764", "n03000134"]  # sorted: n01440764, n02085620, n03000134
COLORS = {"n01440764": (200, 30, 30), "n02085620": (128, 128, 128), "n03000134": (30, 60, 200)}
SIZES = [(500, 375), (37, 53), (300, 120), (64, 64), (81, 200)]
IMAGE_SIZE, RESIZE = 32, 40


def _jpeg(path: Path, size: tuple[int, int], color: tuple[int, int, int], mode: str = "RGB") -> None:
    img = Image.new("RGB", size, color)
    if mode == "L":
        img = img.convert("L")
    elif mode == "CMYK":
        img = img.convert("CMYK")
    img.save(path, "JPEG", quality=95)


def make_folder(root: Path) -> dict[str, list[str]]:
    """The test ImageFolder under ``root/train``; returns class -> files that must convert."""
    good: dict[str, list[str]] = {}
    for name in CLASSES:
        folder = root / "train" / name
        folder.mkdir(parents=True)
        good[name] = []
        for i, size in enumerate(SIZES):
            file = f"{name}_{i}.JPEG"
            _jpeg(folder / file, size, COLORS[name])
            good[name].append(file)
    grey = root / "train" / "n02085620" / "grey.JPEG"  # the grey class: grey is its colour
    _jpeg(grey, (90, 70), COLORS["n02085620"], mode="L")
    cmyk = root / "train" / "n03000134" / "cmyk.jpg"
    _jpeg(cmyk, (120, 77), COLORS["n03000134"], mode="CMYK")
    rgba = Image.new("RGBA", (50, 60), (*COLORS["n01440764"], 255))
    rgba.save(root / "train" / "n01440764" / "alpha.png")
    good["n02085620"].append("grey.JPEG")
    good["n03000134"].append("cmyk.jpg")
    good["n01440764"].append("alpha.png")
    whole = (root / "train" / "n01440764" / "n01440764_0.JPEG").read_bytes()
    (root / "train" / "n01440764" / "truncated.JPEG").write_bytes(whole[: len(whole) // 2])
    (root / "train" / "n03000134" / "garbage.JPEG").write_bytes(b"\xff\xd8 this is no image" * 10)
    (root / "train" / "n03000134" / "README.txt").write_text("not an image: not listed")
    return good


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("ilsvrc")
    return root, make_folder(root)


def convert(listing: imagenet.Listing, out: Path, parts: int, shard_size: int = 4) -> Path:
    part_dirs = [out / "parts" / f"part-{k}" for k in range(parts)]
    for k, part_dir in enumerate(part_dirs):
        imagenet.convert_part(
            listing, k, parts, part_dir, image_size=IMAGE_SIZE, resize=RESIZE, shard_size=shard_size
        )
    return imagenet.gather(listing, part_dirs, out / "shards")


def test_listing_labels_by_sorted_class_name(folder):
    root, good = folder
    listing = imagenet.list_split(root, seed=3)
    assert listing.classes == sorted(CLASSES)
    assert len(listing) == sum(len(files) for files in good.values()) + 2  # + truncated + garbage
    assert not any(file.endswith(".txt") for file in listing.files)
    for file, label in zip(listing.files, listing.labels, strict=True):
        assert file.split("/")[0] == listing.classes[label]
    assert imagenet.list_split(root, seed=3) == listing  # deterministic
    assert imagenet.list_split(root, seed=4).files != listing.files  # shuffled by the seed
    assert sorted(imagenet.list_split(root, seed=4).files) == sorted(listing.files)


def test_shards_counts_labels_shapes_checksums(folder, tmp_path):
    root, good = folder
    listing = imagenet.list_split(root)
    out = convert(listing, tmp_path, parts=3)
    shards = ShardSet(out, verify=True)  # every sha256 in the index matches its file
    n_good = sum(len(files) for files in good.values())
    assert shards.num_samples == n_good
    assert shards.image_shape == (IMAGE_SIZE, IMAGE_SIZE, 3)
    assert shards.num_classes == 3
    index = shards.index
    assert index["classes"] == sorted(CLASSES)
    assert index["listed"] == n_good + 2
    assert index["skipped_count"] == 2
    assert sorted(entry["file"] for entry in index["skipped"]) == [
        "n01440764/truncated.JPEG",
        "n03000134/garbage.JPEG",
    ]
    assert index["label_counts"] == [len(good[name]) for name in sorted(CLASSES)]
    images, labels = shards.load_all()
    assert images.dtype == np.uint8 and labels.dtype == np.int64
    assert np.bincount(labels, minlength=3).tolist() == index["label_counts"]
    # Each sample's pixels carry its class's colour: labels travelled with their images
    # (greyscale and CMYK included, converted to RGB).
    for image, label in zip(images, labels, strict=True):
        expected = np.array(COLORS[index["classes"][label]], dtype=float)
        assert np.abs(image.reshape(-1, 3).mean(axis=0) - expected).max() < 12, (label, image.mean((0, 1)))
    mean = images.astype(np.float64).mean() / 255
    assert abs(shards.mean - mean) < 1e-12  # exact stats from the parts' histograms


def test_same_set_for_any_number_of_parts(folder, tmp_path):
    root, _ = folder
    listing = imagenet.list_split(root)
    one = ShardSet(convert(listing, tmp_path / "k1", parts=1, shard_size=100))
    many = ShardSet(convert(listing, tmp_path / "k7", parts=7, shard_size=2))
    for a, b in zip(one.load_all(), many.load_all(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert (one.mean, one.std) == (many.mean, many.std)
    assert len(many.index["shards"]) > len(one.index["shards"])


@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
def test_ranks_read_disjoint_parts_covering_the_set(folder, tmp_path, world):
    root, _ = folder
    shards = ShardSet(convert(imagenet.list_split(root), tmp_path, parts=4, shard_size=3))
    all_images, all_labels = shards.load_all()
    parts = [shards.load_part(rank, world) for rank in range(world)]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), all_images)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), all_labels)
    ranges = [shards.rank_range(rank, world) for rank in range(world)]
    assert ranges[0][0] == 0 and ranges[-1][1] == shards.num_samples
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    # Random access (what input pipelines use) reads the same rows.
    picks = np.array([shards.num_samples - 1, 0, 5, 5, 2])
    images, labels = shards.take(picks)
    np.testing.assert_array_equal(images, all_images[picks])
    np.testing.assert_array_equal(labels, all_labels[picks])


def test_resume_keeps_finished_parts_and_gather_names_missing_ones(folder, tmp_path):
    root, _ = folder
    listing = imagenet.list_split(root)
    parts = 3
    part_dirs = [tmp_path / f"part-{k}" for k in range(parts)]
    for k in (0, 2):  # part 1 "was interrupted"
        imagenet.convert_part(listing, k, parts, part_dirs[k], image_size=IMAGE_SIZE, resize=RESIZE)
    with pytest.raises(DatasetError, match=r"part-1/part.json: missing"):
        imagenet.gather(listing, part_dirs, tmp_path / "shards")
    assert not (tmp_path / "shards").exists()
    stamp = (part_dirs[0] / "part.json").stat().st_mtime_ns
    for k in range(parts):  # the rerun
        imagenet.convert_part(listing, k, parts, part_dirs[k], image_size=IMAGE_SIZE, resize=RESIZE)
    assert (part_dirs[0] / "part.json").stat().st_mtime_ns == stamp  # kept, not redone
    assert ShardSet(imagenet.gather(listing, part_dirs, tmp_path / "shards")).num_samples > 0
    # A part made with other parameters is redone, not reused.
    imagenet.convert_part(listing, 0, parts, part_dirs[0], image_size=16, resize=RESIZE)
    assert imagenet.read_part(part_dirs[0])["image_shape"] == [16, 16, 3]
    other = imagenet.list_split(root, seed=99)
    with pytest.raises(DatasetError, match="another listing"):
        imagenet.gather(other, part_dirs, tmp_path / "other")


def test_no_images_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match=r"train: not a directory"):
        imagenet.list_split(tmp_path)
    (tmp_path / "train" / "n01").mkdir(parents=True)
    (tmp_path / "train" / "n01" / "notes.txt").write_text("x")
    with pytest.raises(DatasetError, match=r"train: no images"):
        imagenet.list_split(tmp_path)


def test_all_corrupt_is_an_error(tmp_path):
    (tmp_path / "train" / "n01").mkdir(parents=True)
    (tmp_path / "train" / "n01" / "bad.JPEG").write_bytes(b"garbage")
    listing = imagenet.list_split(tmp_path)
    imagenet.convert_part(listing, 0, 2, tmp_path / "p0", image_size=8, resize=8)
    index = imagenet.convert_part(listing, 1, 2, tmp_path / "p1", image_size=8, resize=8)
    assert index["converted"] == 0 and len(index["skipped"]) == 1
    with pytest.raises(DatasetError, match="none of its 1 images could be decoded"):
        imagenet.gather(listing, [tmp_path / "p0", tmp_path / "p1"], tmp_path / "shards")


def test_val_split_from_folders_or_labels_file(folder, tmp_path):
    root, _ = folder
    source = tmp_path / "src"
    shutil.copytree(root / "train", source / "train")
    (source / "val" / "n03000134").mkdir(parents=True)
    _jpeg(source / "val" / "n03000134" / "v1.JPEG", (60, 40), COLORS["n03000134"])
    listing = imagenet.list_split(source, "val")
    assert listing.classes == sorted(CLASSES) and listing.labels == [2]
    flat = tmp_path / "flat"
    shutil.copytree(root / "train", flat / "train")
    (flat / "val").mkdir()
    _jpeg(flat / "val" / "ILSVRC2012_val_00000001.JPEG", (60, 40), COLORS["n02085620"])
    _jpeg(flat / "val" / "ILSVRC2012_val_00000002.JPEG", (60, 40), COLORS["n01440764"])
    (flat / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\n"
        "ILSVRC2012_val_00000001,n02085620 1 2 3 4\n"
        "ILSVRC2012_val_00000002,n01440764 1 2 3 4\n"
    )
    listing = imagenet.list_split(flat, "val", seed=0, val_labels=flat / "LOC_val_solution.csv")
    assert dict(zip(listing.files, listing.labels, strict=True)) == {
        "ILSVRC2012_val_00000001.JPEG": 1,
        "ILSVRC2012_val_00000002.JPEG": 0,
    }
    with pytest.raises(DatasetError, match="val_labels.txt: no such labels file"):
        imagenet.list_split(flat, "val")


def test_load_image_resizes_shorter_side_and_crops_the_centre(tmp_path):
    # 200x100, left half black, right half white: shorter side 100 -> 40 gives 80x40, and
    # the centre 32 columns are 24..55, whose boundary at x=40 lands at crop column 16.
    pixels = np.zeros((100, 200, 3), dtype=np.uint8)
    pixels[:, 100:] = 255
    Image.fromarray(pixels).save(tmp_path / "half.png")
    image = imagenet.load_image(tmp_path / "half.png", IMAGE_SIZE, RESIZE)
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8
    assert (image[:, :15] < 5).all() and (image[:, 17:] > 250).all()


@given(st.integers(0, 300), st.integers(1, 40))
def test_split_parts_cover_in_order(n, parts):
    blocks = imagenet.split_parts(n, parts)
    assert len(blocks) == parts and blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
    sizes = [stop - start for start, stop in blocks]
    assert max(sizes) - min(sizes) <= 1


def test_config_validation_names_the_key(schema, tmp_path):
    models = {"models": ["alexnet"]}
    with pytest.raises(ConfigError, match=r"'data.imagenet.source'.*nowhere"):
        validate_config({**models, "data": {"imagenet": {"source": str(tmp_path / "nowhere")}}}, schema)
    (tmp_path / "train").mkdir()
    assert validate_config({**models, "data": {"imagenet": {"source": str(tmp_path)}}}, schema)
    with pytest.raises(ConfigError, match=r"'data.imagenet.resize'"):
        validate_config(
            {**models, "data": {"imagenet": {"source": str(tmp_path), "resize": 100, "image_size": 224}}},
            schema,
        )
    # A model on MNIST does not need the ImageNet folder.
    assert validate_config({"models": ["lenet"], "data": {"imagenet": {"source": "/nowhere"}}}, schema)


def planned_jobs(output: str) -> dict[str, int]:
    """Job counts from the 'Job stats' table of a Snakemake dry run."""
    table = output.split("Job stats", 1)[-1] if "Job stats" in output else ""
    counts = {}
    for line in table.splitlines():
        fields = line.split()
        if fields[:1] == ["total"]:
            break
        if len(fields) == 2 and fields[1].isdigit():
            counts[fields[0]] = int(fields[1])
    return counts


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    cmd += ["--directory", str(workdir), "--profile", str(REPO / "profiles" / "local")]
    cmd += ["--configfile", str(workdir / "study.yaml"), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=workdir)


@pytest.mark.workflow
def test_workflow_scatters_parts_and_reruns_only_the_missing_one(folder, tmp_path):
    root, good = folder
    study = {
        "models": ["alexnet"],
        "data": {
            "imagenet": {"source": str(root), "parts": 3, "image_size": 32, "resize": 40, "shard_size": 4}
        },
    }
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    target = "results/data/imagenet-real/shards"
    proc = _snakemake(tmp_path, target)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    shards = ShardSet(tmp_path / target, verify=True)
    assert shards.num_samples == sum(len(files) for files in good.values())
    assert shards.index["skipped_count"] == 2
    log = (tmp_path / "results/logs/data/imagenet_part-1.log").read_text()
    assert "part 2/3:" in log and "images/s" in log  # progress is visible per part

    # As if the conversion had stopped with part 1 unfinished: the rerun converts part 1
    # alone, keeps parts 0 and 2, and gathers.
    shutil.rmtree(tmp_path / "results/data/imagenet-real/parts/part-1")
    shutil.rmtree(tmp_path / target)
    proc = _snakemake(tmp_path, target, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert planned_jobs(proc.stdout) == {"imagenet_part": 1, "imagenet_gather": 1}, proc.stdout
    assert "output: results/data/imagenet-real/parts/part-1\n" in proc.stdout
    proc = _snakemake(tmp_path, target)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert json.loads((tmp_path / target / "index.json").read_text())["num_samples"] == shards.num_samples


def test_shard_writer_adopts_files_and_guards_its_index(folder, tmp_path):
    from dlscale.data.shards import ShardWriter

    root, _ = folder
    listing = imagenet.list_split(root)
    index = imagenet.convert_part(listing, 0, 1, tmp_path / "p", image_size=8, resize=8)
    shard = index["shards"][0]
    with ShardWriter(tmp_path / "s", dataset="d", split="train", num_classes=3, source="t") as writer:
        with pytest.raises(ValueError, match="histogram does not count"):
            writer.add_file(
                tmp_path / "p" / shard["images"], tmp_path / "p" / shard["labels"], histogram=[0] * 256
            )
        writer.add_file(
            tmp_path / "p" / shard["images"],
            tmp_path / "p" / shard["labels"],
            histogram=shard["pixel_histogram"],
        )
        with pytest.raises(ValueError, match="would override"):
            writer.commit(extra={"num_samples": 1})
        writer.commit(extra={"note": "kept"})
    adopted = ShardSet(tmp_path / "s", verify=True)  # hashed on adoption, matches the bytes
    assert adopted.index["note"] == "kept"
    assert adopted.index["shards"][0]["images_sha256"] == shard["images_sha256"]
    assert (tmp_path / "s" / "shard-00000-images.npy").stat().st_ino == (
        tmp_path / "p" / shard["images"]
    ).stat().st_ino
