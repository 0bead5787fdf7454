"""Python's exact numbers in pickles, ``fractions.Fraction`` and ``decimal.Decimal``: the one
call shape each is pickled as, checked (and bounded as the codec bounds their native forms)
before the constructor parses anything; any other way of making one is refused."""

from __future__ import annotations

import re
import sys
from typing import Any

from .._bounds import MAX_DECIMAL_TEXT, MAX_INT_DIGITS, check_decimal, check_int
from ..exceptions import ArchiveFormatError

__all__ = ["check_number_call", "number_kind", "number_made_problem"]

#: ``str(Fraction)``, which ``Fraction.__reduce__`` passes on older Pythons (newer ones pass the
#: two integers): an integer, or two, at most :data:`MAX_INT_DIGITS` digits each.
#: Fraction's own parser also takes exponents (``"1e999999999"``: a power of ten of any size).
_FRACTION_TEXT = re.compile(rf"-?[0-9]{{1,{MAX_INT_DIGITS}}}(/[0-9]{{1,{MAX_INT_DIGITS}}})?")


def number_kind(obj: Any) -> str | None:
    """``"fractions.Fraction"`` or ``"decimal.Decimal"`` when ``obj`` is one of those classes (or
    a subclass), else ``None``; neither module is imported to answer."""
    for module, name in (("fractions", "Fraction"), ("decimal", "Decimal")):
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(obj, type) and issubclass(obj, cls):
            return f"{module}.{name}"
    return None


def number_made_problem(cls: Any) -> str | None:
    """Why a ``Fraction``/``Decimal`` may not be created without its constructor (NEWOBJ,
    ``copyreg``) or have its state set (BUILD), or ``None`` for other classes: their pickles
    only ever call the class with the value, and a value made another way goes unchecked (a
    ``Fraction`` of unset slots, or slots holding any object)."""
    kind = number_kind(cls)
    if kind is None:
        return None
    return f"`{kind}` is pickled as a call of its class with its value; made any other way, its value is unchecked"


def check_number_call(func: Any, args: tuple, kwargs: dict) -> None:
    """Refuse (raise) a call of ``Fraction``/``Decimal`` in any shape but the one its pickles
    have: ``Fraction(numerator, denominator)`` of two integers (a non-zero denominator), or of
    its ``str()`` on older Pythons, and ``Decimal(text)`` of at most
    :data:`~zipsave._bounds.MAX_DECIMAL_TEXT` characters whose integer parts are bounded as a
    native decimal's (``Decimal('1E+999999')``: ``int()`` of it takes 50 s)."""
    kind = number_kind(func)
    if kind is None:
        return
    shown = ", ".join(type(a).__name__ for a in args)
    if kwargs:
        raise ArchiveFormatError(f"`{kind}` is called with keyword arguments; its pickles pass its value only.")
    if kind == "fractions.Fraction":
        if len(args) in (1, 2) and all(type(a) is int for a in args):
            for part in args:
                check_int(part, "a fraction's part")
            if len(args) == 2 and args[1] == 0:
                raise ArchiveFormatError("`fractions.Fraction` is given the denominator 0.")
            return
        if len(args) == 1 and type(args[0]) is str and _FRACTION_TEXT.fullmatch(args[0]):
            return
        raise ArchiveFormatError(
            f"`fractions.Fraction` is called with ({shown[:80]}); its pickles pass two integers, or on older "
            "Pythons its text (`'-1/3'`), digits only."
        )
    if len(args) == 1 and type(args[0]) is str and len(args[0]) <= MAX_DECIMAL_TEXT:
        decimal = sys.modules["decimal"]  # the pickle imported it: number_kind found it there
        try:
            value = decimal.Decimal(args[0])
        except decimal.InvalidOperation:
            raise ArchiveFormatError(f"`decimal.Decimal` is given {args[0][:40]!r}, not a decimal literal.") from None
        check_decimal(value)
        return
    raise ArchiveFormatError(
        f"`decimal.Decimal` is called with ({shown[:80]}); its pickles pass its text, at most "
        f"{MAX_DECIMAL_TEXT} characters."
    )
