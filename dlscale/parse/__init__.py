"""Parsers of frameworks' native logs into dlscale events (one module per framework).

Each parser module ``dlscale/parse/<name>.py`` provides ``parse(path) -> list[dict]``
(events; raise ``ParseError`` for malformed input) and is reachable as
``python -m dlscale.parse <name> LOG``, which prints the events as JSON Lines and exits 2
with ``FILE:LINE: message`` on malformed input.
"""


class ParseError(ValueError):
    """Malformed log input. ``str()`` starts with ``FILE:LINE:``."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message
