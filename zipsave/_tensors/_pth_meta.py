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
from ..exceptions import ZipsaveError

__all__ = [
    "Damaged", "PthMeta", "StorageRef", "TensorRef", "Unsupported", "check_inner_zip", "raw_record", "read_pth_meta",
    "record_start",
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


def _rebuild_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    if backward_hooks or metadata:
        raise Unsupported("tensor with hooks or metadata")
    if not isinstance(storage, StorageRef):
        raise Unsupported("tensor without a storage record")
    if len(size) != len(stride) or min((*size, *stride, storage_offset), default=0) < 0:
        raise Unsupported("tensor with a negative size, stride or offset")
    return TensorRef(storage, int(storage_offset), tuple(map(int, size)), tuple(map(int, stride)), bool(requires_grad))


def _rebuild_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    if not isinstance(dtype, torch.dtype) or not isinstance(storage, StorageRef):
        raise Unsupported("tensor v3 without dtype")
    return _rebuild_v2(dataclasses.replace(storage, dtype=dtype), storage_offset, size, stride, requires_grad, backward_hooks, metadata)


def _rebuild_parameter(data, requires_grad, backward_hooks, state=None):
    if backward_hooks or state or not isinstance(data, TensorRef):
        raise Unsupported("parameter with hooks or state")
    return dataclasses.replace(data, requires_grad=bool(requires_grad), parameter=True)


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
    ("torch.storage", "UntypedStorage"): _StorageType(torch.uint8),
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
            attr = getattr(torch, name, None)
            if isinstance(attr, torch.dtype) and attr not in _QUANTIZED:
                return attr
        raise Unsupported(f"global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise Unsupported("unknown persistent id")
        _, stype, key, _location, numel = pid
        if not isinstance(stype, _StorageType):
            raise Unsupported("unknown storage type")
        return StorageRef(str(key), stype.dtype, int(numel) * stype.dtype.itemsize)


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
        except Exception as err:  # malformed pickle: let torch.load produce its own error
            raise Unsupported(f"data.pkl unreadable ({err})") from err
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
