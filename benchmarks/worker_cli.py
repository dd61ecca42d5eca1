"""The one command line of every framework's benchmark worker (``python -m benchmarks.<fw>_worker``).

A worker runs inside its framework's venv and holds only its framework's arms; this module
does the rest for all of them: the sub-commands and their arguments (one table, so the
driver side builds every worker's command line with ``arguments`` from the same table the
worker parses with), the run spec (``--spec-json``, ``RunSpec.to_json()``, read back as a
``RunSpec``) and the output (every row a command yields, one JSON object a line on
stdout; anything else a worker prints is progress, which the driver ignores).

Standard library and ``dlscale.runspec`` only: it is imported in every framework's venv.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dlscale.runspec import RunSpec

#: A worker's sub-command: parsed arguments in (``args.spec`` is the RunSpec where the
#: command takes one), rows out.
Command = Callable[[argparse.Namespace], Iterable[Mapping[str, Any]]]

_SPEC = {"spec": {"required": True, "help": "the run spec, RunSpec.to_json()"}}
_DATA = {"data": {"required": True, "type": Path, "help": "shard set directory"}}

#: Every sub-command a worker may offer, with its options (argparse keywords by name; the
#: flag is ``--name``, ``--spec-json`` for ``spec``).
COMMANDS: Mapping[str, Mapping[str, Mapping[str, Any]]] = {
    # runner vs bare loop vs matmul peak, rotated per repeat (benchmarks.runner_arm)
    "training": {**_SPEC, **_DATA, "repeats": {"type": int, "default": 5}},
    # one bare-loop process (BigDL: one SparkContext per process), then the peak if asked
    # (``deployment``: where the bare loop runs, for frameworks with more than one: BigDL's
    # local mode, or a standalone cluster as the runner's)
    "bare": {
        **_SPEC,
        **_DATA,
        "peak": {"action": "store_true", "help": "then the matmul peak"},
        "deployment": {"choices": ["local", "standalone"], "default": "local"},
    },
    # forward + backward FLOPs per sample of each model
    "flops": {"models": {"nargs": "+", "required": True}},
}


def _flag(name: str) -> str:
    return "--spec-json" if name == "spec" else "--" + name.replace("_", "-")


def arguments(command: str, **values: Any) -> list[str]:
    """The arguments of ``command`` for a worker (driver side): ``spec`` a RunSpec, lists
    for the ``nargs`` options, True for a flag; an option the command lacks is an error."""
    options = COMMANDS[command]
    out = [command]
    for name, value in values.items():
        if name not in options:
            raise TypeError(f"worker command {command!r} has no option {name!r} (has: {', '.join(options)})")
        if isinstance(value, RunSpec):
            out += [_flag(name), value.to_json()]
        elif value is True:
            out.append(_flag(name))
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            out += [_flag(name), *map(str, value)]
        else:
            out += [_flag(name), str(value)]
    return out


def parse_args(
    commands: Sequence[str], argv: list[str] | None = None, description: str = ""
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands:
        sub_parser = sub.add_parser(command)
        for name, kwargs in COMMANDS[command].items():
            sub_parser.add_argument(_flag(name), dest=name, **kwargs)
    args = parser.parse_args(argv)
    if isinstance(getattr(args, "spec", None), str):
        args.spec = RunSpec.from_json(args.spec)
    return args


def emit(row: Mapping[str, Any]) -> None:
    """One result row: a JSON object on a line of its own, flushed at once."""
    print(json.dumps(dict(row)), flush=True)


def main(commands: Mapping[str, Command], argv: list[str] | None = None, description: str = "") -> int:
    """Parse the command line, run the command, print its rows; a worker's whole ``main``."""
    args = parse_args(list(commands), argv, description)
    for row in commands[args.command](args):
        emit(row)
    return 0


def run(commands: Mapping[str, Command], doc: str | None) -> None:
    """``if __name__ == "__main__": worker_cli.run(COMMANDS, __doc__)``."""
    sys.exit(main(commands, description=(doc or "").split("\n\n")[0]))
