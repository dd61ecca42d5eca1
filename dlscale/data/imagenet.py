"""Real ImageNet (an ILSVRC2012-style folder) into the study's shard format, scattered over jobs.

Converting 1.28 million JPEGs is hours of single-core decoding, so the work is split the
way Snakemake scatters it over a cluster (rules/imagenet.smk):

1. ``list_split`` (one job): walk ``<source>/<split>/``, give each class folder its label
   by sorted class name (the ImageFolder / ILSVRC convention: label i is the i-th synset
   in sorted order), and fix the order of all files: sorted, then shuffled with a seed, so
   that the contiguous block each rank trains on holds every class, not a few of them.
   The listing is written once (``Listing.write``); K conversion jobs read it.
2. ``convert_part`` (K jobs, any node): decode part k's files with Pillow, convert any
   mode (greyscale, CMYK, palette, alpha) to RGB, resize the shorter side to ``resize``
   and centre-crop ``image_size`` squared (the usual 256 -> 224 evaluation transform),
   and write uint8 shards with their sha256 and pixel histogram. An unreadable or corrupt
   file is skipped and listed with its reason, never fatal. A part directory appears
   atomically and is reused if it exists for the same listing and parameters, so an
   interrupted conversion resumes with the parts that are missing (and Snakemake, seeing
   the finished parts' outputs, reschedules only those).
3. ``gather`` (one job): hard-link every part's shards into one shard set whose index
   carries the counts (per class, converted and skipped), the class map, the checksums
   and the exact pixel mean/std summed from the parts' histograms.

Parts are contiguous blocks of the listing and shards keep that order, so the gathered
set is identical for any number of parts K, except for where shard boundaries fall.
Nothing here imports a deep-learning framework; Pillow is imported only when decoding.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlscale.base import atomic
from dlscale.data.shards import (
    DatasetError,
    ShardWriter,
    pixel_histogram,
)

log = logging.getLogger(__name__)

DATASET = "imagenet"
LISTING_FORMAT = "dlscale-imagenet-listing/1"
PART_FORMAT = "dlscale-imagenet-part/1"
PART_INDEX = "part.json"
#: What counts as an image file (case-insensitive); ILSVRC2012 ships ``.JPEG``.
IMAGE_EXTENSIONS = frozenset({".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".webp", ".tif", ".tiff"})


def _is_image(name: str) -> bool:
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


@dataclass(frozen=True)
class Listing:
    """One split's files in conversion order, each with its label, and the class map.

    ``files`` are relative to ``root`` (the split's folder); ``labels[i]`` is the index in
    ``classes`` of ``files[i]``'s class.
    """

    root: str
    split: str
    classes: list[str]
    files: list[str]
    labels: list[int]
    seed: int

    def __len__(self) -> int:
        return len(self.files)

    def to_json(self) -> str:
        return json.dumps({"format": LISTING_FORMAT, **asdict(self)}, separators=(",", ":")) + "\n"

    @property
    def sha256(self) -> str:
        """Identity of the listing: parts made from another listing are never mixed in."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def write(self, path: str | os.PathLike[str]) -> Path:
        return atomic.write_bytes(path, self.to_json().encode())

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Listing:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise DatasetError(f"{path}: unreadable listing ({err})") from None
        if not isinstance(data, dict) or data.pop("format", None) != LISTING_FORMAT:
            raise DatasetError(f"{path}: not a {LISTING_FORMAT} listing")
        try:
            listing = cls(**data)
        except TypeError as err:
            raise DatasetError(f"{path}: malformed listing ({err})") from None
        if len(listing.files) != len(listing.labels):
            raise DatasetError(f"{path}: {len(listing.files)} files but {len(listing.labels)} labels")
        return listing


def _class_dirs(directory: Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(directory) if entry.is_dir() and entry.name[0] != ".")


def _images_in(directory: Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(directory) if entry.is_file() and _is_image(entry.name))


def _read_val_labels(path: Path) -> dict[str, str]:
    """File name -> class name from a labels file.

    Accepted: lines ``<file> <class>`` (whitespace or comma separated; ``#`` comments) and
    Kaggle's ``LOC_val_solution.csv`` (``ImageId,PredictionString`` whose first token is
    the synset). File names may be given with or without their extension.
    """
    if not path.is_file():
        raise DatasetError(f"{path}: no such labels file (val/ has no class folders, so it needs one)")
    mapping: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line or (number == 1 and line.lower().startswith("imageid")):
            continue
        fields = line.replace(",", " ").split()
        if len(fields) < 2:
            raise DatasetError(f"{path}:{number}: expected '<file> <class>', got {raw!r}")
        mapping[fields[0]] = fields[1]
    if not mapping:
        raise DatasetError(f"{path}: no labels in this file")
    return mapping


def list_split(
    source: str | os.PathLike[str],
    split: str = "train",
    *,
    seed: int = 0,
    val_labels: str | os.PathLike[str] | None = None,
) -> Listing:
    """The files of ``<source>/<split>``, labelled by sorted class name and shuffled by ``seed``.

    ``train/`` (and ``val/`` when it has them) holds one sub-folder of images per class.
    A ``val/`` of loose files takes its labels from ``val_labels`` (default
    ``<source>/val_labels.txt``, see ``_read_val_labels``); its class map is train/'s
    folders, so labels mean the same class in both splits. A split with no image at all
    is an error, naming the folder.
    """
    source = Path(source)
    root = source / split
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory (expected an ILSVRC-style {split}/ folder in {source})")
    class_dirs = _class_dirs(root)
    files: list[str] = []
    labels: list[int] = []
    if class_dirs:
        train_root = source / "train"
        classes = _class_dirs(train_root) if split != "train" and train_root.is_dir() else class_dirs
        label_of = {name: i for i, name in enumerate(classes)}
        unknown = [name for name in class_dirs if name not in label_of]
        if unknown:
            raise DatasetError(f"{root}: class folders not in {train_root}: {', '.join(unknown[:5])}")
        for name in class_dirs:
            for file in _images_in(root / name):
                files.append(f"{name}/{file}")
                labels.append(label_of[name])
    else:
        classes = _class_dirs(source / "train")
        if not classes:
            raise DatasetError(f"{source / 'train'}: no class folders to take {split}/'s class map from")
        label_of = {name: i for i, name in enumerate(classes)}
        mapping = _read_val_labels(Path(val_labels) if val_labels else source / "val_labels.txt")
        for file in _images_in(root):
            cls = mapping.get(file, mapping.get(os.path.splitext(file)[0]))
            if cls is None:
                raise DatasetError(f"{root / file}: not in the labels file")
            if cls not in label_of:
                raise DatasetError(f"{root / file}: class {cls!r} is not a folder of {source / 'train'}")
            files.append(file)
            labels.append(label_of[cls])
    if not files:
        raise DatasetError(
            f"{root}: no images (looked for {', '.join(sorted(IMAGE_EXTENSIONS))} files"
            f" {'in its class folders' if class_dirs else 'in it'})"
        )
    order = np.random.default_rng(seed).permutation(len(files))
    return Listing(
        root=str(root.resolve()),
        split=split,
        classes=classes,
        files=[files[i] for i in order],
        labels=[labels[i] for i in order],
        seed=int(seed),
    )


def split_parts(num_items: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous blocks ``[start, stop)`` covering ``num_items``, sizes differing by <= 1.

    Unlike a rank's block, a part may be empty (more parts than files): each part is a
    fixed job of the workflow, decided before anyone has counted the files.
    """
    if parts < 1:
        raise ValueError(f"parts {parts} must be >= 1")
    if num_items < 0:
        raise ValueError(f"num_items {num_items} must be >= 0")
    return [(k * num_items // parts, (k + 1) * num_items // parts) for k in range(parts)]


def load_image(path: str | os.PathLike[str], image_size: int, resize: int) -> np.ndarray:
    """Decode one image to uint8 RGB ``(image_size, image_size, 3)``.

    The shorter side is resized to ``resize`` (bilinear, antialiased), then the centre
    ``image_size`` square is cropped. JPEGs are decoded at the smallest DCT scale that
    still leaves both sides >= ``resize`` (Pillow's ``draft``): the same crop from a
    fraction of the decoding work. Raises what Pillow raises for a corrupt file.
    """
    from PIL import Image

    with Image.open(path) as img:
        img.draft("RGB", (resize, resize))
        rgb = img.convert("RGB")  # L, CMYK, P, RGBA, I;16 ... all become RGB
    width, height = rgb.size
    scale = resize / min(width, height)
    size = (max(resize, round(width * scale)), max(resize, round(height * scale)))
    rgb = rgb.resize(size, Image.Resampling.BILINEAR)
    left, top = (size[0] - image_size) // 2, (size[1] - image_size) // 2
    rgb = rgb.crop((left, top, left + image_size, top + image_size))
    return np.asarray(rgb, dtype=np.uint8)


def _decode_errors() -> tuple[type[BaseException], ...]:
    from PIL import Image

    # What a bad file makes Pillow raise (UnidentifiedImageError is an OSError; a
    # truncated JPEG raises OSError on load; broken headers raise SyntaxError or ValueError).
    return (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)


def _part_key(listing: Listing, part: int, parts: int, image_size: int, resize: int, shard_size: int) -> str:
    key = [listing.sha256, part, parts, image_size, resize, shard_size, LISTING_FORMAT]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()


def read_part(part_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The index of a converted part (``part.json``), checked for its format."""
    path = Path(part_dir) / PART_INDEX
    try:
        index = json.loads(path.read_text())
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing (part not converted, or its job was interrupted)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DatasetError(f"{path}: unreadable part index ({err})") from None
    if not isinstance(index, dict) or index.get("format") != PART_FORMAT:
        raise DatasetError(f"{path}: not a {PART_FORMAT} index")
    return index


def convert_part(
    listing: Listing,
    part: int,
    parts: int,
    out_dir: str | os.PathLike[str],
    *,
    image_size: int = 224,
    resize: int = 256,
    shard_size: int = 1024,
    progress_every: int = 500,
) -> dict[str, Any]:
    """Convert part ``part`` of ``parts`` of ``listing`` into ``out_dir``; return its index.

    ``out_dir`` gets ``shard-NNNNN-{images,labels}.npy`` files and ``part.json`` (counts,
    skipped files with reasons, per-shard sha256 and pixel histogram), all at once: the
    directory is built beside it and renamed into place. If ``out_dir`` already holds
    this very part (same listing and parameters), it is kept and returned: a rerun after
    an interruption redoes only the parts that never finished. Memory is one shard.
    """
    if not 0 <= part < parts:
        raise ValueError(f"part {part} is outside [0, {parts})")
    if resize < image_size or image_size < 1:
        raise ValueError(f"resize {resize} must be >= image_size {image_size} >= 1")
    if shard_size < 1:
        raise ValueError(f"shard_size {shard_size} must be >= 1")
    out_dir = Path(out_dir)
    key = _part_key(listing, part, parts, image_size, resize, shard_size)
    if (out_dir / PART_INDEX).is_file():
        try:
            existing = read_part(out_dir)
        except DatasetError:
            existing = {}
        if existing.get("key") == key:
            log.info("part %d/%d: already converted in %s, kept", part + 1, parts, out_dir)
            return existing
    start, stop = split_parts(len(listing), parts)[part]
    errors = _decode_errors()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    shards: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    counts = np.zeros(len(listing.classes), dtype=np.int64)
    buffer = np.empty((min(shard_size, max(stop - start, 1)), image_size, image_size, 3), dtype=np.uint8)
    labels = np.empty(len(buffer), dtype=np.int64)
    filled = 0
    started = time.perf_counter()

    def flush() -> None:
        nonlocal filled
        stem = f"shard-{len(shards):05d}"
        entry: dict[str, Any] = {"num_samples": filled}
        for kind, array in (("images", buffer[:filled]), ("labels", labels[:filled])):
            with open(tmp / f"{stem}-{kind}.npy", "wb") as handle:
                np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
            with open(tmp / f"{stem}-{kind}.npy", "rb") as handle:
                entry[f"{kind}_sha256"] = hashlib.file_digest(handle, "sha256").hexdigest()
            entry[kind] = f"{stem}-{kind}.npy"
        entry["pixel_histogram"] = pixel_histogram(buffer[:filled]).tolist()
        shards.append(entry)
        filled = 0

    try:
        for done, i in enumerate(range(start, stop), start=1):
            path = Path(listing.root) / listing.files[i]
            try:
                buffer[filled] = load_image(path, image_size, resize)
            except errors as err:
                skipped.append({"file": listing.files[i], "reason": f"{type(err).__name__}: {err}"})
                log.warning("part %d/%d: skipped %s (%s: %s)", part + 1, parts, path, type(err).__name__, err)
            else:
                labels[filled] = listing.labels[i]
                counts[listing.labels[i]] += 1
                filled += 1
                if filled == len(buffer):
                    flush()
            if done % progress_every == 0 or i == stop - 1:
                rate = done / max(time.perf_counter() - started, 1e-9)
                log.info(
                    "part %d/%d: %d/%d images, %d skipped, %.1f images/s",
                    part + 1, parts, done, stop - start, len(skipped), rate,
                )  # fmt: skip
        if filled:
            flush()
        index = {
            "format": PART_FORMAT,
            "key": key,
            "listing_sha256": listing.sha256,
            "part": part,
            "parts": parts,
            "range": [start, stop],
            "listed": stop - start,
            "converted": int(counts.sum()),
            "skipped": skipped,
            "image_shape": [image_size, image_size, 3],
            "resize": resize,
            "label_counts": counts.tolist(),
            "shards": shards,
            "seconds": time.perf_counter() - started,
        }
        (tmp / PART_INDEX).write_text(json.dumps(index, indent=1) + "\n")
        os.chmod(tmp, atomic.dir_mode())
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return index


def gather(
    listing: Listing,
    part_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    source: str | None = None,
) -> Path:
    """Join converted parts (in part order) into one shard set at ``out_dir``, atomically.

    Every part of the same listing must be there, once; their shards are hard-linked,
    not copied. The index adds ``classes`` (label -> class name), ``label_counts``,
    ``listed``, ``skipped`` (file + reason) and ``skipped_count`` to the shard format's
    own fields. No image decoded anywhere is an error.
    """
    indexes = [read_part(part_dir) for part_dir in part_dirs]
    parts = len(indexes)
    for k, (part_dir, index) in enumerate(zip(part_dirs, indexes, strict=True)):
        if index["listing_sha256"] != listing.sha256:
            raise DatasetError(f"{part_dir}: converted from another listing (stale part; delete it)")
        if (index["part"], index["parts"]) != (k, parts):
            raise DatasetError(
                f"{part_dir}: is part {index['part']} of {index['parts']}, expected {k} of {parts}"
            )
    converted = sum(index["converted"] for index in indexes)
    skipped = [entry for index in indexes for entry in index["skipped"]]
    if converted == 0:
        raise DatasetError(f"{listing.root}: none of its {len(listing)} images could be decoded")
    counts = np.sum([index["label_counts"] for index in indexes], axis=0)
    description = source or f"ILSVRC-style folder {listing.root}"
    resize = indexes[0]["resize"]
    image_size = indexes[0]["image_shape"][0]
    description += f" (shorter side -> {resize}, centre crop {image_size}, seed {listing.seed})"
    with ShardWriter(
        out_dir, dataset=DATASET, split=listing.split, num_classes=len(listing.classes), source=description
    ) as writer:
        for part_dir, index in zip(part_dirs, indexes, strict=True):
            for shard in index["shards"]:
                writer.add_file(
                    Path(part_dir) / shard["images"],
                    Path(part_dir) / shard["labels"],
                    histogram=shard["pixel_histogram"],
                    sha256=(shard["images_sha256"], shard["labels_sha256"]),
                )
        return writer.commit(
            extra={
                "classes": listing.classes,
                "label_counts": [int(c) for c in counts],
                "listed": len(listing),
                "skipped_count": len(skipped),
                "skipped": skipped,
                "resize": resize,
                "listing_sha256": listing.sha256,
            }
        )
