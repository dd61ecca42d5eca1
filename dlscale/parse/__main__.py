"""``python -m dlscale.parse {bigdl|caffe} LOG``: a native log as events on stdout.

Each event is printed (and flushed) as soon as the parser completes it, so the memory used
does not grow with the log, and ``tail -f``-like following works (LOG may be a FIFO or
``/dev/stdin``). Non-finite numbers are written as the strings ``"nan"``, ``"inf"``,
``"-inf"`` (``dlscale.parse.portable``). Exit 0: the log was read; a failed run is a
``run_end`` event with ``"status": "failed"``. Exit 2: the log is malformed, empty, not
text or unreadable (``FILE:LINE: message`` on stderr); discard what was printed before.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from typing import Any, TextIO

import dlscale.parse as package
from dlscale.events import dumps
from dlscale.parse import ParseError, portable


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def _print_events(module: Any, log: str, out: TextIO) -> None:
    for event in module.iter_events(log):
        out.write(dumps(portable(event)) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlscale.parse", description=__doc__)
    parser.add_argument("format", choices=available())
    parser.add_argument("log")
    args = parser.parse_args(argv)
    module = importlib.import_module(f"dlscale.parse.{args.format}")
    try:
        _print_events(module, args.log, sys.stdout)
    except BrokenPipeError:
        # The reader went away (``| head``): not an error of the log. Python would report
        # the pipe again when it flushes stdout at exit; point stdout at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ParseError as err:
        print(err, file=sys.stderr)
        return 2
    except OSError as err:
        print(f"{args.log}:0: {err.strerror or err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
