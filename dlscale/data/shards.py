"""The framework-neutral sharded dataset format that every runner reads.

Every framework must train on byte-identical data, and runners must not depend on each
other's data loaders, so datasets are prepared once into a plain format that numpy (and
hence any framework) reads directly: a directory with ``index.json`` and pairs of ``.npy``
files, ``shard-00000-images.npy`` (uint8, NHWC) and ``shard-00000-labels.npy`` (int64).

``index.json`` holds ``format`` (``dlscale-shards/1``), ``dataset``, ``split``,
``num_samples``, ``image_shape`` ([H, W, C]), ``num_classes``, ``mean`` and ``std`` (pixel
statistics on [0, 1] that runners normalise with, so that all frameworks normalise alike),
``source`` (free text) and ``shards`` (file names, sample counts and sha256 of each file).

A shard set is written into a temporary sibling directory and renamed into place only when
complete, so a directory that has an ``index.json`` is a whole shard set: an interrupted
job leaves no half-written data for a later run to train on. Each rank reads only its own
contiguous block of samples (``ShardSet.load_part``), through memory maps, so a rank never
loads the whole set.

Input pipelines (study option ``input: pipeline``; the run spec then carries ``input`` and
``input_workers``). A runner reads its block ``ShardSet.rank_range(rank, world)`` through
its framework's own pipeline instead of ``load_part``, fetching shuffled batches with
``ShardSet.take(indices)`` (random access through memory maps, safe in forked workers),
and passes the time the step waited for its batch as ``input_s`` to
``ctx.record_iteration`` (in both modes, so the two can be compared). The torch runner
does it with a DataLoader of ``input_workers`` processes over batches of indices
(dlscale/runners/torch/train.py, ``Batches``). The same shape elsewhere: TensorFlow,
tf.data over index batches, ``take`` in ``input_workers`` parallel map calls, 2 batches
prefetched (dlscale/runners/tensorflow/batches.py); Caffe, its MemoryData layer fed by a
prefetch thread filling a ring of 4 batches (this Caffe build has no Python layer;
dlscale/runners/caffe/data.py); BigDL, the shards read on the executors through a Spark
RDD (dlscale/runners/bigdl/data.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from dlscale.base import atomic

FORMAT = "dlscale-shards/1"
INDEX_NAME = "index.json"
_HIST_CHUNK = 1 << 22  # elements per bincount call: bounds the temporary intp copy to 32 MiB


#: The held-out split of a dataset lives beside its training shard set, in this folder:
#: runners evaluate on ``heldout_dir(<their --data>)`` (dlscale.runners.common).
HELDOUT = "heldout"


def heldout_dir(train_dir: str | os.PathLike[str]) -> Path:
    """Where the held-out shard set of the training set at ``train_dir`` lies."""
    return Path(train_dir).parent / HELDOUT


class DatasetError(ValueError):
    """A dataset file that is missing, malformed, corrupted or not the data it claims to be.

    Messages are one line and start with the offending file, so a person can go straight to it.
    """


def rank_range(rank: int, world: int, num_samples: int) -> tuple[int, int]:
    """The contiguous block ``[rank*N//world, (rank+1)*N//world)`` that ``rank`` trains on.

    Blocks are disjoint, cover all samples and differ in size by at most one. Every rank
    must get at least one sample, hence ``world <= num_samples``.
    """
    if world < 1:
        raise ValueError(f"world size {world} must be >= 1")
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside [0, {world})")
    if world > num_samples:
        raise ValueError(f"world size {world} exceeds the {num_samples} samples (a rank would get none)")
    return rank * num_samples // world, (rank + 1) * num_samples // world


def _histogram(images: np.ndarray) -> np.ndarray:
    """Counts of each uint8 value; chunked because bincount copies its input to intp."""
    flat = np.ascontiguousarray(images).reshape(-1)
    hist = np.zeros(256, dtype=np.int64)
    for start in range(0, flat.size, _HIST_CHUNK):
        hist += np.bincount(flat[start : start + _HIST_CHUNK], minlength=256)
    return hist


def _stats_from_histogram(hist: np.ndarray) -> tuple[float, float]:
    values = np.arange(256, dtype=np.int64)
    n, s1, s2 = int(hist.sum()), int(hist @ values), int(hist @ values**2)
    if n == 0:
        raise ValueError("no pixels to compute statistics of")
    # Exact integer sums (Python ints), so the result does not depend on shard sizes or order.
    return s1 / n / 255.0, float(np.sqrt((n * s2 - s1 * s1) / (n * n))) / 255.0


def pixel_histogram(images: np.ndarray) -> np.ndarray:
    """Counts of each uint8 pixel value (256 int64s): what parts of a set sum, so that the
    gathered set's mean and std are exact whichever job converted which images."""
    if images.dtype != np.uint8:
        raise ValueError(f"pixel_histogram needs uint8 images, got {images.dtype}")
    return _histogram(images)


def stats_from_histogram(hist: np.ndarray | list[int]) -> tuple[float, float]:
    """Mean and standard deviation on [0, 1] of the pixels a ``pixel_histogram`` counted."""
    hist = np.asarray(hist, dtype=np.int64)
    if hist.shape != (256,) or (hist < 0).any():
        raise ValueError(f"a pixel histogram has 256 non-negative counts, got shape {hist.shape}")
    return _stats_from_histogram(hist)


def pixel_stats(images: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of uint8 pixels scaled to [0, 1] (what runners normalise with)."""
    if images.dtype != np.uint8:
        raise ValueError(f"pixel_stats needs uint8 images, got {images.dtype}")
    return _stats_from_histogram(_histogram(images))


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


class ShardWriter:
    """Writes a shard set shard by shard, so that large sets never sit in memory whole.

    Shards go into a private temporary sibling of ``out_dir``; ``commit()`` writes
    ``index.json`` and renames the directory into place (replacing an existing ``out_dir``).
    Used as a context manager, an exception (or leaving without ``commit``) removes the
    temporary directory and leaves ``out_dir`` untouched.
    """

    def __init__(
        self, out_dir: str | os.PathLike[str], *, dataset: str, split: str, num_classes: int, source: str
    ) -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes {num_classes} must be >= 1")
        self.out_dir = Path(out_dir)
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self._tmp: Path | None = Path(
            tempfile.mkdtemp(prefix=f".{self.out_dir.name}.tmp-", dir=self.out_dir.parent)
        )
        os.chmod(self._tmp, atomic.dir_mode())
        self._meta = {"dataset": dataset, "split": split, "num_classes": int(num_classes), "source": source}
        self._shards: list[dict[str, Any]] = []
        self._image_shape: tuple[int, ...] | None = None
        self._hist = np.zeros(256, dtype=np.int64)  # pixel-value histogram: exact mean/std at the end

    @property
    def num_samples(self) -> int:
        return sum(shard["num_samples"] for shard in self._shards)

    def add(self, images: np.ndarray, labels: np.ndarray) -> None:
        """Write one shard: ``images`` uint8 (n, H, W, C), ``labels`` integers in [0, num_classes)."""
        if self._tmp is None:
            raise RuntimeError("ShardWriter already committed or aborted")
        if images.dtype != np.uint8 or images.ndim != 4:
            raise ValueError(f"images must be uint8 NHWC, got {images.dtype} of shape {images.shape}")
        if self._image_shape is not None and images.shape[1:] != self._image_shape:
            raise ValueError(
                f"image shape {images.shape[1:]} differs from earlier shards' {self._image_shape}"
            )
        labels = np.asarray(labels)
        if labels.shape != images.shape[:1] or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(
                f"labels must be integers of shape ({images.shape[0]},), got {labels.dtype} {labels.shape}"
            )
        if len(labels) == 0:
            raise ValueError("a shard must hold at least one sample")
        if labels.min() < 0 or labels.max() >= self._meta["num_classes"]:
            raise ValueError(
                f"labels outside [0, {self._meta['num_classes']}): {labels.min()}..{labels.max()}"
            )
        self._image_shape = images.shape[1:]
        self._hist += _histogram(images)
        entry: dict[str, Any] = {"num_samples": int(len(labels))}
        stem = f"shard-{len(self._shards):05d}"
        for kind, array in (("images", images), ("labels", labels.astype(np.int64))):
            data = _npy_bytes(np.ascontiguousarray(array))
            (self._tmp / f"{stem}-{kind}.npy").write_bytes(data)
            entry[kind] = f"{stem}-{kind}.npy"
            entry[f"{kind}_sha256"] = hashlib.sha256(data).hexdigest()
        self._shards.append(entry)

    def add_file(
        self,
        images_path: str | os.PathLike[str],
        labels_path: str | os.PathLike[str],
        *,
        histogram: np.ndarray | list[int],
        sha256: tuple[str, str] | None = None,
    ) -> None:
        """Adopt an already written pair of shard files (e.g. one converted by another job).

        The files are hard-linked into the set (copied where linking is impossible), so a
        gather step over terabytes of converted parts moves no data. Shapes, dtypes and
        labels are checked through memory maps; ``histogram`` (the images'
        ``pixel_histogram``, recorded when they were written) keeps mean/std exact without
        reading every pixel again. ``sha256`` (images, labels), when the writer of the files
        recorded it, is taken as is; otherwise the adopted bytes are hashed.
        """
        if self._tmp is None:
            raise RuntimeError("ShardWriter already committed or aborted")
        images = np.load(images_path, mmap_mode="r", allow_pickle=False)
        labels = np.load(labels_path, mmap_mode="r", allow_pickle=False)
        if images.dtype != np.uint8 or images.ndim != 4 or labels.dtype != np.int64 or labels.ndim != 1:
            raise ValueError(f"{images_path}, {labels_path}: not a uint8 NHWC / int64 shard pair")
        if len(labels) != len(images) or len(labels) == 0:
            raise ValueError(f"{images_path}: {len(images)} images but {len(labels)} labels")
        if self._image_shape is not None and images.shape[1:] != self._image_shape:
            raise ValueError(
                f"{images_path}: image shape {images.shape[1:]} differs from {self._image_shape}"
            )
        if labels.min() < 0 or labels.max() >= self._meta["num_classes"]:
            raise ValueError(f"{labels_path}: labels outside [0, {self._meta['num_classes']})")
        hist = np.asarray(histogram, dtype=np.int64)
        if hist.shape != (256,) or int(hist.sum()) != images.size:
            raise ValueError(f"{images_path}: histogram does not count its {images.size} pixels")
        self._image_shape = images.shape[1:]
        del images, labels
        self._hist += hist
        entry: dict[str, Any] = {"num_samples": 0}
        stem = f"shard-{len(self._shards):05d}"
        known = sha256 or (None, None)
        for kind, src, digest in (
            ("images", Path(images_path), known[0]),
            ("labels", Path(labels_path), known[1]),
        ):
            dest = self._tmp / f"{stem}-{kind}.npy"
            try:
                os.link(src, dest)
            except OSError:
                shutil.copyfile(src, dest)
            if digest is None:
                with open(dest, "rb") as handle:
                    digest = hashlib.file_digest(handle, "sha256").hexdigest()
            entry[f"{kind}_sha256"] = digest
            entry[kind] = dest.name
        entry["num_samples"] = int(np.load(dest, mmap_mode="r", allow_pickle=False).shape[0])
        self._shards.append(entry)

    def pixel_stats(self) -> tuple[float, float]:
        """Mean and standard deviation of all pixels written so far, on [0, 1]."""
        return _stats_from_histogram(self._hist)

    def commit(
        self, *, mean: float | None = None, std: float | None = None, extra: dict[str, Any] | None = None
    ) -> Path:
        """Write ``index.json`` and move the set to ``out_dir``; mean/std computed unless given.

        ``extra`` adds dataset-specific keys to the index (e.g. a class map, skipped files);
        it cannot override the keys that readers rely on.
        """
        if self._tmp is None:
            raise RuntimeError("ShardWriter already committed or aborted")
        if not self._shards:
            raise ValueError(f"{self.out_dir}: no shards written")
        computed = self.pixel_stats()
        assert self._image_shape is not None
        index = {
            "format": FORMAT,
            "dataset": self._meta["dataset"],
            "split": self._meta["split"],
            "num_samples": self.num_samples,
            "image_shape": [int(d) for d in self._image_shape],
            "num_classes": self._meta["num_classes"],
            "mean": float(computed[0] if mean is None else mean),
            "std": float(computed[1] if std is None else std),
            "source": self._meta["source"],
            "shards": self._shards,
        }
        clash = sorted(set(extra or {}) & set(index))
        if clash:
            raise ValueError(f"extra index keys {clash} would override the format's own")
        index.update(extra or {})
        (self._tmp / INDEX_NAME).write_text(json.dumps(index, indent=1) + "\n")
        trash = None
        if self.out_dir.exists() or self.out_dir.is_symlink():
            # A non-empty directory cannot be replaced by rename: move it aside first.
            trash = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.old-", dir=self.out_dir.parent))
            os.rename(self.out_dir, trash / "old")
        os.rename(self._tmp, self.out_dir)
        self._tmp = None
        if trash is not None:
            shutil.rmtree(trash)
        return self.out_dir

    def abort(self) -> None:
        """Remove the temporary directory; ``out_dir`` is left as it was."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.abort()


def write_shards(
    out_dir: str | os.PathLike[str],
    images: np.ndarray,
    labels: np.ndarray,
    *,
    dataset: str,
    split: str,
    num_classes: int,
    shard_size: int,
    source: str,
    mean: float | None = None,
    std: float | None = None,
) -> Path:
    """Write in-memory ``images`` (uint8 NHWC) and ``labels`` as a shard set at ``out_dir``.

    Shards hold ``shard_size`` samples (the last one the rest). The set appears atomically;
    an existing ``out_dir`` is replaced. Returns ``out_dir``.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size {shard_size} must be >= 1")
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    with ShardWriter(out_dir, dataset=dataset, split=split, num_classes=num_classes, source=source) as writer:
        for start in range(0, len(images), shard_size):
            writer.add(images[start : start + shard_size], labels[start : start + shard_size])
        return writer.commit(mean=mean, std=std)


def _read_index(directory: Path) -> dict[str, Any]:
    path = directory / INDEX_NAME
    if not path.is_file():
        raise DatasetError(f"{path}: missing (not a shard set, or its writing was interrupted)")
    try:
        index = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DatasetError(f"{path}: unreadable JSON ({err})") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        found = index.get("format") if isinstance(index, dict) else type(index).__name__
        raise DatasetError(f"{path}: format {found!r} is not {FORMAT!r}")
    checks = {
        "dataset": lambda v: isinstance(v, str),
        "split": lambda v: isinstance(v, str),
        "source": lambda v: isinstance(v, str),
        "num_samples": lambda v: type(v) is int and v > 0,
        "num_classes": lambda v: type(v) is int and v > 0,
        "image_shape": lambda v: (
            isinstance(v, list) and len(v) == 3 and all(type(d) is int and d > 0 for d in v)
        ),
        "mean": lambda v: type(v) in (int, float),
        "std": lambda v: type(v) in (int, float),
        "shards": lambda v: isinstance(v, list) and len(v) > 0,
    }
    for key, ok in checks.items():
        if key not in index or not ok(index[key]):
            raise DatasetError(f"{path}: field {key!r} is missing or invalid ({index.get(key)!r})")
    shard_keys = ("images", "labels", "num_samples", "images_sha256", "labels_sha256")
    for i, shard in enumerate(index["shards"]):
        if not isinstance(shard, dict) or any(key not in shard for key in shard_keys):
            raise DatasetError(f"{path}: shard entry {i} lacks one of {', '.join(shard_keys)}")
    total = sum(shard["num_samples"] for shard in index["shards"])
    if total != index["num_samples"]:
        raise DatasetError(f"{path}: shards hold {total} samples but num_samples is {index['num_samples']}")
    return index


def _check_npy(path: Path, shape: tuple[int, ...], dtype: type) -> None:
    """Check a shard file exists and has exactly the size, shape and dtype its entry implies."""
    if not path.is_file():
        raise DatasetError(f"{path}: missing shard file (listed in {INDEX_NAME})")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise DatasetError(f"{path}: unreadable or truncated shard ({err})") from None
    if array.shape != shape or array.dtype != dtype:
        raise DatasetError(
            f"{path}: holds {array.dtype} {array.shape}, index implies {np.dtype(dtype)} {shape}"
        )
    size, expected = path.stat().st_size, array.offset + array.nbytes
    if size != expected:
        raise DatasetError(f"{path}: {size} bytes but its header implies {expected} (truncated or padded)")


class ShardSet:
    """A shard set on disk, checked on opening.

    Opening checks ``index.json`` and that every shard file exists with the size its header
    implies (cheap: headers and file sizes only), which catches missing and truncated
    shards. ``verify=True`` also checks each file's sha256, which reads every byte and
    catches silent corruption.
    """

    def __init__(self, path: str | os.PathLike[str], verify: bool = False) -> None:
        self.path = Path(path)
        self.index: dict[str, Any] = _read_index(self.path)
        self._offsets: list[int] = []
        self._maps: list[tuple[np.ndarray, np.ndarray]] | None = None  # opened by take()
        offset = 0
        for shard in self.index["shards"]:
            self._offsets.append(offset)
            offset += shard["num_samples"]
            n = shard["num_samples"]
            _check_npy(self.path / shard["images"], (n, *self.image_shape), np.uint8)
            _check_npy(self.path / shard["labels"], (n,), np.int64)
        if verify:
            self.verify()

    def verify(self, start: int = 0, stop: int | None = None) -> None:
        """Check the sha256 of every shard file holding samples of ``[start, stop)``.

        The whole set by default; a range where a process reads only its block (BigDL's
        executors), so nobody hashes what it will not read. Raises ``DatasetError``
        naming the file: "...: sha256 mismatch (corrupted shard)".
        """
        stop = self.num_samples if stop is None else stop
        for shard, lo in zip(self.index["shards"], self._offsets, strict=True):
            if lo + int(shard["num_samples"]) <= start or lo >= stop:
                continue
            for kind in ("images", "labels"):
                file = self.path / shard[kind]
                with open(file, "rb") as handle:
                    digest = hashlib.file_digest(handle, "sha256").hexdigest()
                if digest != shard[f"{kind}_sha256"]:
                    raise DatasetError(f"{file}: sha256 mismatch (corrupted shard)")

    @property
    def num_samples(self) -> int:
        return int(self.index["num_samples"])

    @property
    def image_shape(self) -> tuple[int, int, int]:
        height, width, channels = self.index["image_shape"]
        return height, width, channels

    @property
    def num_classes(self) -> int:
        return int(self.index["num_classes"])

    @property
    def mean(self) -> float:
        return float(self.index["mean"])

    @property
    def std(self) -> float:
        return float(self.index["std"])

    def __len__(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        name = f"{self.index['dataset']}/{self.index['split']}"
        return f"ShardSet({str(self.path)!r}, {name}, n={self.num_samples})"

    def rank_range(self, rank: int, world: int) -> tuple[int, int]:
        """The sample range ``[start, stop)`` of ``rank`` among ``world`` ranks (see ``rank_range``)."""
        return rank_range(rank, world, self.num_samples)

    def load_part(self, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
        """Images (uint8 NHWC) and int64 labels of ``rank``'s block, reading only overlapping shards."""
        return self._load_range(*self.rank_range(rank, world))

    def take(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Images and labels of the samples at ``indices`` (global positions, any order).

        This is the random access an input pipeline needs (a framework's loader picks a
        shuffled batch from the rank's block): only the requested rows are read, through
        memory maps opened once per process, so a pipeline's worker never holds the set.
        """
        indices = np.asarray(indices, dtype=np.int64)
        if indices.ndim != 1 or (indices.size and (indices.min() < 0 or indices.max() >= self.num_samples)):
            raise IndexError(f"sample indices must be a 1-d array within [0, {self.num_samples})")
        if self._maps is None:
            self._maps = [
                tuple(
                    np.load(self.path / shard[kind], mmap_mode="r", allow_pickle=False)
                    for kind in ("images", "labels")
                )
                for shard in self.index["shards"]
            ]
        images = np.empty((len(indices), *self.image_shape), dtype=np.uint8)
        labels = np.empty(len(indices), dtype=np.int64)
        which = np.searchsorted(np.asarray(self._offsets), indices, side="right") - 1
        for shard in np.unique(which):
            mine = np.flatnonzero(which == shard)
            local = indices[mine] - self._offsets[shard]
            order = np.argsort(local, kind="stable")  # ascending reads are kinder to disks
            mapped_images, mapped_labels = self._maps[shard]
            images[mine[order]] = mapped_images[local[order]]
            labels[mine[order]] = mapped_labels[local[order]]
        return images, labels

    def load_all(self) -> tuple[np.ndarray, np.ndarray]:
        """All images (uint8 NHWC) and int64 labels, in order."""
        return self._load_range(0, self.num_samples)

    def _load_range(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        images = np.empty((stop - start, *self.image_shape), dtype=np.uint8)
        labels = np.empty(stop - start, dtype=np.int64)
        for offset, shard in zip(self._offsets, self.index["shards"], strict=True):
            lo, hi = max(start, offset), min(stop, offset + shard["num_samples"])
            if lo >= hi:
                continue
            for kind, out in (("images", images), ("labels", labels)):
                mapped = np.load(self.path / shard[kind], mmap_mode="r", allow_pickle=False)
                out[lo - start : hi - start] = mapped[lo - offset : hi - offset]
                del mapped
        return images, labels


class IndexBatches:
    """Endless sorted index batches over ``n`` samples, one fresh permutation per epoch.

    Every runner draws its batches from this one class, with the same seed (the run's seed
    plus the rank), so that every framework trains on the same samples in the same order:
    frameworks are compared on the same work. Sorted indices make each batch a forward
    read through the memory-mapped shards.
    """

    def __init__(self, n: int, batch: int, seed: int):
        self.n, self.batch = n, batch
        self.rng = np.random.default_rng(seed)
        self.order = self.rng.permutation(n)
        self.position = 0

    def __iter__(self) -> IndexBatches:
        return self

    def __next__(self) -> np.ndarray:
        if self.position + self.batch > len(self.order):
            self.order = self.rng.permutation(self.n)
            self.position = 0
        index = np.sort(self.order[self.position : self.position + self.batch])
        self.position += self.batch
        return index


class GlobalBatchSlices:
    """Rank ``rank``'s slice of one global batch sequence over all ``n`` samples.

    With the shared initialisation (run spec ``init: shared``) every rank draws the same
    global batches (``IndexBatches`` over the whole set, batch x world, the run's seed) and
    trains on its ``batch`` consecutive indices of each: N ranks of ``batch`` then see
    exactly the samples that one rank of N x ``batch`` sees, which is what the parity check
    compares. Indices are into the whole set (a rank loads it all: MNIST-sized data only).
    """

    def __init__(self, n: int, batch: int, world: int, rank: int, seed: int):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not within a world of {world}")
        self.inner = IndexBatches(n, batch * world, seed)
        self.batch = batch
        self.start, self.stop = rank * batch, (rank + 1) * batch

    def __iter__(self) -> GlobalBatchSlices:
        return self

    def __next__(self) -> np.ndarray:
        return next(self.inner)[self.start : self.stop]
