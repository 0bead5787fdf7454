"""JSON text from an archive, parsed without letting its shape hurt the reader (the writer is
:mod:`zipsave._json_write`, so that a save imports none of this or its bounds).

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

from ._bounds import alloc_budget
from .exceptions import ArchiveLimitError, DecodeError

__all__ = [
    "BYTE_COST",
    "CONTAINER_COST",
    "MAX_INT_DIGITS",
    "STACK_MARGIN",
    "check_cost",
    "loads",
    "nesting_exceeds",
    "parse_json",
    "python_room",
    "scan",
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


# A JSON string (so brackets inside strings are not counted). One with no closing quote runs to
# the end of the text: were it to fail there, the search would start again from each escaped
# quote inside it, and the scan would take time quadratic in the text (80 KB of `\"`: 31 s).
# Compiled (and cached by `re`) on first use: importing compiles nothing.
_STRING = rb'(?s)"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)'
# A span of whole strings and other text (at most 1 MiB of the latter) that ends outside any
# string: the text is scanned span by span, so what a scan holds at once stays small.
_SPAN = rb'(?s)(?:"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[^"]{1,1024}){1,1024}'

#: What decoding JSON may allocate, charged before it is parsed against
#: :func:`~zipsave._bounds.alloc_budget` of its size: for each array or object, what the
#: parser's and the decoder's copies of an empty one take (measured: 149 bytes); for each byte,
#: about what numbers and strings take (8 to 16, depending on their length).
CONTAINER_COST = 160
BYTE_COST = 8


def _opens(raw: bytes) -> int:
    """Arrays and objects the JSON text ``raw`` opens, counting brackets in strings too."""
    return raw.count(b"[") + raw.count(b"{")


def scan(raw: bytes) -> tuple[int, int]:
    """``(arrays and objects, deepest nesting)`` of the JSON text ``raw``, brackets inside its
    strings not counted. Linear in ``raw``, with no Python step per bracket or string (the
    earlier scan took 4.7 s over 3 million brackets)."""
    import numpy as np  # imported with torch already, as every load has it

    other = bytes(range(256)).translate(None, b"[]{}")
    steps = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
    opens = deepest = depth = 0
    for span in re.finditer(_SPAN, raw):
        brackets = re.sub(_STRING, b"", span[0]).translate(None, other)
        if brackets:
            opens += brackets.count(b"[") + brackets.count(b"{")
            running = np.frombuffer(brackets.translate(steps), np.int8).cumsum(dtype=np.int64)
            deepest = max(deepest, depth + int(running.max()))
            depth += int(running[-1])
    return opens, deepest


def nesting_exceeds(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays/objects deeper than ``limit``.

    Cheap for ordinary JSON: when the text holds no more brackets than ``limit`` in total it
    cannot nest deeper, and nothing is scanned. Linear in ``raw`` otherwise.
    """
    return _opens(raw) > limit and scan(raw)[1] > limit


def check_cost(raw: bytes, limits: Any = None, opens: int | None = None) -> None:
    """Refuse the JSON text ``raw`` (which opens ``opens`` arrays and objects, counted by
    :func:`scan` when not given) if its values would take more memory than its size allows
    (:data:`CONTAINER_COST`, :data:`BYTE_COST`): 10 MB of ``[],[],...`` decodes into 3.3 million
    lists, 500 MB and seconds of work."""
    budget = alloc_budget(len(raw), limits)
    if opens is None:
        if BYTE_COST * len(raw) + CONTAINER_COST * _opens(raw) <= budget:
            return
        opens = scan(raw)[0]
    cost = BYTE_COST * len(raw) + CONTAINER_COST * opens
    if cost > budget:
        raise ArchiveLimitError(
            f"JSON of {len(raw)} bytes holds {opens} arrays and objects: decoding it would take about "
            f"{cost} bytes, and it may take {budget} (`Limits.alloc_floor` plus `Limits.alloc_ratio` "
            "times its size).",
            hint="If you trust the archive, raise them: `limits=zipsave.Limits(alloc_ratio=...)`.",
        )


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


def loads(raw: bytes, *, max_depth: int, limits: Any = None) -> Any:
    """Parse JSON bytes nested at most ``max_depth`` deep, whose values fit the allocation
    budget of ``limits`` (a :class:`~zipsave.Limits`; its defaults without one, see
    :func:`check_cost`).

    Accepts the ``NaN``/``Infinity`` tokens Python's ``json`` writes (SB3's ``data`` has them),
    which orjson rejects.

    Raises
    ------
    DecodeError
        The text nests deeper than ``max_depth``, or is not valid JSON.
    ArchiveLimitError
        Its values would take more memory than ``limits`` allow.
    """
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise DecodeError(f"expected JSON bytes, found {type(raw).__name__}.")
    raw = bytes(raw)
    # The text's shape, scanned once and only when its brackets could break a bound.
    opens, deepest = scan(raw) if _opens(raw) > min(max_depth, ORJSON_MAX_DEPTH) else (None, 0)
    check_cost(raw, limits, opens)
    if deepest > max_depth:
        raise DecodeError(
            f"JSON nests deeper than {max_depth} levels (limit `max_json_depth`).",
            hint="Raise it with `limits=zipsave.Limits(max_json_depth=...)` if you trust the archive.",
        )
    first: Exception | None = None
    if len(raw) >= ORJSON_MIN_BYTES and deepest <= ORJSON_MAX_DEPTH and re.search(_LONG_DIGITS, raw) is None:
        import orjson  # for large text only (see the module docstring)

        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            first = err
    room = max(python_room(), 0)  # within `max_depth` (checked above) is within it already
    if deepest > room or (opens is None and nesting_exceeds(raw, room)):
        raise DecodeError(f"JSON is nested more deeply than Python can parse here ({room} levels).")
    try:
        return json.loads(raw.decode("utf-8"), parse_int=_int_parser())
    except RecursionError as err:
        raise DecodeError(f"JSON is nested more deeply than Python can parse ({first or err}).") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise DecodeError(_long_integer(raw, err) or f"not valid JSON: {err}.") from None


def _long_integer(raw: bytes, err: Exception) -> str | None:
    """What to say of an integer literal longer than the interpreter converts (Python's message
    names neither where it is nor what was expected), or ``None`` if there is none."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if "integer string conversion" not in str(err) or not 0 < limit <= MAX_INT_DIGITS:
        return None
    found = re.search(rb"[0-9]{%d,}" % (limit + 1), raw)
    if found is None:
        return None
    line = raw.count(b"\n", 0, found.start()) + 1
    return (
        f"holds an integer literal of {found.end() - found.start()} digits (line {line}); this interpreter "
        f"reads integer text of at most {limit} digits (`sys.set_int_max_str_digits`), zipsave at most "
        f"{MAX_INT_DIGITS}."
    )


def parse_json(raw: bytes, *, max_depth: int, limits: Any = None) -> Any:
    """Parse JSON bytes nested at most ``max_depth`` deep within ``limits``; accepts the
    ``NaN``/``Infinity`` tokens Python's ``json`` writes."""
    return loads(raw, max_depth=max_depth, limits=limits)
