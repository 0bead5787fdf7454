"""What a ``.pth`` member holds, read from its tiny ``data.pkl`` with a metadata-only unpickler:
tensor references (storage record, dtype, shape, strides), no tensor bytes, no foreign globals."""

from __future__ import annotations

import collections
import dataclasses
import sys
import zipfile
from typing import Any

import torch

from .._archive import DEFAULT_LIMITS
from .._bounds import check_zip_infos
from .._trust import BoundedUnpickler
from ..exceptions import ArchiveFormatError, ZipsaveError

__all__ = [
    "Damaged", "PthMeta", "RefusedRef", "SparseRef", "StorageRef", "TensorRef", "Unsupported", "check_inner_zip",
    "raw_record", "read_pth_meta", "record_start",
]

class Unsupported(Exception):
    """The metadata reader met something only ``torch.load`` understands."""


class Damaged(Unsupported):
    """The member's own zip structure is broken (a record header or record that is not where
    its directory says): damage, not a format this reader leaves to ``torch.load``."""


@dataclasses.dataclass(frozen=True)
class StorageRef:
    key: str
    dtype: torch.dtype
    nbytes: int


@dataclasses.dataclass(frozen=True)
class TensorRef:
    """Where one saved tensor's bytes live, without the bytes."""

    storage: StorageRef
    offset: int  # in elements
    size: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool
    parameter: bool = False
    #: Saved with hooks, metadata or attributes, which torch.load sets and the fast path cannot.
    extras: bool = False

    @property
    def dtype(self) -> torch.dtype:
        return self.storage.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.size

    @property
    def numel(self) -> int:
        n = 1
        for s in self.size:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def extent(self) -> int:
        """Bytes of the storage this tensor spans, from its first element."""
        if self.numel == 0:
            return 0
        return (1 + sum((n - 1) * s for n, s in zip(self.size, self.stride))) * self.dtype.itemsize

    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self.size), reversed(self.stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


_INT64 = (1 << 63) - 1


def _ints(values: Any) -> bool:
    return isinstance(values, tuple) and all(type(v) is int and 0 <= v <= _INT64 for v in values)


def _rebuild_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    if not isinstance(storage, StorageRef):
        return RefusedRef("a tensor without a storage record")
    if not (_ints(size) and _ints(stride) and _ints((storage_offset,)) and len(size) == len(stride)):
        return RefusedRef(
            f"a tensor of size {_short(size)}, stride {_short(stride)} and offset {_short(storage_offset)} "
            "(expected non-negative 64-bit integers, one stride per dimension)"
        )
    extras = bool(backward_hooks) or bool(metadata)  # torch.load sets them; the fast path cannot
    return TensorRef(storage, storage_offset, tuple(size), tuple(stride), requires_grad is True, extras=extras)


def _rebuild_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    if not isinstance(dtype, torch.dtype) or dtype in _QUANTIZED or not isinstance(storage, StorageRef):
        return RefusedRef(f"a tensor of dtype {_short(dtype)}")
    return _rebuild_v2(dataclasses.replace(storage, dtype=dtype), storage_offset, size, stride, requires_grad, backward_hooks, metadata)


def _rebuild_plain(storage, storage_offset, size, stride):
    return _rebuild_v2(storage, storage_offset, size, stride)


def _as_parameter(data: Any, requires_grad: Any, extras: bool) -> Any:
    if isinstance(data, TensorRef):
        return dataclasses.replace(data, requires_grad=requires_grad is True, parameter=True, extras=data.extras or extras)
    if isinstance(data, SparseRef) and not extras:
        return dataclasses.replace(data, requires_grad=requires_grad is True, parameter=True)
    return data if isinstance(data, RefusedRef) else RefusedRef(f"a parameter around {_short(data)}")


def _rebuild_parameter(data, requires_grad, backward_hooks=None, state=None):
    return _as_parameter(data, requires_grad, bool(backward_hooks) or bool(state))


def _parameter(data=None, requires_grad=True):
    return _as_parameter(data, requires_grad, False)


_SPARSE_LAYOUTS = {
    f"torch.{name}": getattr(torch, name) for name in ("sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc")
}
_LAYOUTS = {"torch.strided": torch.strided, **_SPARSE_LAYOUTS}


def _get_layout(name):
    return _LAYOUTS.get(name, RefusedRef(f"layout {_short(name)}")) if isinstance(name, str) else RefusedRef("a layout")


def _rebuild_sparse(layout, data):
    """A sparse tensor's parts, checked for shape here and assembled (invariants checked)
    by :func:`~zipsave._tensors._invariants.assemble_sparse`."""
    if layout not in _SPARSE_LAYOUTS.values() or not isinstance(data, tuple):
        return RefusedRef(f"a sparse tensor of layout {_short(layout)}")
    if layout == torch.sparse_coo and len(data) in (3, 4):
        parts, size, coalesced = data[:2], data[2], data[3] if len(data) == 4 else None
    elif layout != torch.sparse_coo and len(data) == 4:
        parts, size, coalesced = data[:3], data[3], None
    else:
        return RefusedRef(f"a {layout} tensor of {len(data)} parts")
    if not (_ints(size) and all(isinstance(p, TensorRef) and not p.extras for p in parts) and coalesced in (None, True, False)):
        return RefusedRef(f"a {layout} tensor whose parts are not plain tensors and sizes")
    return SparseRef(layout, tuple(parts), tuple(size), coalesced)


def _rebuild_from_type(func, new_type, args, state):
    """``torch._tensor._rebuild_from_type_v2``: a tensor, or a parameter, with attributes."""
    if func not in _REBUILDS or not isinstance(args, tuple) or new_type not in (_TENSOR, _PARAMETER):
        return RefusedRef(f"a tensor of type {_short(new_type)}")
    built = func(*args)
    if new_type is _PARAMETER:
        return _as_parameter(built, getattr(built, "requires_grad", False), bool(state))
    if state and isinstance(built, TensorRef):
        return dataclasses.replace(built, extras=True)
    return RefusedRef("a sparse tensor with attributes") if state else built


def _refused(what: str) -> Any:
    def rebuild(*args: Any, **kwargs: Any) -> RefusedRef:
        return RefusedRef(what)

    return rebuild


class _TensorClass:
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


_TENSOR = _TensorClass("torch.Tensor")
_PARAMETER = _TensorClass("torch.nn.parameter.Parameter")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_REBUILDS = {_rebuild_v2, _rebuild_v3, _rebuild_plain, _rebuild_parameter, _rebuild_sparse}


@dataclasses.dataclass(frozen=True)
class SparseRef:
    """A saved sparse tensor: its index and value tensors (:class:`TensorRef` each, in
    ``torch._utils._rebuild_sparse_tensor``'s order) and its size; assembled, with every
    invariant checked, by :func:`~zipsave._tensors._invariants.assemble_sparse`."""

    layout: torch.layout
    parts: tuple[TensorRef, ...]
    size: tuple[int, ...]
    coalesced: bool | None = None
    requires_grad: bool = False
    parameter: bool = False

    @property
    def dtype(self) -> torch.dtype:
        return self.parts[-1].dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.size


@dataclasses.dataclass(frozen=True)
class RefusedRef:
    """A value of ``data.pkl`` that zipsave does not build (a quantized, nested or meta tensor,
    a tensor torch would allocate unfilled...): a leaf, so the refusal can name its key."""

    what: str


class _StorageType:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype


_QUANTIZED = frozenset(
    getattr(torch, name) for name in ("qint8", "quint8", "qint32", "quint4x2", "quint2x4") if hasattr(torch, name)
)


def _legacy_storage_dtypes() -> dict[str, torch.dtype]:
    """``"FloatStorage"`` -> ``torch.float32`` etc., without touching the deprecated classes
    (reading ``torch.FloatStorage.dtype`` warns). Quantized storages are left to torch.load."""
    try:
        table = torch.storage._dtype_to_storage_type_map()
    except AttributeError:  # pragma: no cover - torch moved it; everything falls back
        return {}
    return {name: dtype for dtype, name in table.items() if dtype not in _QUANTIZED}


_STORAGE_DTYPES = _legacy_storage_dtypes()

_META_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Size"): torch.Size,
    ("torch", "device"): torch.device,
    ("torch", "Tensor"): _TENSOR,
    ("torch.nn.parameter", "Parameter"): _PARAMETER,
    ("torch.storage", "UntypedStorage"): _StorageType(torch.uint8),
    ("torch._utils", "_rebuild_tensor"): _rebuild_plain,
    ("torch._utils", "_rebuild_sparse_tensor"): _rebuild_sparse,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch.serialization", "_get_layout"): _get_layout,
    # torch.load(weights_only=True) builds these too; zipsave refuses them, naming the key.
    ("torch._utils", "_rebuild_qtensor"): _refused("a quantized tensor"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage"): _refused("a meta tensor (it has no data)"),
    ("torch._utils", "_rebuild_nested_tensor"): _refused("a nested tensor"),
    ("torch._utils", "_rebuild_wrapper_subclass"): _refused("a tensor subclass without storage"),
    ("torch._utils", "_rebuild_device_tensor_from_numpy"): _refused("a device tensor rebuilt from a numpy array"),
    ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor"): _refused("a device tensor rebuilt from another tensor"),
}


class _MetaUnpickler(BoundedUnpickler):
    """pickle's pure-Python unpickler (C's preallocates whatever length a pickle claims)
    with linear-time containers, resolving only torch's tensor-rebuilding names."""

    def find_class(self, module: str, name: str) -> Any:
        found = _META_GLOBALS.get((module, name))
        if found is not None:
            return found
        if module == "torch":
            if name in _STORAGE_DTYPES:
                return _StorageType(_STORAGE_DTYPES[name])
            if name in _QUANTIZED_STORAGES:
                return _StorageType(_QUANTIZED_STORAGES[name])
            attr = getattr(torch, name, None)
            if isinstance(attr, (torch.dtype, torch.qscheme)):
                return attr
        if f"{module}.{name}" in _TENSOR_CLASSES:
            return _TensorClass(f"{module}.{name}")
        # torch.load(weights_only=True) refuses every other global too (unless a caller
        # widened it with add_safe_globals, which zipsave does not follow).
        raise ArchiveFormatError(
            f"`data.pkl` names the global `{_short(module)}.{_short(name)}`, which a saved state dict never holds.",
            hint="Load it with torch.load yourself only if you trust the file.",
        )

    def persistent_load(self, pid: Any) -> Any:
        # torch's zip format: ("storage", type, key, location, numel); its legacy format adds
        # a view of another storage, which torch stopped writing long before SB3 existed.
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage" and pid[5:] in ((), (None,))):
            raise ArchiveFormatError(f"`data.pkl` holds the persistent id {_short(pid)}, which is not a storage.")
        _, stype, key, _location, numel = pid[:5]
        if not isinstance(stype, _StorageType) or not _ints((numel,)) or not isinstance(key, (str, int)):
            raise ArchiveFormatError(f"`data.pkl` holds the storage {_short(pid)}; expected a storage type, key and size.")
        return StorageRef(str(key), stype.dtype, numel * stype.dtype.itemsize)


#: ``torch.FloatTensor`` and the like, by the names a pickle spells them.
_TENSOR_CLASSES = frozenset(f"{cls.__module__}.{cls.__name__}" for cls in torch._tensor_classes) | {"torch.Tensor"}


def _quantized_storages() -> dict[str, torch.dtype]:
    try:
        table = torch.storage._dtype_to_storage_type_map()
    except AttributeError:  # pragma: no cover
        return {}
    return {name: dtype for dtype, name in table.items() if dtype in _QUANTIZED}


_QUANTIZED_STORAGES = _quantized_storages()


@dataclasses.dataclass
class PthMeta:
    """The structure of one ``.pth`` member: the object tree with :class:`TensorRef` leaves
    and, for each storage key, the byte offset and length of its record in the member."""

    tree: Any
    records: dict[str, tuple[int, int]]
    #: ``(offset, size)`` of the ``data.pkl`` record the tree was parsed from.
    pickle: tuple[int, int] = (0, 0)


def read_pth_meta(view: Any, limits: Any = None) -> PthMeta:
    """Parse a ``.pth`` member's inner zip and ``data.pkl`` without touching tensor bytes.

    ``view`` needs ``read_at(offset, buffer)``, ``size`` and a file interface
    (:class:`~zipsave._archive.MemberView`). Raises ``Unsupported`` for content only
    ``torch.load`` understands, and :class:`~zipsave.ArchiveLimitError` for an inner zip
    past ``limits`` (the archive's :class:`~zipsave.Limits`: a deflate bomb, a size lie).
    """
    try:
        inner = zipfile.ZipFile(view)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, IndexError, OverflowError, NotImplementedError) as err:
        raise Unsupported(f"not a torch zip ({err})") from err
    with inner:
        infos = inner.infolist()
        check_inner_zip(infos, view.size, limits)
        pkl = [i for i in infos if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"]
        if len(pkl) != 1:
            raise Unsupported("no single data.pkl")
        prefix = pkl[0].filename[: -len("data.pkl")]
        names = {i.filename: i for i in infos}
        order = names.get(prefix + "byteorder")
        if order is not None and raw_record(view, order).strip() != b"little":
            raise Unsupported("big-endian archive")
        if order is None and sys.byteorder != "little":
            raise Unsupported("no byteorder record on a big-endian machine")
        pickle_span = (record_start(view, pkl[0]), pkl[0].file_size)
        try:
            tree = _MetaUnpickler(raw_record(view, pkl[0])).load()
        except (Unsupported, ZipsaveError):
            raise
        except Exception as err:  # torch.save never writes a pickle this reader cannot follow
            raise ArchiveFormatError(f"`data.pkl` is not a pickle torch.save writes ({type(err).__name__}: {err}).") from err
        data_prefix = prefix + "data/"
        records = {
            info.filename[len(data_prefix) :]: (record_start(view, info), info.file_size)
            for info in infos
            if info.filename.startswith(data_prefix)
        }
    return PthMeta(tree, records, pickle_span)


def check_inner_zip(infos: list, size: int, limits: Any = None) -> None:
    """The outer archive's :class:`~zipsave.Limits` applied to a ``.pth`` member's own zip:
    its members together may not decompress past what one member may hold."""
    limits = limits or DEFAULT_LIMITS
    check_zip_infos(
        infos, size=size, max_bytes=min(limits.max_member_bytes, limits.max_total_bytes),
        max_ratio=limits.max_compression_ratio, max_members=limits.max_members,
    )


def record_start(view: Any, info: zipfile.ZipInfo) -> int:
    """Offset of a stored record's bytes inside the member (from its local header)."""
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise Unsupported("compressed record")
    head = bytearray(30)
    if not 0 <= info.header_offset <= view.size - 30 or view.read_at(info.header_offset, head) != 30 or head[:4] != b"PK\x03\x04":
        raise Damaged("damaged record header")
    start = info.header_offset + 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")
    if start + info.file_size > view.size:
        raise Damaged("record past the end")
    return start


def raw_record(view: Any, info: zipfile.ZipInfo) -> bytes:
    """A small record's bytes. torch may have written it without a CRC, so zipfile's
    CRC-checking reader cannot be used; the outer member's CRC covers these bytes."""
    if info.file_size > 1 << 30:
        raise Unsupported("oversized metadata record")
    buf = bytearray(info.file_size)
    if view.read_at(record_start(view, info), buf) != len(buf):
        raise Damaged("short record")
    return bytes(buf)
