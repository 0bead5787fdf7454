"""JSON text: deterministic pretty output, and parsing from an archive without letting its
shape hurt the reader.

orjson (3.8 at least) has no nesting limit of its own and overflows the C stack on deeply
nested objects, which kills the process; Python's ``json`` raises ``RecursionError``. So the
nesting depth is measured on the raw bytes first, and only JSON within the limit reaches a
parser.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from .exceptions import DecodeError

__all__ = ["dump_json", "loads", "nesting_exceeds", "parse_json"]

#: The deepest JSON handed to orjson whatever the configured limit; deeper (when a caller
#: raises the limit) goes to Python's json, which fails cleanly instead of crashing.
ORJSON_MAX_DEPTH = 512

# A JSON string (so brackets inside strings are not counted), or one bracket.
# Compiled (and cached by `re`) on first use: importing compiles nothing.
_TOKENS = rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]'
_OPEN = frozenset(b"[{")


def nesting_exceeds(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays/objects deeper than ``limit``.

    Cheap for ordinary JSON: when the text holds no more brackets than ``limit`` in total it
    cannot nest deeper, and nothing is scanned.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for match in re.finditer(_TOKENS, raw):
        char = raw[match.start()]
        if char == 0x22:  # a string
            continue
        if char in _OPEN:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def loads(raw: bytes, *, max_depth: int) -> Any:
    """Parse JSON bytes nested at most ``max_depth`` deep.

    Accepts the ``NaN``/``Infinity`` tokens Python's ``json`` writes (SB3's ``data`` has them),
    which orjson rejects.

    Raises
    ------
    DecodeError
        The text nests deeper than ``max_depth``, or is not valid JSON.
    """
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise DecodeError(f"expected JSON bytes, found {type(raw).__name__}.")
    raw = bytes(raw)
    if nesting_exceeds(raw, max_depth):
        raise DecodeError(
            f"JSON nests deeper than {max_depth} levels (limit `max_json_depth`).",
            hint="Raise it with `limits=zipsave.Limits(max_json_depth=...)` if you trust the archive.",
        )
    first: Exception | None = None
    if max_depth <= ORJSON_MAX_DEPTH or not nesting_exceeds(raw, ORJSON_MAX_DEPTH):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            first = err
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError as err:
        raise DecodeError(f"JSON is nested more deeply than Python can parse ({first or err}).") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise DecodeError(f"not valid JSON: {err}.") from None


def dump_json(obj: Any) -> bytes:
    """Pretty, deterministic JSON (key order as given; SB3's ``data`` is human-read)."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"


def parse_json(raw: bytes, *, max_depth: int) -> Any:
    """Parse JSON bytes nested at most ``max_depth`` deep; accepts the ``NaN``/``Infinity``
    tokens Python's ``json`` writes."""
    return loads(raw, max_depth=max_depth)
