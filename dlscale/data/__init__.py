"""Datasets for the benchmarks, prepared once and shared by every framework's runner.

``shards`` is the framework-neutral on-disk format (numpy shards + ``index.json``) that all
runners read, so that every framework trains on byte-identical data; ``mnist`` obtains and
verifies real MNIST without internet downloads at run time; ``synthetic`` makes seeded
ImageNet-shaped data where no real ImageNet is at hand. Numpy only: no framework imports.
"""
