"""The bytes an array item may hold: only what numpy itself writes. numpy reads any bytes into
an array, but some it never writes fail on use: a boolean other than 0 or 1
(:mod:`zipsave._booleans`), a ``U`` character past U+10FFFF (``repr``, ``tolist`` and ``copy``
raise ``SystemError``; no Python string holds one). An array or scalar built from an archive's
bytes is checked where it is built, and a live array read in place is left holding neither.
(A generic-unit ``datetime64`` other than NaT fails ``repr`` too, but numpy writes it:
``np.zeros(2, "M8")``.) A dtype is checked likewise (:func:`dtype_problem`): numpy parses a
date unit of multiplier 0 (``<M8[0s]``) and then cannot print, compare or pickle its values."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._booleans import bool_mask, bool_problem

__all__ = ["MAX_DTYPE_NODES", "dtype_problem", "dtype_size_problem", "item_problem", "scrub_items"]

_MAX_CODE = 0x10FFFF
#: Items compared at a time: a scrub's mask of one chunk is what it allocates.
_CHUNK = 1 << 20
#: Fields and sub-arrays of one dtype, counted through its nesting as numpy walks them to print
#: or compare it (and zipsave to check it). A pickle may give two fields one dtype object, so a
#: few hundred bytes stood for 2**30 of them: ``repr`` never ended. Real dtypes have a few
#: hundred; ``np.load`` reads headers of at most 10 000 bytes.
MAX_DTYPE_NODES = 1 << 16


def dtype_size_problem(dtype: Any) -> str | None:
    """Why the numpy ``dtype`` is too large to walk, or ``None``: more than
    :data:`MAX_DTYPE_NODES` fields and sub-arrays, a dtype shared by several fields counted for
    each. Stops counting there: its cost is bounded whatever the dtype."""
    count, todo = 0, [dtype]
    while todo:
        current = todo.pop()
        count += 1
        if count > MAX_DTYPE_NODES:
            return (
                f"a dtype has more than {MAX_DTYPE_NODES} fields and sub-arrays counted through its nesting (a "
                "field dtype shared by several fields counts for each), which numpy walks to print or compare it"
            )
        if current.subdtype is not None:
            todo.append(current.subdtype[0])
        elif current.names is not None:
            todo.extend(current.fields[name][0] for name in current.names)
    return None


def dtype_problem(dtype: Any) -> str | None:
    """Why the numpy ``dtype`` (a field, a sub-array's base, however nested) is refused, or
    ``None``: too many fields to walk (:func:`dtype_size_problem`), or a
    ``datetime64``/``timedelta64`` unit of multiplier 0, which ``np.dtype`` parses and nothing
    else takes (``repr`` and ``==`` of a value raise ``OverflowError``; numpy's own pickle of
    the dtype does not load)."""
    import numpy as np

    size = dtype_size_problem(dtype)
    if size:
        return size
    todo = [dtype]
    while todo:
        current = todo.pop()
        if current.subdtype is not None:
            todo.append(current.subdtype[0])
        elif current.names is not None:
            todo.extend(current.fields[name][0] for name in current.names)
        elif current.kind in "mM" and np.datetime_data(current)[1] == 0:
            return (
                f"dtype {dtype} has a date unit of multiplier 0 ({current.str}), which numpy parses but cannot "
                "print, compare or pickle; numpy's units count at least 1"
            )
    return None


def _leaves(dtype: Any, offset: int = 0, dims: tuple = ()) -> Iterator[tuple[str, int, tuple, tuple]]:
    """``(byte order, offset, shape, strides)`` of each ``U`` field in one item of ``dtype``,
    however nested: the sub-arrays around it and its characters are dimensions of one view
    (a field repeated a million times by a sub-array is one leaf, not a million)."""
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        strides, step = [], base.itemsize
        for dim in reversed(shape):
            strides.append(step)
            step *= dim
        yield from _leaves(base, offset, dims + tuple(zip(shape, reversed(strides))))
    elif dtype.names is not None:
        for name in dtype.names:
            sub, at = dtype.fields[name][:2]
            yield from _leaves(sub, offset + at, dims)
    elif dtype.kind == "U" and dtype.itemsize:
        dims += ((dtype.itemsize // 4, 4),)
        yield dtype.str[0], offset, tuple(d for d, _ in dims), tuple(s for _, s in dims)


def _codes(dtype: Any, flat: Any) -> Iterator[Any]:
    """Each ``U`` field of the items in ``flat`` (their bytes: a C-contiguous uint8 array) as
    a view of ``(items, sub-array dimensions..., characters)`` UTF-32 codes."""
    import numpy as np

    rows = flat.size // dtype.itemsize
    if not rows or dtype.kind not in "UV":
        return
    for order, offset, shape, strides in _leaves(dtype):
        if all(shape):
            yield np.ndarray(
                (rows, *shape), dtype=f"{order}u4", buffer=flat, offset=offset, strides=(dtype.itemsize, *strides)
            )


def _flat(raw: Any) -> Any:
    import numpy as np

    if isinstance(raw, np.ndarray):
        raw = np.ascontiguousarray(raw.ravel(order="K"))
        return raw.view(np.uint8) if raw.size and raw.dtype.itemsize else np.zeros(0, dtype=np.uint8)
    return np.frombuffer(raw, dtype=np.uint8)


def item_problem(dtype: Any, raw: Any, what: str) -> str | None:
    """Why ``what`` (``"an array"``), built of the numpy ``dtype`` from ``raw`` (an array of it,
    or a buffer of whole items), is refused, or ``None``. Linear in ``raw``, allocating nothing
    in proportion to it (a contiguous array or buffer)."""
    if dtype.hasobject or not dtype.itemsize:
        return None
    problem = bool_problem(dtype, raw, what)
    if problem:
        return problem
    for codes in _codes(dtype, _flat(raw)):
        if codes.max() > _MAX_CODE:
            return (
                f"{what} of dtype {dtype} holds a character past U+10FFFF, which numpy never writes "
                "(reading it raises SystemError)"
            )
    return None


def scrub_items(arr: Any) -> None:
    """Leave ``arr`` (C-contiguous, writeable: a live array a refused read wrote into) holding
    only items numpy writes: a boolean past 1 becomes 1, a character past U+10FFFF becomes 0."""
    import numpy as np

    if arr.dtype.hasobject or not arr.dtype.itemsize or not arr.size:
        return
    flat = arr.reshape(-1).view(np.uint8)
    mask = bool_mask(arr.dtype)
    if mask is not None:
        rows = flat.reshape(arr.size, arr.dtype.itemsize)
        rows[:, mask] = np.minimum(rows[:, mask], 1)
    for codes in _codes(arr.dtype, flat):
        step = max(1, _CHUNK // (codes[:1].size or 1))
        for start in range(0, len(codes), step):
            chunk = codes[start : start + step]
            chunk[chunk > _MAX_CODE] = 0
