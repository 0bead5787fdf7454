"""The one printer for people: every string read from an archive or a checkpoint directory is
made visible by :func:`visible` before it reaches a terminal, a log, a warning or a message."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["visible", "visible_html", "visible_json"]

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


def visible_html(text: Any) -> str:
    """``text`` made visible, then escaped for HTML (a notebook's view)."""
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
