"""JSON text: deterministic pretty output, and parsing from an archive without letting its
shape hurt the reader.

orjson (3.8 at least) has no nesting limit of its own and overflows the C stack on deeply
nested objects, which kills the process; Python's ``json`` raises ``RecursionError``. So the
nesting depth is measured on the raw bytes first, and only JSON within the limit reaches a
parser.

Both parsers give the same values for the same text, with one exception this module routes
around: orjson turns an integer beyond 64 bits into a float (``2**64`` parses as
``1.8446744073709552e19``), so text with a run of 19 digits or more goes to Python's ``json``,
which keeps it exact. Small text goes there too: Python's ``json`` is imported with torch, and
importing orjson would cost a first load more than parsing a ``data`` member does; orjson is
imported when something large is parsed, or written.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from .exceptions import DecodeError

__all__ = [
    "MAX_INT_DIGITS",
    "STACK_MARGIN",
    "dump_json",
    "loads",
    "nesting_exceeds",
    "parse_json",
    "python_room",
    "stack_low",
]

#: The deepest JSON handed to orjson whatever the configured limit; deeper (when a caller
#: raises the limit) goes to Python's json, which fails cleanly instead of crashing.
ORJSON_MAX_DEPTH = 512

#: JSON text shorter than this is parsed by Python's json (see above).
ORJSON_MIN_BYTES = 64 * 1024

#: Frames left free below Python's recursion limit when its json parses deep text or the codec
#: decodes a deep value. Text that would nest into them is refused unparsed, and a value that
#: reaches them is refused there: at the limit, a collector pass that runs a
#: finalizer (an unreferenced ``ZipFile``'s ``__del__``) would fail in it, and the error would
#: be lost as an "exception ignored".
STACK_MARGIN = 200

#: A run of digits that may be an integer orjson would not keep exact (2**63 has 19 digits).
_LONG_DIGITS = rb"[0-9]{19}"

#: The most digits a JSON integer may have: 2**17 bits, the bound every decoder holds
#: integers to (``zipsave._bounds.MAX_INT_BITS``). Python's own limit on converting text to
#: an integer (4 300 digits) is lower, but a program may lift it (``sys.set_int_max_str_digits(0)``),
#: and then a 2 MB integer literal took 24 s to parse (the conversion is quadratic).
MAX_INT_DIGITS = 39_457


def _bounded_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits} digits; at most {MAX_INT_DIGITS} (2**17 bits) are read")
    return int(text)


def _int_parser() -> Any:
    """``parse_int`` for Python's json: None (its own, faster) while the interpreter refuses
    integer text longer than :data:`MAX_INT_DIGITS` itself."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    return None if 0 < limit <= MAX_INT_DIGITS else _bounded_int


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


def python_room() -> int:
    """How deep Python's json may nest from here: the recursion limit less the frames in use
    and :data:`STACK_MARGIN`."""
    frame: Any = sys._getframe()
    depth = 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return sys.getrecursionlimit() - depth - STACK_MARGIN


def stack_low() -> bool:
    """Whether the frames in use reach within :data:`STACK_MARGIN` of the recursion limit."""
    try:
        sys._getframe(sys.getrecursionlimit() - STACK_MARGIN)
    except ValueError:
        return False
    return True


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
    if (
        len(raw) >= ORJSON_MIN_BYTES
        and (max_depth <= ORJSON_MAX_DEPTH or not nesting_exceeds(raw, ORJSON_MAX_DEPTH))
        and re.search(_LONG_DIGITS, raw) is None
    ):
        import orjson  # for large text only (see the module docstring)

        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            first = err
    room = max(python_room(), 0)  # within `max_depth` (checked above) is within it already
    if max_depth > room and nesting_exceeds(raw, room):
        raise DecodeError(f"JSON is nested more deeply than Python can parse here ({room} levels).")
    try:
        return json.loads(raw.decode("utf-8"), parse_int=_int_parser())
    except RecursionError as err:
        raise DecodeError(f"JSON is nested more deeply than Python can parse ({first or err}).") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise DecodeError(f"not valid JSON: {err}.") from None


def dump_json(obj: Any) -> bytes:
    """Pretty, deterministic JSON (key order as given; SB3's ``data`` is human-read)."""
    import orjson  # here, so that a load that writes nothing does not import it

    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"


def parse_json(raw: bytes, *, max_depth: int) -> Any:
    """Parse JSON bytes nested at most ``max_depth`` deep; accepts the ``NaN``/``Infinity``
    tokens Python's ``json`` writes."""
    return loads(raw, max_depth=max_depth)
