"""Real ImageNet into shards, scattered over parts: list once, convert K parts, gather.

K (data.imagenet.parts) is fixed by the config, so the DAG is known before any file is
counted: no checkpoint. Each part is a batch job of its own (on a cluster they spread over
nodes; `snakemake` shows "n of K+2 steps done" and each part's log its images/s), a part
that finished is never redone, and the gather only hard-links the parts' shards.
"""

IMAGENET = STUDY["data"]["imagenet"]


rule imagenet_listing:
    """The real source's files in conversion order, labelled by sorted class name."""
    output:
        listing="results/data/imagenet-real/listing.json",
    log:
        "results/logs/data/imagenet_listing.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        source=IMAGENET["source"],
        split=IMAGENET["split"],
        seed=IMAGENET["seed"],
        val_labels=IMAGENET["val_labels"],
    script:
        "../scripts/imagenet_listing.py"


rule imagenet_part:
    """Decode, resize and centre-crop one part of the listing into its own shards."""
    input:
        listing="results/data/imagenet-real/listing.json",
    output:
        part=directory("results/data/imagenet-real/parts/part-{part}"),
    log:
        "results/logs/data/imagenet_part-{part}.log",
    wildcard_constraints:
        part=r"\d+",
    conda:
        "../envs/workflow.yaml"
    resources:
        runtime=240,
        mem_mb=2000,
    params:
        parts=IMAGENET["parts"],
        image_size=IMAGENET["image_size"],
        resize=IMAGENET["resize"],
        shard_size=IMAGENET["shard_size"],
    script:
        "../scripts/imagenet_part.py"


rule imagenet_gather:
    """Join the converted parts into the shard set the ImageNet models train on."""
    input:
        listing="results/data/imagenet-real/listing.json",
        parts=expand(
            "results/data/imagenet-real/parts/part-{part}",
            part=range(IMAGENET["parts"]),
        ),
    output:
        shards=directory("results/data/imagenet-real/shards"),
    log:
        "results/logs/data/imagenet_gather.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    script:
        "../scripts/imagenet_gather.py"
