"""Screenshot one category (and optionally one result) of a Snakemake report in Chromium.

    python scripts/report_screenshot.py results/report.html "1.1 How many nodes" OUT.png \
        [--show results/figures/nodes_to_target.svg]

The report is a single-page app without addressable pages, so a copy of it gets a script
that clicks the category (and the result's view button) by their text after load; headless
Chromium then renders it with a virtual-time budget and writes the PNG. Evidence for
docs/ that a section renders in a real browser; not part of the workflow.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NAVIGATE = """<script>
(function () {
  function byText(text) {
    return [...document.querySelectorAll("a,button,li,span,div,td")]
      .filter((e) => e.textContent.trim() === text).pop();
  }
  setTimeout(function () {
    var category = byText(%(category)s);
    if (!category) { document.title = "no category"; return; }
    category.click();
    setTimeout(function () {
      if (!%(show)s) return;
      var row = byText(%(show)s);
      var button = row && row.parentElement && row.parentElement.querySelector("a,button,svg");
      if (button) { button.dispatchEvent(new MouseEvent("click", {bubbles: true})); }
    }, 1500);
  }, 2000);
})();
</script>"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("category")
    parser.add_argument("out", type=Path)
    parser.add_argument("--show", default="", help="a result of the category to open (its path as listed)")
    parser.add_argument("--size", default="1400,1000")
    args = parser.parse_args(argv)
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        sys.exit("report_screenshot: no chromium on PATH")
    html = args.report.read_text(encoding="utf-8")
    script = NAVIGATE % {"category": json.dumps(args.category), "show": json.dumps(args.show)}
    end = html.rfind("</body>")
    with tempfile.TemporaryDirectory(prefix="report-shot-") as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html[:end] + script + html[end:], encoding="utf-8")
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp}/profile",
             f"--window-size={args.size}", "--virtual-time-budget=10000",
             f"--screenshot={args.out.resolve()}", page.as_uri()],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180,
        )  # fmt: skip
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
