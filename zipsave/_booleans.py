"""The one invariant of a boolean: its byte is 0 or 1. numpy and torch leave any other byte
undefined (a bool tensor holding 2 prints ``True`` yet ``torch.equal`` calls it unequal to
``True``; ``~`` of it is ``True`` again) and neither writes one, so an array, a tensor or a
structured field of bools built from an archive's bytes is checked where it is built."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["bool_mask", "bool_problem", "stray_bool"]

#: Bytes of an array gathered at a time to check a structured dtype's bool fields.
_CHUNK = 16 << 20


def bool_mask(dtype: Any) -> Any:
    """Which bytes of one item of the numpy ``dtype`` are booleans (a bool array of
    ``dtype.itemsize``), or ``None`` where none is: plain ``bool``, and the bool fields and
    sub-arrays of a structured dtype, however nested."""
    import numpy as np

    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        inner = bool_mask(base)
        return None if inner is None else np.tile(inner, math.prod(shape))
    if dtype.names is not None:
        found = None
        for name in dtype.names:
            sub, offset = dtype.fields[name][:2]
            inner = bool_mask(sub)
            if inner is not None:
                if found is None:
                    found = np.zeros(dtype.itemsize, dtype=np.bool_)
                found[offset : offset + sub.itemsize] |= inner
        return found
    return np.ones(1, dtype=np.bool_) if dtype.kind == "b" else None


def stray_bool(dtype: Any, raw: Any) -> bool:
    """Does ``raw`` (an array of ``dtype``, or a buffer of whole items of it) hold a byte other
    than 0 or 1 where ``dtype`` has a boolean? Linear in ``raw``, in bounded extra memory."""
    import numpy as np

    if dtype.hasobject or dtype.itemsize == 0 or (dtype.kind != "b" and dtype.names is None and dtype.subdtype is None):
        return False  # objects are converted to booleans by numpy, never read as bytes
    if isinstance(raw, np.ndarray):
        raw = raw.ravel(order="K")  # its items in memory order: a view, unless it is strided
        flat = raw.view(np.uint8) if raw.size else np.zeros(0, dtype=np.uint8)
    else:
        flat = np.frombuffer(raw, dtype=np.uint8)
    if not flat.size:
        return False
    if dtype.kind == "b":
        return bool(flat.max() > 1)
    mask = bool_mask(dtype)
    if mask is None:
        return False
    columns = np.flatnonzero(mask)
    rows = flat[: flat.size - flat.size % dtype.itemsize].reshape(-1, dtype.itemsize)
    step = max(1, _CHUNK // len(columns))
    return any(rows[start : start + step, columns].max() > 1 for start in range(0, len(rows), step))


def bool_problem(dtype: Any, raw: Any, what: str) -> str | None:
    """Why ``what`` (``"an array"``), built of the numpy ``dtype`` from ``raw``, is refused, or
    ``None``: see :func:`stray_bool`."""
    if not stray_bool(dtype, raw):
        return None
    return (
        f"{what} of dtype {dtype} holds a boolean byte other than 0 or 1, which numpy and torch "
        "leave undefined and neither writes"
    )
