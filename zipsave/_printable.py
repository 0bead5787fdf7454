"""The one printer for people: every string read from an archive or a checkpoint directory is
made visible by :func:`visible` before it reaches a terminal, a log, a warning or a message."""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["shown", "visible", "visible_html", "visible_json"]

#: Shorter spellings of the common controls, as ``repr`` writes them.
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: Any, *, lines: bool = False) -> str:
    """``text`` with every character a terminal would act on or hide shown as an escape.

    A character is kept as it is when :meth:`str.isprintable` says so (what ``repr`` keeps);
    everything else is written ``\\x1b``, ``\\u202e``, ``\\udcff``: C0 and C1 controls and DEL
    (so no escape sequence reaches a terminal), bidi overrides and isolates, zero-width,
    line and paragraph separators, lone surrogates (which ``print`` cannot even encode) and
    unassigned code points. Backslashes are kept, so ``visible(visible(s)) == visible(s)``.

    Parameters
    ----------
    text
        Any object; it is made a ``str`` first.
    lines
        Keep line feeds: for a whole report whose layout zipsave made, where each field has
        been made visible already (a field's own line feed is escaped there), or for a text
        whose lines are shown as lines (``system_info.txt``).

    Examples
    --------
    >>> visible("policy\\x1b[2J.pth")
    'policy\\\\x1b[2J.pth'
    """
    text = text if isinstance(text, str) else str(text)
    if text.isprintable():
        return text
    if lines:
        return "\n".join(_visible_line(line, _escape) for line in text.split("\n"))
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _visible_line(line: str, escape: Any) -> str:
    if line.isprintable():
        return line
    return "".join(ch if ch.isprintable() else escape(ch) for ch in line)


#: Integers longer than this are described by their size: Python refuses to write one of more
#: than 4 300 digits as text (``repr`` raises ``ValueError``), and a message needs no more.
_SHOWN_BITS = 256
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def shown(value: Any) -> str:
    """A short, visible ``repr`` of a value read from an archive, for a message: an integer of
    more than 256 bits is described by its size (``an integer of 16610 bits``), containers and
    long strings are cut as :mod:`reprlib` cuts them, and what cannot be written at all is
    named by its type.

    Examples
    --------
    >>> shown(-10**100)
    'a negative integer of 333 bits'
    """
    if isinstance(value, int) and value.bit_length() > _SHOWN_BITS:
        return f"{'a negative' if value < 0 else 'an'} integer of {value.bit_length()} bits"
    try:
        return visible(_REPR.repr(value))
    except Exception:  # a huge integer inside a container, a repr that raises
        return f"a {visible(type(value).__name__)}"


def visible_html(text: Any) -> str:
    """``text`` made visible, then escaped for HTML (a notebook's view)."""
    import html  # only HTML views ask: not imported by every load

    return html.escape(visible(text))


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code > 0xFFFF:  # a surrogate pair, as JSON spells a code point past the BMP
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def visible_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with every character
    :func:`visible` would escape written as a JSON ``\\uXXXX`` escape: the same JSON value,
    and nothing raw reaches a terminal. Only the layout's line feeds stay (JSON escapes line
    feeds and tabs inside a string itself)."""
    return "\n".join(_visible_line(line, _json_escape) for line in text.split("\n"))
