"""Build (or update) a framework's virtual environment from its requirements file.

Runs with the workflow's python; the venv is made from the base interpreter so that it
does not inherit the workflow venv's packages. pip is idempotent, so rebuilding over an
existing venv only installs what changed. The marker (the rule's output) is written last
and atomically, recording what was installed.
"""

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from dlscale.events import write_text_atomic  # noqa: E402

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")  # noqa: F821
venv = Path(snakemake.params.venv)  # noqa: F821
requirements = Path(snakemake.input.requirements)  # noqa: F821
marker = Path(snakemake.output.marker)  # noqa: F821


def run(cmd: list[str]) -> str:
    logging.info("$ %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    logging.info("%s%s", proc.stdout, proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}; see {snakemake.log[0]}")  # noqa: F821
    return proc.stdout


started = time.time()
python = venv / "bin" / "python"
if not python.exists():
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)])
run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r", str(requirements)])
freeze = run([str(python), "-m", "pip", "freeze", "--disable-pip-version-check"]).split()
write_text_atomic(
    marker,
    json.dumps(
        {
            "requirements": str(requirements),
            "python": run([str(python), "-c", "import platform; print(platform.python_version())"]).strip(),
            "packages": freeze,
            "build_s": round(time.time() - started, 1),
        },
        indent=2,
    ),
)
logging.info("environment ready in %.1f s", time.time() - started)
