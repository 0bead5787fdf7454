"""The names a ``torch.save`` pickle uses, as the ``.pth`` metadata reader resolves them: each
tensor-rebuilding function builds a reference (:mod:`._pth_refs`), each kind zipsave does not
read becomes a :class:`RefusedRef` leaf, and plain values are built with bounded inputs. torch's
names are stand-ins from fixed tables (:mod:`._pth_dtypes`): reading a member imports no torch."""

from __future__ import annotations

import collections
from typing import Any

from ..exceptions import ArchiveFormatError
from ._pth_dtypes import DTYPES, INT32, INT64, LAYOUTS, SPARSE_COO, SPARSE_LAYOUTS, DType
from ._pth_refs import RefusedRef, SparseRef, StorageRef, TensorRef

__all__ = [
    "LAYOUT_GLOBAL",
    "META_GLOBALS",
    "StorageType",
    "TensorClass",
    "bytearray_",
    "complex_",
    "counter",
    "ints",
    "short",
]


_INT64 = (1 << 63) - 1


def ints(values: Any) -> bool:
    return isinstance(values, tuple) and all(type(v) is int and 0 <= v <= _INT64 for v in values)


def _rebuild_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    if not isinstance(storage, StorageRef):
        return RefusedRef("a tensor without a storage record")
    if not (ints(size) and ints(stride) and ints((storage_offset,)) and len(size) == len(stride)):
        return RefusedRef(
            f"a tensor of size {short(size)}, stride {short(stride)} and offset {short(storage_offset)} "
            "(expected non-negative 64-bit integers, one stride per dimension)"
        )
    extras = bool(backward_hooks) or bool(metadata)  # torch.load sets them; the fast path cannot
    return TensorRef(storage, storage_offset, tuple(size), tuple(stride), requires_grad is True, extras=extras)


def _rebuild_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    if not isinstance(dtype, DType) or dtype.quantized or not isinstance(storage, StorageRef):
        return RefusedRef(f"a tensor of dtype {short(dtype)}")
    return _rebuild_v2(
        storage.replace(dtype=dtype), storage_offset, size, stride, requires_grad, backward_hooks, metadata
    )


def _rebuild_plain(storage, storage_offset, size, stride):
    return _rebuild_v2(storage, storage_offset, size, stride)


def _as_parameter(data: Any, requires_grad: Any, extras: bool) -> Any:
    if isinstance(data, TensorRef):
        return data.replace(requires_grad=requires_grad is True, parameter=True, extras=data.extras or extras)
    if isinstance(data, SparseRef) and not extras:
        return data.replace(requires_grad=requires_grad is True, parameter=True)
    return data if isinstance(data, RefusedRef) else RefusedRef(f"a parameter around {short(data)}")


def _rebuild_parameter(data, requires_grad, backward_hooks=None, state=None):
    return _as_parameter(data, requires_grad, bool(backward_hooks) or bool(state))


def _parameter(data=None, requires_grad=True):
    return _as_parameter(data, requires_grad, False)


def _get_layout(name):
    return LAYOUTS.get(name, RefusedRef(f"layout {short(name)}")) if isinstance(name, str) else RefusedRef("a layout")


def _rebuild_sparse(layout, data):
    """A sparse tensor's parts, checked for shape here and assembled (invariants checked)
    by :func:`~zipsave._tensors._invariants.assemble_sparse`."""
    if isinstance(layout, RefusedRef):
        return layout
    if layout not in SPARSE_LAYOUTS or not isinstance(data, tuple):
        return RefusedRef(f"a sparse tensor of layout {short(layout)}")
    if layout is SPARSE_COO and len(data) in (3, 4):
        parts, size, coalesced = data[:2], data[2], data[3] if len(data) == 4 else None
    elif layout is not SPARSE_COO and len(data) == 4:
        parts, size, coalesced = data[:3], data[3], None
    else:
        return RefusedRef(f"a {layout} tensor of {len(data)} parts")
    if not (
        ints(size)
        and all(isinstance(p, TensorRef) and not p.extras for p in parts)
        and coalesced in (None, True, False)
    ):
        return RefusedRef(f"a {layout} tensor whose parts are not plain tensors and sizes")
    index_dtypes = {p.dtype for p in parts[:-1]}
    if index_dtypes != {INT64} and (layout is SPARSE_COO or index_dtypes != {INT32}):
        return RefusedRef(f"a {layout} tensor with {'/'.join(sorted(map(str, index_dtypes)))} indices")
    return SparseRef(layout, tuple(parts), tuple(size), coalesced)


def _rebuild_from_type(func, new_type, args, state):
    """``torch._tensor._rebuild_from_type_v2``: a tensor, or a parameter, with attributes."""
    if func not in _REBUILDS or not isinstance(args, tuple) or new_type not in (_TENSOR, _PARAMETER):
        return RefusedRef(f"a tensor of type {short(new_type)}")
    built = func(*args)
    if new_type is _PARAMETER:
        return _as_parameter(built, getattr(built, "requires_grad", False), bool(state))
    if state and isinstance(built, TensorRef):
        return built.replace(extras=True)
    return RefusedRef("a sparse tensor with attributes") if state else built


def _refused(what: str) -> Any:
    def rebuild(*args: Any, **kwargs: Any) -> RefusedRef:
        return RefusedRef(what)

    return rebuild


class TensorClass:
    """``torch.Tensor``, ``torch.FloatTensor``...: a type to name, never a constructor to call
    (``torch.FloatTensor(n)`` is memory torch allocates without filling); ``Parameter(data)``
    wraps a tensor."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.name == "torch.nn.parameter.Parameter":
            return _parameter(*args, **kwargs)
        return RefusedRef(f"`{self.name}(...)`, a tensor torch allocates without filling it from the file")

    def __repr__(self) -> str:
        return self.name


_TENSOR = TensorClass("torch.Tensor")
_PARAMETER = TensorClass("torch.nn.parameter.Parameter")


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_REBUILDS = {_rebuild_v2, _rebuild_v3, _rebuild_plain, _rebuild_parameter, _rebuild_sparse}


class StorageType:
    def __init__(self, dtype: DType) -> None:
        self.dtype = dtype


META_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Tensor"): _TENSOR,
    ("torch.nn.parameter", "Parameter"): _PARAMETER,
    ("torch.storage", "UntypedStorage"): StorageType(DTYPES["uint8"]),
    ("torch._utils", "_rebuild_tensor"): _rebuild_plain,
    ("torch._utils", "_rebuild_sparse_tensor"): _rebuild_sparse,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch.serialization", "_get_layout"): _get_layout,  # gives a layout: LAYOUT_GLOBAL
    # torch.load(weights_only=True) builds these too; zipsave refuses them, naming the key.
    ("torch._utils", "_rebuild_qtensor"): _refused("a quantized tensor"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage"): _refused("a meta tensor (it has no data)"),
    ("torch._utils", "_rebuild_nested_tensor"): _refused("a nested tensor"),
    ("torch._utils", "_rebuild_wrapper_subclass"): _refused("a tensor subclass without storage"),
    ("torch._utils", "_rebuild_device_tensor_from_numpy"): _refused("a device tensor rebuilt from a numpy array"),
    ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor"): _refused("a device tensor rebuilt from another tensor"),
}


def complex_(real: Any = 0.0, imag: Any = 0.0) -> complex:
    if type(real) not in (int, float) or type(imag) not in (int, float):
        raise ArchiveFormatError("`data.pkl` builds a complex number from something other than two numbers.")
    return complex(real, imag)


def bytearray_(data: Any = b"") -> bytearray:
    if type(data) is not bytes:  # bytearray(n) would allocate n bytes the file does not hold
        raise ArchiveFormatError("`data.pkl` builds a bytearray from something other than bytes.")
    return bytearray(data)


def counter(counts: Any = None) -> collections.Counter:
    if counts is not None and type(counts) is not dict:  # its keys were checked as the dict was built
        raise ArchiveFormatError("`data.pkl` builds a Counter from something other than a dict.")
    return collections.Counter(counts or {})


#: The one global of :data:`META_GLOBALS` whose result a pickle may keep as a value (a layout).
LAYOUT_GLOBAL = _get_layout
