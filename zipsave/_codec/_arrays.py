"""numpy dtypes and arrays, and time zones, in forms that encode deterministically and decode
without pickle."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import numpy as np

from .._items import dtype_problem
from ..exceptions import DecodeError
from ._pickling import NoNative

__all__ = ["canonical_array", "descr_dtype", "dtype_descr", "tz_fields"]

# x87 extended precision keeps 10 meaningful bytes in a 12- or 16-byte long double; the rest
# is whatever memory held, which would make equal arrays encode to different bytes.
_LONGDOUBLE_PAD = np.finfo(np.longdouble).nmant == 63 and np.dtype(np.longdouble).itemsize > 10


def canonical_array(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous array whose bytes depend only on its values (long double padding zeroed)."""
    data = np.asarray(arr, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    if _LONGDOUBLE_PAD and data.dtype.type in (np.longdouble, np.clongdouble) and data.dtype.isnative:
        data = data.copy()
        size = np.dtype(np.longdouble).itemsize
        data.reshape(-1).view(np.uint8).reshape(-1, size)[:, 10:] = 0
    return data


def tz_fields(tz: Any) -> dict[str, Any]:
    """The time zone of a datetime/time, beside its ISO text (which only keeps the offset)."""
    if tz is None or tz is _dt.timezone.utc:  # noqa: UP017 - datetime.UTC is 3.11+
        return {}
    if type(tz) is _dt.timezone:
        name = tz.tzname(None)
        # A fixed offset is all of it, except a name given on purpose (`timezone(td, "EST")`).
        return {} if name == _dt.timezone(tz.utcoffset(None)).tzname(None) else {"tzname": name}
    import zoneinfo

    if type(tz) is zoneinfo.ZoneInfo and isinstance(tz.key, str):
        return {"tz": tz.key}
    raise NoNative  # pytz, dateutil, custom tzinfo classes: left to pickle


_MAX_DTYPE_DEPTH = 32


def dtype_descr(dtype: np.dtype) -> Any:
    """A JSON description of ``dtype`` that :func:`descr_dtype` turns back into an equal one.

    Plain dtypes are their ``.str`` (``"<f4"``, ``">i2"``, ``"<U3"``, ``"<M8[s]"``); sub-array and
    structured dtypes are objects whose fields mirror ``np.dtype``'s own dict form, so field
    offsets, padding, titles and byte order all survive.
    """
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return {"base": dtype_descr(base), "shape": list(shape)}
    if dtype.fields is None:
        return dtype.str
    names = list(dtype.names or ())
    fields = [dtype.fields[n] for n in names]
    out: dict[str, Any] = {
        "names": names,
        "formats": [dtype_descr(f[0]) for f in fields],
        "offsets": [int(f[1]) for f in fields],
        "itemsize": dtype.itemsize,
    }
    if any(len(f) > 2 for f in fields):
        out["titles"] = [f[2] if len(f) > 2 else None for f in fields]
    if dtype.isalignedstruct:
        out["aligned"] = True
    return out


def descr_dtype(descr: Any, _depth: int = 0) -> np.dtype:
    """The dtype described by :func:`dtype_descr`; never one that holds Python objects."""
    if _depth > _MAX_DTYPE_DEPTH:
        raise DecodeError(f"dtype description is nested deeper than {_MAX_DTYPE_DEPTH} levels.")
    if isinstance(descr, str):
        try:
            dtype = np.dtype(descr)
        except (TypeError, ValueError) as err:
            raise DecodeError(f"`{descr}` is not a numpy dtype ({err}).") from None
    elif isinstance(descr, dict) and "base" in descr:
        shape = descr.get("shape")
        if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
            raise DecodeError(f"expected the sub-array `shape` to be a list of non-negative integers, found {shape!r}.")
        dtype = np.dtype((descr_dtype(descr["base"], _depth + 1), tuple(shape)))
    elif isinstance(descr, dict):
        names, formats, offsets = descr.get("names"), descr.get("formats"), descr.get("offsets")
        itemsize, titles = descr.get("itemsize"), descr.get("titles")
        if not (
            isinstance(names, list)
            and all(isinstance(n, str) for n in names)
            and isinstance(formats, list)
            and isinstance(offsets, list)
            and all(type(o) is int and o >= 0 for o in offsets)
            and len(names) == len(formats) == len(offsets)
            and type(itemsize) is int
            and itemsize >= 0
            and (titles is None or (isinstance(titles, list) and len(titles) == len(names)))
        ):
            raise DecodeError(
                "expected a structured dtype description with `names`, `formats`, `offsets` of equal "
                "length and an integer `itemsize`."
            )
        spec: dict[str, Any] = {
            "names": names,
            "formats": [descr_dtype(f, _depth + 1) for f in formats],
            "offsets": offsets,
            "itemsize": itemsize,
        }
        if titles is not None:
            spec["titles"] = titles
        try:
            dtype = np.dtype(spec, align=descr.get("aligned") is True)  # type: ignore[call-overload]
        except (TypeError, ValueError) as err:
            raise DecodeError(f"invalid structured dtype description ({err}).") from None
    else:
        raise DecodeError(f"expected a dtype description, found {type(descr).__name__}.")
    if dtype.hasobject:
        raise DecodeError(f"dtype `{dtype}` holds Python objects; refusing to decode it without pickle.")
    problem = dtype_problem(dtype)
    if problem:
        raise DecodeError(f"{problem}.")
    return dtype
