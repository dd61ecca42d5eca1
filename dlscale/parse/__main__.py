"""``python -m dlscale.parse {bigdl|caffe} LOG``: a native log as events on stdout."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import dlscale.parse as package
from dlscale.events import dumps
from dlscale.parse import ParseError


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlscale.parse", description=__doc__)
    parser.add_argument("format", choices=available())
    parser.add_argument("log")
    args = parser.parse_args(argv)
    module = importlib.import_module(f"dlscale.parse.{args.format}")
    try:
        events = module.parse(args.log)
    except ParseError as err:
        print(err, file=sys.stderr)
        return 2
    except OSError as err:
        print(f"{args.log}:0: {err.strerror}", file=sys.stderr)
        return 2
    for event in events:
        sys.stdout.write(dumps(event) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
