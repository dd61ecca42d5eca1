"""A run's identity, defined once: its fields, its id, its cell's name and the paths named after it.

A run id is ``{framework}/{model}/n{nodes}x{ranks_per_node}[-{network}]/b{batch}/r{repeat}``
(the network suffix only on an emulated network: ``n2x1-1gbe``). Everything that spells one
derives from ``RUN_ID_TEMPLATE`` here: the study's runs (``Run``, which
``dlscale.study.matrix`` and the job builders use), the parser of a run id
(``RUN_ID_PATTERN``, the launcher's and the tables'), the verdicts' cell names, verify's
reading of recorded events paths, and the rules' output patterns (``run_pattern``,
``cell_pattern``, the Snakemake wildcards of the same template). Changing the template
changes every run id, and with it every run's folder: existing results would be orphaned.

Standard library only: Snakemake imports it when it builds the DAG, and every framework's
venv imports it through dlscale.runspec.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlscale import networks

#: A run's id, as a Snakemake wildcard pattern (``str.format`` fills it too). ``{net}`` is
#: the emulated network's suffix ("-1gbe"), "" on the host network.
RUN_ID_TEMPLATE = "{framework}/{model}/n{nodes}x{ranks_per_node}{net}/b{batch}/r{repeat}"
#: A cell's name: the run id without its repeat (the repeats of a cell are its samples).
CELL_TEMPLATE = RUN_ID_TEMPLATE.removesuffix("/r{repeat}")
#: Where the runs' folders are, relative to the study folder: ``results/runs/<run id>/``.
RUNS_DIR = "results/runs"
#: What each field of a run id may be (regular expressions, without groups).
FIELD_PATTERNS: Mapping[str, str] = {
    "framework": r"[a-z]+",
    "model": r"[a-z0-9]+",
    "nodes": r"\d+",
    "ranks_per_node": r"\d+",
    "net": r"(?:-[a-z0-9]+)?",
    "batch": r"\d+",
    "repeat": r"\d+",
}
#: The fields that are integers.
INT_FIELDS = ("nodes", "ranks_per_node", "batch", "repeat")
#: Snakemake wildcard constraints of the fields whose shape does not depend on the catalog
#: (the study constrains ``framework`` and ``model`` to the catalog's names).
WILDCARD_CONSTRAINTS: Mapping[str, str] = {
    name: FIELD_PATTERNS[name] for name in ("nodes", "ranks_per_node", "batch", "repeat", "net")
}


def template_regex(template: str) -> str:
    """``template``'s wildcards as named groups of ``FIELD_PATTERNS``, the rest literal
    (unanchored, so that a larger pattern can embed it)."""
    # re.split with a group alternates literal text (even places) and wildcard names (odd).
    parts = re.split(r"\{(\w+)\}", template)
    return "".join(
        f"(?P<{part}>{FIELD_PATTERNS[part]})" if index % 2 else re.escape(part)
        for index, part in enumerate(parts)
    )


#: A run id, parsed (the launcher reads one off a run's folder; the tables off a path).
RUN_ID_PATTERN = re.compile("^" + template_regex(RUN_ID_TEMPLATE) + "$")


def events_path_pattern() -> re.Pattern[str]:
    """A run's events path as a runs table records it, ``<prefix>runs/<run id>/events.jsonl``:
    groups ``prefix`` (``results/`` in the workflow) and ``run_id``."""
    return re.compile(
        r"^(?P<prefix>.*?)runs/(?P<run_id>" + template_regex(RUN_ID_TEMPLATE) + r")/events\.jsonl$"
    )


def net_suffix(network: str | None) -> str:
    """The run id's mark of ``network``: "" on the host network, "-1gbe" on emulated-1gbe."""
    if network in (None, "", networks.HOST):
        return ""
    return "-" + str(network).removeprefix(networks.EMULATED_PREFIX)


def network_of_suffix(suffix: str | None) -> str:
    """The ``network`` a run id's suffix stands for ("" -> host, "-1gbe" -> emulated-1gbe)."""
    return networks.EMULATED_PREFIX + suffix[1:] if suffix else networks.HOST


def run_id_fields(run_id: str) -> dict[str, Any] | None:
    """The fields a run id names (integers as integers, ``net`` the emulated network's
    suffix or ""), or None when it is not a run id."""
    match = RUN_ID_PATTERN.match(run_id)
    if match is None:
        return None
    fields: dict[str, Any] = match.groupdict()
    for name in INT_FIELDS:
        fields[name] = int(fields[name])
    fields["net"] = fields["net"] or ""
    return fields


def cell_name(
    framework: str, model: str, network: str | None, nodes: int, ranks_per_node: int, batch: int
) -> str:
    """A cell's name in the run id's shape, without the repeat: ``torch/lenet/n2x1/b64``."""
    return CELL_TEMPLATE.format(
        framework=framework,
        model=model,
        nodes=int(nodes),
        ranks_per_node=int(ranks_per_node),
        net=net_suffix(network),
        batch=int(batch),
    )


def run_dir(run_id: str) -> str:
    """Where a run's events and log live: ``results/runs/<run id>``."""
    return f"{RUNS_DIR}/{run_id}"


def run_pattern(name: str) -> str:
    """The Snakemake pattern of a file ``name`` in every run's folder."""
    return f"{RUNS_DIR}/{RUN_ID_TEMPLATE}/{name}"


def cell_pattern(folder: str, name: str) -> str:
    """The Snakemake pattern of a file ``name`` per cell under ``folder``."""
    return f"{folder}/{CELL_TEMPLATE}/{name}"


@dataclass(frozen=True, order=True)
class Run:
    """One training run of the study matrix: the unit of caching and rerunning."""

    framework: str
    model: str
    nodes: int
    ranks_per_node: int
    batch: int
    repeat: int
    network: str = networks.HOST

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def net_suffix(self) -> str:
        """The run id's mark of an emulated network ("-1gbe"); empty on the host network."""
        return net_suffix(self.network)

    @property
    def run_id(self) -> str:
        return RUN_ID_TEMPLATE.format(**self.wildcards(), repeat=self.repeat)

    @property
    def cell_name(self) -> str:
        return CELL_TEMPLATE.format(**self.wildcards())

    def wildcards(self) -> dict[str, Any]:
        """The wildcards that name the run's cell (every field of its run id but the repeat)."""
        return {
            "framework": self.framework,
            "model": self.model,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "net": self.net_suffix,
            "batch": self.batch,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Run:
        """The run that a run id's fields name (a match's groups, or a job's wildcards:
        integers may be text, ``net`` the suffix)."""
        return cls(
            framework=fields["framework"],
            model=fields["model"],
            nodes=int(fields["nodes"]),
            ranks_per_node=int(fields["ranks_per_node"]),
            batch=int(fields["batch"]),
            repeat=int(fields["repeat"]),
            network=network_of_suffix(fields["net"]),
        )

    @classmethod
    def from_run_id(cls, run_id: str) -> Run:
        match = RUN_ID_PATTERN.match(run_id)
        if not match:
            raise ValueError(f"not a run id: {run_id!r} (expected {{fw}}/{{model}}/nNxP/bB/rR)")
        return cls.from_fields(match.groupdict())
