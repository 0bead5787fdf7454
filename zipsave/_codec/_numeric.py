"""The rarer native value kinds of ``data``: fractions, decimals and random generators, each
checked before it is built and none naming a class from the archive. Imported with the first
such value, not with every load."""

from __future__ import annotations

import decimal
import fractions
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .._bounds import MAX_DECIMAL_TEXT, check_decimal, check_int
from .._trust import torch_generator_state_problem
from ..exceptions import DecodeError
from ._decode import field

__all__ = ["decode_numeric"]


def decode_numeric(
    kind: str, body: dict, decode: Callable[[Any], Any], native: Callable[[dict], Any], where: dict[str, Any]
) -> Any:
    """The value of native form ``body`` of ``kind`` ``fraction``, ``decimal``, ``random`` or
    ``torch_generator``; ``decode`` decodes a nested value, ``native`` a nested native form, and
    ``where`` (key, member, archive) names the value in errors."""
    if kind == "fraction":
        numerator, denominator = decode(body.get("numerator")), decode(body.get("denominator"))
        if type(numerator) is not int or type(denominator) is not int or denominator == 0:
            raise DecodeError("expected an integer `numerator` and a non-zero integer `denominator`.")
        for part in (numerator, denominator):  # Fraction() takes a gcd: quadratic in the digits
            check_int(part, "a fraction's part", **where)
        return fractions.Fraction(numerator, denominator)
    if kind == "decimal":
        text = field(body, "value", str)
        if len(text) > MAX_DECIMAL_TEXT:
            raise DecodeError(f"decimal literal of {len(text)} characters is longer than {MAX_DECIMAL_TEXT}.")
        try:
            value = decimal.Decimal(text)
        except decimal.InvalidOperation:
            raise DecodeError(f"expected a decimal literal, found {text[:40]!r}.") from None
        return check_decimal(value, **where)
    if kind == "random":
        words = native(field(body, "state", dict))
        gauss_next = decode(body.get("gauss_next"))
        if not isinstance(words, np.ndarray) or words.dtype != np.uint32 or words.ndim != 1:
            raise DecodeError("expected the random.Random `state` to be a 1-d uint32 array.")
        if not (gauss_next is None or type(gauss_next) is float):
            raise DecodeError(f"expected `gauss_next` to be a float or null, found {type(gauss_next).__name__}.")
        rng = random.Random()
        try:
            rng.setstate((field(body, "version", int), tuple(words.tolist()), gauss_next))
        except (TypeError, ValueError) as err:
            raise DecodeError(f"invalid random.Random state ({err}).") from None
        return rng
    raw = native(field(body, "state", dict))
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.ndim != 1:
        raise DecodeError("expected the generator `state` to be a 1-d uint8 array.")
    try:
        generator = torch.Generator(device=field(body, "device", str))
    except (RuntimeError, ValueError) as err:
        raise DecodeError(f"cannot restore the torch.Generator ({err}).") from None
    problem = torch_generator_state_problem(raw.tobytes()) if generator.device.type == "cpu" else None
    if problem is not None:  # torch would take it, and read past its state at the next draw
        raise DecodeError(f"expected the state of a torch generator, found {problem}.")
    try:
        generator.set_state(torch.from_numpy(raw.copy()))
    except (RuntimeError, ValueError) as err:
        raise DecodeError(f"cannot restore the torch.Generator ({err}).") from None
    return generator
