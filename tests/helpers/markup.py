"""Hostile run strings and the check that they stayed text: the elements and event-handler
attributes a page holds, as a browser's tokenizer splits it (``html.parser``), and the DOM
Debian's headless Chromium builds after running the page's scripts. Used by the escaping
tests (tests/unit/test_escaping.py, tests/workflow/test_report_escaping.py) and the fault
table's row for markup in run strings."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

IMG = "<img src=x onerror=alert(1)>"
SVG = "<svg onload=alert(3)>"
BREAKOUT = "</script>" + IMG
#: What a hostile sender writes into a run's strings.
HOSTILE = {
    "hosts": [f"{IMG}/node0", f"{BREAKOUT}/node1"],
    "versions": {"torch": SVG, "python": BREAKOUT},
    "settings": {"engine": BREAKOUT, "env": {"OMP_NUM_THREADS": SVG}},
    "git_sha": BREAKOUT,
    "config_sha256": SVG,
}

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_CHROMIUM = (
    "Debian's chromium is not installed (scripts/ensure-system.sh installs it: apt-get install chromium)"
)


class Elements(HTMLParser):
    """Every element and its attributes, as a browser's tokenizer splits the page (script
    and style content is text, as it is to a browser)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def live_markup(text: str, marker: str = "alert(") -> list[str]:
    """The elements and attributes a hostile string would have made: an ``img`` or any
    element with a handler attribute (``on...``) whose value carries ``marker`` (what the
    hostile strings run; a page's own handlers and images do not)."""
    parser = Elements()
    parser.feed(text)
    parser.close()
    found = []
    for tag, attrs in parser.tags:
        handlers = {name: value for name, value in attrs.items() if name.startswith("on")}
        if tag == "img" and (attrs.get("src") == "x" or any(marker in (v or "") for v in handlers.values())):
            found.append(f"<img {attrs}>")
        found += [f"<{tag} {name}={value!r}>" for name, value in handlers.items() if marker in (value or "")]
    return found


def browser_dom(page: Path, profile: Path, timeout: float = 120) -> str:
    """The DOM headless Chromium holds after loading ``page`` and running its scripts for up
    to 3 s of virtual time."""
    assert CHROMIUM is not None, NO_CHROMIUM
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
         "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip(), f"{page.name}: empty DOM"
    return proc.stdout
