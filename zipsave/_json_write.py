"""JSON text as a save writes it: pretty, deterministic, byte for byte as orjson writes it,
without importing orjson for a small document (the reader is :mod:`zipsave._json`)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["WRITE_SMALL_BYTES", "dump_json", "pretty_json"]

_quote = json.encoder.encode_basestring  # a JSON string as orjson writes it (UTF-8, not escaped)


def pretty_json(obj: Any) -> bytes:
    """``orjson.dumps(obj, option=orjson.OPT_INDENT_2)``: pretty, deterministic JSON, key order
    as given.

    Importing orjson takes 4-5 ms after torch (it imports ``zoneinfo``, which imports
    ``sysconfig``), most of what a first save of a small model spends on JSON. So a document of
    at most :data:`WRITE_SMALL_BYTES` made of dicts with string keys, lists, tuples, strings,
    64-bit integers, floats, bools and ``None`` is written here, byte for byte as orjson 3.13
    writes it (whether or not orjson is imported, so one document is always the same bytes).
    Anything else (a larger or deeper document, another type, a string that is not UTF-8) goes
    to orjson, which writes or refuses it as it always did: ``TypeError`` for what it cannot
    write.
    """
    out: list[str] = []
    try:
        _write(obj, out, "\n", 0, [WRITE_SMALL_BYTES])
        return "".join(out).encode("utf-8")
    except (_Unwritten, RecursionError, UnicodeEncodeError):
        pass
    import orjson  # here, so that a load that writes nothing does not import it

    return orjson.dumps(obj, option=orjson.OPT_INDENT_2)


def dump_json(obj: Any) -> bytes:
    """Pretty, deterministic JSON (key order as given; SB3's ``data`` is human-read), ending in
    a newline: :func:`pretty_json`."""
    return pretty_json(obj) + b"\n"


#: The largest document :func:`pretty_json` writes without orjson: Python's writer takes about
#: 1 ms for it, a quarter of importing orjson.
WRITE_SMALL_BYTES = 64 * 1024

#: The deepest document :func:`pretty_json` writes without orjson (orjson refuses depth 256).
_WRITE_MAX_DEPTH = 200


class _Unwritten(Exception):
    """A value that :func:`pretty_json` leaves to orjson."""


def _float_text(value: float) -> str:
    """``value`` as orjson writes it: the shortest digits that read back as it (``repr``'s),
    in positional notation for exponents from -5 to 15 and as ``1.5e+300``/``1e-8`` otherwise
    (orjson 3.10 and later; earlier ones wrote ``1.5e300``); ``null`` for NaN and the
    infinities."""
    text = repr(value)
    if text[-1] in "nf":  # nan, inf, -inf
        return "null"
    sign = "-" if text[0] == "-" else ""
    mantissa, _, exponent = text.lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return sign + "0.0"
    point = int(exponent or 0) - len(fraction)  # value = digits * 10**point
    stripped = digits.rstrip("0")
    point += len(digits) - len(stripped)
    digits = stripped
    at = len(digits) + point  # where the decimal point falls in the digits
    if point >= 0 and at <= 16:
        return f"{sign}{digits}{'0' * point}.0"
    if 0 < at <= 16:
        return f"{sign}{digits[:at]}.{digits[at:]}"
    if -5 < at <= 0:
        return f"{sign}0.{'0' * -at}{digits}"
    exponent = f"e{at - 1:+d}" if at > 0 else f"e{at - 1}"
    if len(digits) == 1:
        return f"{sign}{digits}{exponent}"
    return f"{sign}{digits[0]}.{digits[1:]}{exponent}"


def _write(value: Any, out: list[str], pad: str, depth: int, room: list[int]) -> None:
    """Append the pieces of ``value``'s pretty text to ``out``, its lines indented by ``pad``
    (a newline and spaces); ``room[0]`` is the characters left before the text is too long.
    Raises :class:`_Unwritten` for what orjson should write."""
    kind = type(value)
    if kind is str:
        piece = _quote(value)
    elif kind is dict or kind is list or kind is tuple:
        if not value:
            piece = "{}" if kind is dict else "[]"
        elif depth >= _WRITE_MAX_DEPTH:
            raise _Unwritten
        else:
            inner = pad + "  "
            out.append("{" if kind is dict else "[")
            if kind is dict:
                for n, (key, item) in enumerate(value.items()):
                    if type(key) is not str:
                        raise _Unwritten
                    out.append(f"{',' if n else ''}{inner}{_quote(key)}: ")
                    _write(item, out, inner, depth + 1, room)
            else:
                for n, item in enumerate(value):
                    out.append(f"{',' if n else ''}{inner}")
                    _write(item, out, inner, depth + 1, room)
            piece = pad + ("}" if kind is dict else "]")
    elif value is None:
        piece = "null"
    elif kind is bool:
        piece = "true" if value else "false"
    elif kind is int and -(2**63) <= value < 2**64:
        piece = int.__repr__(value)
    elif kind is float:
        piece = _float_text(value)
    else:
        raise _Unwritten
    room[0] -= len(piece) + len(pad)
    if room[0] < 0:
        raise _Unwritten
    out.append(piece)
