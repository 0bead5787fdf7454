"""The ":serialized:" fallback: base64 cloudpickle as SB3 writes it, with sets and unused
space generators reduced deterministically so equal values pickle to equal bytes."""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import io
import pickle
import types
from typing import Any

from .. import _codec  # its spaces load on first use: decoding needs only unb64
from ..exceptions import DecodeError

__all__ = ["NoNative", "b64", "pickle_value", "type_hint", "unb64"]


class NoNative(Exception):
    """The value has no pickle-free form."""


def type_hint(value: Any) -> str:
    return str(type(value))


def b64(data: bytes | memoryview) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise DecodeError(f"expected a base64 string, found {type(text).__name__}.")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, binascii.Error) as err:
        raise DecodeError(f"expected base64 text ({err}).") from None


def _canonical_reduce(obj: Any) -> Any:
    """The deterministic reduction of ``obj``, or ``NotImplemented`` for pickle's own.

    Sets are written in a fixed order (pickle writes them in hash order, which for strings
    changes with every interpreter's PYTHONHASHSEED), and a space's random generator that was
    never seeded nor used is written as ``None`` (it holds fresh OS entropy; gymnasium makes
    an equivalent one on demand).
    """
    kind = type(obj)
    if obj is types.SimpleNamespace:
        # by its name, `types.SimpleNamespace` (allowlisted), rather than as cloudpickle's
        # `_builtin_type('SimpleNamespace')`, a call no safe load makes
        return "SimpleNamespace"
    if (kind is set or kind is frozenset) and len(obj) > 1:
        return kind, (sorted(obj, key=_pickle_bytes),)
    if kind.__module__ == "torch.storage" and kind.__name__ in ("TypedStorage", "UntypedStorage"):
        return _storage_reduce(obj)
    if not _codec._spaces.is_space(obj):
        return NotImplemented
    changes: dict[str, Any] = {}
    if obj._np_random is not None and _codec._spaces.is_unused_generator(obj._np_random):
        changes["_np_random"] = None
    stacked = _unused_stacked_copy(obj)
    if stacked is not None:
        changes["stacked_feature_space"] = stacked
    if changes:
        import cloudpickle  # imported already: this runs inside its pickler

        rv = obj.__reduce_ex__(cloudpickle.DEFAULT_PROTOCOL)
        if isinstance(rv, tuple) and len(rv) >= 3 and isinstance(rv[2], dict) and changes.keys() <= rv[2].keys():
            return (*rv[:2], {**rv[2], **changes}, *rv[3:])
    return NotImplemented


def _storage_reduce(storage: Any) -> Any:
    """A torch storage as torch reduces it (``_load_from_bytes`` of a legacy ``torch.save``), but
    with its key made ``"0"``: torch keys a legacy save by the storage's address, so the same
    tensor pickled in two processes gave two different ``":serialized:"`` texts."""
    import torch

    rv = storage.__reduce__()
    if not (isinstance(rv, tuple) and len(rv) == 2 and rv[0] is torch.storage._load_from_bytes):
        return NotImplemented
    return rv[0], (_canonical_legacy_save(rv[1][0], str(storage._cdata)),)


def _canonical_legacy_save(raw: bytes, key: str) -> bytes:
    """``raw``, a legacy ``torch.save`` of one storage (five protocol-2 pickles, then the bytes),
    with every pickled string equal to ``key`` replaced by ``"0"``; the bytes are untouched."""
    import pickletools
    import struct

    stream = io.BytesIO(raw)
    out = bytearray()
    start = 0
    for _ in range(5):
        for opcode, arg, pos in pickletools.genops(stream):
            if opcode.code == "X" and arg == key and pos is not None:
                out += raw[start:pos] + b"X" + struct.pack("<I", 1) + b"0"
                start = pos + 5 + len(key.encode())
    return bytes(out + raw[start:])


def _unused_stacked_copy(space: Any) -> Any:
    """gymnasium 0.29's stacked ``Sequence`` keeps ``stacked_feature_space``, built with a deep
    copy of its feature space's generator. Before numpy 1.25 a copied generator loses its seed
    sequence, so it cannot be told unused on its own: it is one when it still equals an unused
    feature-space generator. Returns that sub-space without its generator, else ``None``."""
    stacked: Any = vars(space).get("stacked_feature_space")
    feature: Any = getattr(space, "feature_space", None)
    if stacked is None or not _codec._spaces.is_space(stacked) or not _codec._spaces.is_space(feature):
        return None
    copied, original = stacked._np_random, feature._np_random
    if copied is None or original is None or not _codec._spaces.is_unused_generator(original):
        return None
    if not _codec._spaces.same_state(copied.bit_generator.state, original.bit_generator.state):
        return None
    bare = copy.copy(stacked)
    bare._np_random = None
    return bare


def _make_pickler() -> type:
    """cloudpickle's reducers on Python's pure pickler: the C pickler never asks
    ``reducer_override`` about sets, so their order could not be fixed there."""
    import cloudpickle

    base = cloudpickle.CloudPickler
    borrowed = ("_function_reduce", "_dynamic_function_reduce", "_function_getnewargs")
    if not all(hasattr(base, name) for name in (*borrowed, "reducer_override", "dispatch_table")):
        # Another cloudpickle layout: keep its C pickler (sets then stay in hash order).
        class _CPickler(base):  # type: ignore[misc, valid-type]
            def reducer_override(self, obj: Any) -> Any:
                rv = _canonical_reduce(obj)
                return super().reducer_override(obj) if rv is NotImplemented else rv

        return _CPickler

    class _PyPickler(pickle._Pickler):
        dispatch_table = base.dispatch_table

        def __init__(self, file: Any, protocol: int) -> None:
            super().__init__(file, protocol=protocol)
            self.globals_ref: dict = {}

        def reducer_override(self, obj: Any) -> Any:
            rv = _canonical_reduce(obj)
            return base.reducer_override(self, obj) if rv is NotImplemented else rv

    for name in borrowed:
        setattr(_PyPickler, name, getattr(base, name))
    return _PyPickler


@functools.cache
def _pickler() -> type:
    return _make_pickler()  # on the first value pickled: importing cloudpickle is for that fallback only


def _pickle_bytes(value: Any) -> bytes:
    import cloudpickle

    buf = io.BytesIO()
    _pickler()(buf, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(value)
    return buf.getvalue()


def pickle_value(value: Any) -> str:
    """``":serialized:"``: base64 cloudpickle, as SB3 writes it (and SB3 reads it)."""
    try:
        return b64(_pickle_bytes(value))
    except RecursionError:
        # A set reached again through one of its own items: sorting it first recursed.
        import cloudpickle

        return b64(cloudpickle.dumps(value))
