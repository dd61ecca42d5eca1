"""What a rendered figure draws, read from Vega's scene graph (vl-convert): for tests that
check a figure a reader can see, not only the rows its marks were drawn from."""

from __future__ import annotations

from typing import Any


def drawn_symbols(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every drawn point (symbol mark) of a Vega-Lite ``spec``: its scene item (``x``, ``y``,
    ``shape``, ``fill``, ``stroke``, ``description``); legend symbols are left out."""
    import vl_convert

    found: list[dict[str, Any]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("marktype") == "symbol" and node.get("role") == "mark":
                found.extend(item for item in node.get("items", []) if item.get("description"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(vl_convert.vegalite_to_scenegraph(spec)["scenegraph"])
    return found


def described(item: dict[str, Any]) -> dict[str, str]:
    """A drawn item's ARIA description (``field: value; ...``) as a mapping."""
    return dict(part.split(": ", 1) for part in str(item["description"]).split("; "))
