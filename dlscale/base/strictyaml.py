"""YAML written by people and other sites, read strictly: PyYAML's safe loader, with what
it lets through refused while the text is read, in time linear in it.

A key given twice in one mapping: PyYAML keeps the last without a word, so a study's
``frameworks:`` written twice runs the second list, and a system file's node count typed
twice drops a published point. Aliases (``*name``): neither a study config nor a system
file has a use for them, and nested ones (a "billion laughs" document) are a few lines
that expand to gigabytes once copied or validated. Nesting deeper than ``MAX_DEPTH``: the
composer and every consumer recurse, so 200 KB of ``[[[[`` is a ``RecursionError`` naming
no file. Every refusal names the line.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml

#: How deep sequences and mappings may nest: a study config nests 4 levels, a system file
#: 3; 64 as ``dlscale.base.foreign.MAX_JSON_DEPTH``, far below Python's recursion limit.
MAX_DEPTH = 64


class RefusedYAML(yaml.MarkedYAMLError):
    """YAML that ``StrictLoader`` refuses (an alias, a key given twice), with its line."""


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping and, unless
    ``aliases`` is set, every alias."""

    aliases = False
    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if not self.aliases and self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise RefusedYAML(
                None, None, f"alias *{event.anchor}: aliases are not allowed here", event.start_mark
            )
        if self.depth >= MAX_DEPTH:
            raise RefusedYAML(
                None,
                None,
                f"nested deeper than {MAX_DEPTH} levels: no config writes that",
                self.peek_event().start_mark,
            )
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # PyYAML's own error names it below
            if key in seen:
                raise RefusedYAML(
                    None, None, f"key {key!r} is given twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load(text: str, name: str = "<unicode string>", aliases: bool = False) -> Any:
    """``text`` as YAML, read by ``StrictLoader``; ``name`` is what its errors say it is;
    ``aliases`` lets aliases through (a study config's are checked after Snakemake's load,
    ``dlscale.study.matrix``, where a scalar's stay allowed).

    Raises ``RefusedYAML`` for what it refuses, ``yaml.YAMLError`` for what is not YAML.
    """
    loader = StrictLoader(text)
    loader.name = name
    loader.aliases = aliases
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
