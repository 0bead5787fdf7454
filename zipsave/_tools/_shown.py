"""How ``zipsave read`` shows a value it read, as text and as JSON: every value a load returns,
including the tensors torch stores but cannot print (``bits8``, ``float4_e2m1fn_x2``, whose
``repr`` and ``tolist`` raise), complex numbers, bytes and datetimes (which JSON has no
spelling for)."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._invariants import flat_bytes

__all__ = ["json_leaf", "sparse_parts", "value_json", "value_text", "whole_integers"]

#: Bytes of a tensor torch cannot print shown in text (its JSON holds them all).
_TEXT_BYTES = 256
#: What torch raises for a dtype it has no kernel for (``repr``, ``tolist``).
_NO_KERNEL = (NotImplementedError, RuntimeError, TypeError)


def _is_array(value: Any) -> bool:
    return hasattr(value, "dtype") and hasattr(value, "tolist")  # a tensor, or an array from `data`


def _is_sparse(value: Any) -> bool:
    return hasattr(value, "detach") and str(value.layout) != "torch.strided"


def sparse_parts(t: Any) -> dict[str, Any]:
    """The dense tensors a sparse tensor is made of, by name, as stored (each was checked when
    it was loaded): a sparse tensor has no block of bytes of its own (``contiguous()`` raises),
    and its dense form may stand for any size (a (2**31, 2**31) tensor of two values)."""
    layout = str(t.layout).removeprefix("torch.sparse_")
    if layout == "coo":
        return {"indices": t._indices(), "values": t._values()}
    if layout in ("csr", "bsr"):
        return {"crow_indices": t.crow_indices(), "col_indices": t.col_indices(), "values": t.values()}
    return {"ccol_indices": t.ccol_indices(), "row_indices": t.row_indices(), "values": t.values()}


def _raw(value: Any) -> bytes:
    if not hasattr(value, "detach"):  # a numpy array or scalar
        return np.ascontiguousarray(value).tobytes()
    return bytes(flat_bytes(value.detach().contiguous()).numpy()) if value.numel() else b""


@contextlib.contextmanager
def whole_integers() -> Iterator[None]:
    """Integers written as text in full while the block runs: a load returns integers of at most
    131 072 bits (about 39 500 digits, 20 ms to write), past Python's default limit on integer
    text (4 300 digits), at which ``repr`` and ``json.dumps`` of a value holding one raised
    ``ValueError``. For a command printing what it read; the limit is put back after."""
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else None
    if limit:
        sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        if limit:
            sys.set_int_max_str_digits(limit)


def value_text(value: Any) -> str:
    """``value``'s ``repr``, headed by its dtype and shape for a tensor or an array; a tensor
    whose dtype torch cannot print is shown as its bytes (in hex)."""
    if not _is_array(value):
        return repr(value)
    head = f"{value.dtype} {tuple(value.shape)}\n"
    try:
        return head + repr(value)
    except (*_NO_KERNEL, ValueError):  # numpy: a generic-unit datetime64 other than NaT (np.zeros(2, "M8"))
        if _is_sparse(value):  # its parts, each shown as a dense tensor is
            parts = "\n".join(f"{name}: {value_text(part)}" for name, part in sparse_parts(value).items())
            return f"{head}{value.layout} tensor of\n{parts}"
        raw = _raw(value)
        more = f" ... ({len(raw)} bytes)" if len(raw) > _TEXT_BYTES else ""
        who = "torch" if hasattr(value, "detach") else "numpy"
        return f"{head}{who} cannot print {value.dtype} values; its bytes: {raw[:_TEXT_BYTES].hex()}{more}"


def value_json(value: Any) -> dict[str, Any]:
    """``value`` as strict JSON fields: ``type``, and ``dtype``, ``shape`` and ``values`` (or
    ``bytes``, in hex, where torch cannot list them) for a tensor or an array, ``value`` for a
    JSON value, else ``repr``."""
    out: dict[str, Any] = {"type": type(value).__name__}
    if _is_sparse(value):
        parts = {name: value_json(part) for name, part in sparse_parts(value).items()}
        out.update(dtype=str(value.dtype), shape=list(value.shape), layout=str(value.layout), parts=parts)
        return out
    if _is_array(value):
        out.update(dtype=str(value.dtype), shape=list(value.shape))
        try:
            out["values"] = json_leaf(value.tolist())
        except _NO_KERNEL:
            out["bytes"] = _raw(value).hex()
        return out
    try:
        out["value"] = json_leaf(json.loads(json.dumps(value)))
    except (TypeError, ValueError):  # not a JSON value (a space, a tuple key): its repr
        out["repr"] = repr(value)
    return out


def json_leaf(value: Any) -> Any:
    """``value`` (lists, dicts and leaves, as ``tolist`` gives them) in strict JSON: a
    non-finite float as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (Python's json
    writes tokens jq and JavaScript reject), a complex number as ``{"real", "imag"}``, and any
    other leaf JSON has no spelling for (bytes, a datetime) as its ``repr``."""
    if isinstance(value, dict):
        return {k: json_leaf(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_leaf(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, complex):
        return {"real": json_leaf(value.real), "imag": json_leaf(value.imag)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
