"""Measure real-ImageNet shard preparation: images/s and peak memory, on real JPEGs.

    python scripts/imagenet_bench.py --images 2000 --jobs 2 --work /tmp/imagenet-bench

Writes an ILSVRC-style folder of photo-like JPEGs (smooth colour fields plus noise, 500x375
like a typical ImageNet photo, quality 90), then runs what the workflow runs: the listing,
``--jobs`` conversion parts at once (one process each, as Snakemake's parallel jobs), and
the gather. Prints one JSON object: images/s overall and per job, and each stage's peak
resident memory (max RSS of the processes that ran it). The folder is kept for reruns.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np


def make_photos(root: Path, images: int, classes: int, size: tuple[int, int], seed: int = 0) -> None:
    """``images`` JPEGs of ``size`` in ``classes`` class folders under ``root/train``."""
    from PIL import Image

    if (root / "train").is_dir() and sum(1 for _ in (root / "train").rglob("*.JPEG")) == images:
        return
    rng = np.random.default_rng(seed)
    width, height = size
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    for i in range(images):
        folder = root / "train" / f"n{i % classes:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        a, b, c = rng.uniform(0.005, 0.03, size=3)
        phase = rng.uniform(0, 6.3, size=3)
        field = np.stack(
            [127 + 100 * np.sin(a * xx + b * yy + phase[k] + k * c * xx) for k in range(3)], axis=-1
        )
        field += rng.normal(0, 12, size=field.shape)
        pixels = np.clip(field, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"img_{i:06d}.JPEG", quality=90)


def _convert(args: tuple[str, int, int, str, int, int, int]) -> dict:
    from dlscale.data import imagenet

    listing_path, part, parts, out, image_size, resize, shard_size = args
    listing = imagenet.Listing.read(listing_path)
    started = time.perf_counter()
    index = imagenet.convert_part(
        listing, part, parts, out, image_size=image_size, resize=resize, shard_size=shard_size
    )
    return {
        "part": part,
        "converted": index["converted"],
        "seconds": time.perf_counter() - started,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2, help="conversion parts run at once")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--resize", type=int, default=256)
    parser.add_argument("--shard-size", type=int, default=128)
    parser.add_argument("--work", type=Path, default=Path("/tmp/imagenet-bench"))
    args = parser.parse_args()

    from dlscale.data import imagenet
    from dlscale.data.shards import ShardSet

    source = args.work / "source"
    started = time.perf_counter()
    make_photos(source, args.images, args.classes, (500, 375))
    generate_s = time.perf_counter() - started
    jpeg_mb = sum(p.stat().st_size for p in (source / "train").rglob("*.JPEG")) / 2**20

    started = time.perf_counter()
    listing = imagenet.list_split(source)
    listing_path = listing.write(args.work / "listing.json")
    listing_s = time.perf_counter() - started

    parts_dir = args.work / "parts"
    for old in parts_dir.glob("part-*"):  # measure a fresh conversion, not a resume
        import shutil

        shutil.rmtree(old)
    jobs = [
        (
            str(listing_path),
            k,
            args.jobs,
            str(parts_dir / f"part-{k}"),
            args.image_size,
            args.resize,
            args.shard_size,
        )
        for k in range(args.jobs)
    ]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(_convert, jobs))
    convert_s = time.perf_counter() - started

    started = time.perf_counter()
    out = imagenet.gather(listing, [job[3] for job in jobs], args.work / "shards")
    gather_s = time.perf_counter() - started
    shards = ShardSet(out, verify=True)
    converted = sum(r["converted"] for r in results)
    report = {
        "images": args.images,
        "jpeg_size": [500, 375],
        "jpeg_mb": round(jpeg_mb, 1),
        "output": [args.image_size, args.image_size, 3],
        "jobs": args.jobs,
        "converted": converted,
        "samples_in_set": shards.num_samples,
        "generate_s": round(generate_s, 1),
        "listing_s": round(listing_s, 3),
        "convert_s": round(convert_s, 2),
        "gather_s": round(gather_s, 3),
        "images_per_s": round(converted / convert_s, 1),
        "images_per_s_end_to_end": round(converted / (listing_s + convert_s + gather_s), 1),
        "per_job": [
            {
                "part": r["part"],
                "images_per_s": round(r["converted"] / r["seconds"], 1),
                "max_rss_mb": round(r["max_rss_mb"], 1),
            }
            for r in results
        ],
        "peak_rss_mb_per_job": round(max(r["max_rss_mb"] for r in results), 1),
        "peak_rss_mb_listing_gather": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
