"""State dicts <-> ``.pth`` members, straight between the archive file and tensor memory.

A ``.pth`` member is genuine ``torch.save`` output (a zip of stored, 64-byte-aligned
records). Saving streams ``torch.save`` into the member with torch's own CRC pass off. Loading
reads the member's tiny ``data.pkl`` with a metadata-only unpickler (no tensor bytes, no
foreign globals), then reads every storage record once, in file order, with ``readinto``
directly into its destination: the live tensor when one of the same dtype and shape exists
(restore in place), else a fresh storage. The member's CRC-32 is computed on helper threads
(:mod:`zipsave._crc`) while the next piece is read. Anything the metadata reader does not
understand falls back to ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import mmap as _mmap
import pickle
import sys
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any

import torch
from torch.autograd.graph import increment_version

from . import _crc
from .exceptions import ArchiveFormatError, IntegrityError, ParameterMismatchError

__all__ = ["PthMeta", "TensorRef", "get_device", "load_pth", "read_pth_meta", "save_pth"]

#: Members up to this size are read whole with one call, checked, then parsed from memory.
_SMALL_MEMBER = 1 << 20
#: Large records are read in pieces of this size, so checksumming starts on the first piece.
_PIECE = 4 << 20
_ALIGNMENT = 64

_crc_option_lock = threading.Lock()


def get_device(device: Any = "auto") -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU (SB3's rule); anything else via ``torch.device``."""
    if isinstance(device, torch.device):
        return device
    if device == "auto" or device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    return dev


# -- saving --------------------------------------------------------------------------------
def save_pth(stream: Any, obj: Any) -> None:
    """``torch.save(obj)`` into ``stream`` without torch's own CRC pass.

    The outer zip's CRC-32 covers the same bytes and is computed while they are written, so
    torch's per-record CRC would be a second pass over every tensor for nothing. The inner
    records then carry a CRC of 0, which ``torch.load`` accepts.
    """
    with _crc_option_lock:
        previous = torch.serialization.get_crc32_options()
        torch.serialization.set_crc32_options(False)
        try:
            torch.save(obj, stream)
        finally:
            torch.serialization.set_crc32_options(previous)


# -- metadata ------------------------------------------------------------------------------
class _Unsupported(Exception):
    """The metadata reader met something only ``torch.load`` understands."""


@dataclasses.dataclass(frozen=True)
class _StorageRef:
    key: str
    dtype: torch.dtype
    nbytes: int


@dataclasses.dataclass(frozen=True)
class TensorRef:
    """Where one saved tensor's bytes live, without the bytes."""

    storage: _StorageRef
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
        raise _Unsupported("tensor with hooks or metadata")
    if not isinstance(storage, _StorageRef):
        raise _Unsupported("tensor without a storage record")
    if len(size) != len(stride) or min((*size, *stride, storage_offset), default=0) < 0:
        raise _Unsupported("tensor with a negative size, stride or offset")
    return TensorRef(storage, int(storage_offset), tuple(map(int, size)), tuple(map(int, stride)), bool(requires_grad))


def _rebuild_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    if not isinstance(dtype, torch.dtype) or not isinstance(storage, _StorageRef):
        raise _Unsupported("tensor v3 without dtype")
    return _rebuild_v2(dataclasses.replace(storage, dtype=dtype), storage_offset, size, stride, requires_grad, backward_hooks, metadata)


def _rebuild_parameter(data, requires_grad, backward_hooks, state=None):
    if backward_hooks or state or not isinstance(data, TensorRef):
        raise _Unsupported("parameter with hooks or state")
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


class _MetaUnpickler(pickle.Unpickler):
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
        raise _Unsupported(f"global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _Unsupported("unknown persistent id")
        _, stype, key, _location, numel = pid
        if not isinstance(stype, _StorageType):
            raise _Unsupported("unknown storage type")
        return _StorageRef(str(key), stype.dtype, int(numel) * stype.dtype.itemsize)


@dataclasses.dataclass
class PthMeta:
    """The structure of one ``.pth`` member: the object tree with :class:`TensorRef` leaves
    and, for each storage key, the byte offset and length of its record in the member."""

    tree: Any
    records: dict[str, tuple[int, int]]


def read_pth_meta(view: Any) -> PthMeta:
    """Parse a ``.pth`` member's inner zip and ``data.pkl`` without touching tensor bytes.

    ``view`` needs ``read_at(offset, buffer)``, ``size`` and a file interface
    (:class:`~zipsave._archive.MemberView`). Raises ``_Unsupported`` for content only
    ``torch.load`` understands.
    """
    try:
        inner = zipfile.ZipFile(view)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, IndexError, OverflowError) as err:
        raise _Unsupported(f"not a torch zip ({err})") from err
    with inner:
        infos = inner.infolist()
        pkl = [i for i in infos if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"]
        if len(pkl) != 1:
            raise _Unsupported("no single data.pkl")
        prefix = pkl[0].filename[: -len("data.pkl")]
        names = {i.filename: i for i in infos}
        order = names.get(prefix + "byteorder")
        if order is not None and _raw_record(view, order).strip() != b"little":
            raise _Unsupported("big-endian archive")
        if order is None and sys.byteorder != "little":
            raise _Unsupported("no byteorder record on a big-endian machine")
        try:
            tree = _MetaUnpickler(io.BytesIO(_raw_record(view, pkl[0]))).load()
        except _Unsupported:
            raise
        except Exception as err:  # malformed pickle: let torch.load produce its own error
            raise _Unsupported(f"data.pkl unreadable ({err})") from err
        data_prefix = prefix + "data/"
        records = {
            info.filename[len(data_prefix) :]: (_record_start(view, info), info.file_size)
            for info in infos
            if info.filename.startswith(data_prefix)
        }
    return PthMeta(tree, records)


def _record_start(view: Any, info: zipfile.ZipInfo) -> int:
    """Offset of a stored record's bytes inside the member (from its local header)."""
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise _Unsupported("compressed record")
    head = bytearray(30)
    if view.read_at(info.header_offset, head) != 30 or head[:4] != b"PK\x03\x04":
        raise _Unsupported("damaged record header")
    start = info.header_offset + 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")
    if start + info.file_size > view.size:
        raise _Unsupported("record past the end")
    return start


def _raw_record(view: Any, info: zipfile.ZipInfo) -> bytes:
    """A small record's bytes. torch may have written it without a CRC, so zipfile's
    CRC-checking reader cannot be used; the outer member's CRC covers these bytes."""
    if info.file_size > 1 << 30:
        raise _Unsupported("oversized metadata record")
    buf = bytearray(info.file_size)
    if view.read_at(_record_start(view, info), buf) != len(buf):
        raise _Unsupported("short record")
    return bytes(buf)


class _BufferView(io.RawIOBase):
    """A small member held in memory, with the reading interface of a ``MemberView``."""

    def __init__(self, data: bytearray) -> None:
        super().__init__()
        self._data = memoryview(data)
        self.size = len(data)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def read_at(self, offset: int, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        n = max(0, min(view.nbytes, self.size - offset))
        view[:n] = self._data[offset : offset + n]
        return n

    def readinto(self, buf: Any) -> int:
        n = self.read_at(self._pos, buf)
        self._pos += n
        return n


# -- trees ---------------------------------------------------------------------------------
def _walk_leaves(tree: Any, leaf: type, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(tree, leaf):
        yield path, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _walk_leaves(v, leaf, path + (k,))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _walk_leaves(v, leaf, path + (i,))


def _walk_refs(tree: Any, path: tuple = ()) -> Iterator[tuple[tuple, TensorRef]]:
    """Every :class:`TensorRef` of a metadata tree, with its path of keys / indices."""
    return _walk_leaves(tree, TensorRef, path)


def _lookup(tree: Any, path: tuple) -> Any:
    for part in path:
        if isinstance(tree, dict):
            if part not in tree:
                return None
            tree = tree[part]
        elif isinstance(tree, (list, tuple)) and isinstance(part, int) and part < len(tree):
            tree = tree[part]
        else:
            return None
    return tree


def _replace(tree: Any, build: Callable[[TensorRef], Any]) -> Any:
    if isinstance(tree, TensorRef):
        return build(tree)
    if isinstance(tree, dict):
        out = type(tree)() if isinstance(tree, collections.OrderedDict) else {}
        for k, v in tree.items():
            out[k] = _replace(v, build)
        if hasattr(tree, "_metadata"):
            out._metadata = tree._metadata  # type: ignore[attr-defined]
        return out
    if isinstance(tree, list):
        return [_replace(v, build) for v in tree]
    if isinstance(tree, tuple):
        return tuple(_replace(v, build) for v in tree)
    return tree


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path))


# -- destinations --------------------------------------------------------------------------
def _byte_view(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory."""
    flat = t.detach().reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return flat.numpy().data.cast("B")


def _in_place_target(ref: TensorRef, target: Any, length: int) -> bool:
    """Can the record (``length`` bytes) be read straight into ``target``'s memory?"""
    return (
        isinstance(target, torch.Tensor)
        and target.device.type == "cpu"
        and target.dtype == ref.dtype
        and tuple(target.shape) == ref.size
        and target.layout == torch.strided
        and target.is_contiguous()
        and not target.is_conj()
        and not target.is_neg()
        and type(target) in (torch.Tensor, torch.nn.Parameter)
        and ref.is_contiguous()
        and ref.offset == 0
        and ref.nbytes == length
    )


def _check_targets(refs: list[tuple[tuple, Any]], targets: Any, *, shapes: bool, dtypes: bool) -> None:
    """Refuse, before a byte is read, saved tensors that do not fit their live targets."""
    problems = []
    for path, ref in refs:
        target = _lookup(targets, path)
        if not isinstance(target, torch.Tensor):
            continue
        if shapes and tuple(target.shape) != tuple(ref.shape):
            problems.append((path, f"saved shape {tuple(ref.shape)}, expected {tuple(target.shape)}"))
        elif dtypes and target.dtype != ref.dtype:
            problems.append((path, f"saved dtype {ref.dtype}, expected {target.dtype}"))
    if problems:
        listed = "; ".join(f"`{_dotted(path)}`: {what}" for path, what in problems)
        raise ParameterMismatchError(
            f"{len(problems)} saved tensor(s) do not fit the object: {listed}.",
            key=_dotted(problems[0][0]),
            hint="Build the object with the same architecture and dtypes as the saved one"
            + (", or pass `exact_match=False` to cast dtypes." if dtypes else "."),
        )


# -- loading -------------------------------------------------------------------------------
def load_pth(
    view: Any,
    *,
    device: torch.device,
    targets: Any = None,
    verify_crc: int | None = None,
    mmap: bool = False,
    check_shapes: bool = False,
    check_dtypes: bool = False,
    validate: Callable[[Any], None] | None = None,
) -> tuple[Any, set[tuple]]:
    """Load one ``.pth`` member from a :class:`~zipsave._archive.MemberView`.

    Parameters
    ----------
    view
        The member.
    device
        Where fresh tensors go.
    targets
        An object tree shaped like the saved one (e.g. the current ``state_dict(keep_vars=True)``);
        a saved tensor whose target has the same dtype and shape is read straight into it.
    verify_crc
        The member's expected CRC-32, checked while reading (``None`` skips the check).
        A member up to 1 MiB is checked before anything is written into a target; in a larger
        one a mismatch is found after the targets were filled, and the error says so.
    mmap
        Map records from the file instead of reading them (lazy; no CRC check).
    check_shapes, check_dtypes
        Raise :class:`~zipsave.ParameterMismatchError` (naming the key) before reading when
        a saved tensor's shape / dtype differs from its target's.
    validate
        Called with the saved tree (:class:`TensorRef` leaves) before any byte is read into
        a target, to refuse a state that does not fit (e.g. other keys).

    Returns
    -------
    (tree, filled)
        The loaded tree (filled targets appear as themselves) and the paths filled in place.
    """
    source = view
    if view.size <= _SMALL_MEMBER:
        data = bytearray(view.size)
        if view.read_at(0, data) != view.size:
            raise ArchiveFormatError("ends early (truncated).")
        if verify_crc is not None:
            _check_crc(zlib.crc32(data), verify_crc, filled=False)
            verify_crc = None
        source = _BufferView(data)
    try:
        meta = read_pth_meta(source)
    except _Unsupported:
        tree = _torch_load(source, device, verify_crc)
        if validate is not None:
            validate(tree)
        if targets is not None and (check_shapes or check_dtypes):
            _check_targets(list(_walk_leaves(tree, torch.Tensor)), targets, shapes=check_shapes, dtypes=check_dtypes)
        return tree, set()
    refs = list(_walk_refs(meta.tree))
    by_storage: dict[str, list[tuple[tuple, TensorRef]]] = collections.defaultdict(list)
    for path, ref in refs:
        if ref.storage.key not in meta.records:
            raise ArchiveFormatError(f"data.pkl names storage record `{ref.storage.key}`, which is missing.")
        length = meta.records[ref.storage.key][1]
        if ref.offset * ref.dtype.itemsize + ref.extent > length:
            raise ArchiveFormatError(f"storage record `{ref.storage.key}` is shorter than the tensors that use it.")
        by_storage[ref.storage.key].append((path, ref))
    if validate is not None:
        validate(meta.tree)
    if targets is not None and (check_shapes or check_dtypes):
        _check_targets(refs, targets, shapes=check_shapes, dtypes=check_dtypes)
    spans = sorted(meta.records.values())
    for (start, length), (next_start, _) in pairwise(spans):
        if start + length > next_start:
            return _torch_load(source, device, verify_crc), set()

    if mmap and source is view and getattr(view, "_fd", None) is not None:
        mapped = _mmap_tree(view, meta, by_storage, device)
        if mapped is not None:
            return mapped, set()

    # Each record's destination: one live target tensor, or a fresh storage.
    dest: dict[str, memoryview] = {}
    direct: dict[str, torch.Tensor] = {}
    storages: dict[str, torch.Tensor] = {}
    filled: set[tuple] = set()
    for key, users in by_storage.items():
        length = meta.records[key][1]
        if targets is not None and len(users) == 1:
            path, ref = users[0]
            target = _lookup(targets, path)
            if _in_place_target(ref, target, length):
                direct[key] = target
                dest[key] = _byte_view(target) if length else memoryview(b"")
                filled.add(path)
                continue
        # Plain 4 KiB pages: transparent huge pages (madvise) halved the page-fault cost when
        # free memory was at hand, but stalled on compaction when it was not (1.5-2x slower).
        buf = torch.empty(length, dtype=torch.uint8)
        storages[key] = buf
        dest[key] = buf.numpy().data.cast("B") if length else memoryview(bytearray())

    crc = _crc.OrderedCrc() if verify_crc is not None else None
    try:
        _read_records(source, meta, dest, crc)
        actual = crc.value() if crc is not None else None
    except BaseException as err:
        if crc is not None:
            crc.cancel()
        if direct and isinstance(err, ArchiveFormatError):
            err.detail += " Tensors of the live object were partly overwritten."
            err.args = (err._compose(),)
        raise
    finally:
        if direct:
            increment_version(list(direct.values()))  # as an in-place copy_ would
    if actual is not None and verify_crc is not None:
        _check_crc(actual, verify_crc, filled=bool(direct))

    moved: dict[str, torch.Tensor] = {}

    def build(ref: TensorRef) -> Any:
        key = ref.storage.key
        if key in direct:
            return direct[key]
        raw = moved.get(key)
        if raw is None:
            raw = storages[key] if device.type == "cpu" else storages[key].to(device)
            moved[key] = raw  # views of one storage stay views of one storage
        tensor = torch.empty(0, dtype=ref.dtype, device=raw.device).set_(
            raw.untyped_storage(), ref.offset, ref.size, ref.stride
        )
        if ref.parameter:
            return torch.nn.Parameter(tensor, requires_grad=ref.requires_grad)
        if ref.requires_grad:
            tensor.requires_grad_(True)
        return tensor

    return _replace(meta.tree, build), filled


def _read_records(view: Any, meta: PthMeta, dest: dict[str, memoryview], crc: _crc.OrderedCrc | None) -> None:
    """Read every destined record once, in file order; with ``crc``, also feed it every byte
    of the member (headers and unused records included) in order."""
    cursor = 0
    for key in sorted(dest, key=lambda k: meta.records[k][0]):
        start, length = meta.records[key]
        if crc is not None and start > cursor:
            _read_gap(view, cursor, start, crc)
        target = dest[key]
        done = 0
        while done < length:
            piece = target[done : min(length, done + _PIECE)]
            if view.read_at(start + done, piece) != piece.nbytes:
                raise ArchiveFormatError(f"ends inside storage record `{key}` (truncated).")
            if crc is not None:
                crc.feed(piece)
            done += piece.nbytes
        cursor = start + length
    if crc is not None and cursor < view.size:
        _read_gap(view, cursor, view.size, crc)


def _read_gap(view: Any, start: int, end: int, crc: _crc.OrderedCrc) -> None:
    pos = start
    while pos < end:
        gap = bytearray(min(end - pos, _PIECE))
        if view.read_at(pos, gap) != len(gap):
            raise ArchiveFormatError("ends early (truncated).")
        crc.feed(gap)
        pos += len(gap)


def _check_crc(actual: int, expected: int, *, filled: bool) -> None:
    if actual != expected:
        note = " Tensors of the live object were partly overwritten with these bytes." if filled else ""
        raise IntegrityError(f"CRC-32 {actual:08x} does not match the recorded {expected:08x} (corrupted).{note}")


def _mmap_tree(view: Any, meta: PthMeta, by_storage: dict, device: torch.device) -> Any:
    """The tree with every tensor backed by a private (copy-on-write) map of the file, or
    ``None`` when a record is not aligned for its dtype (e.g. an archive another tool wrote)."""
    for key in by_storage:
        start, length = meta.records[key]
        if length and (view.start + start) % _ALIGNMENT:
            return None
    try:
        mapped = _mmap.mmap(view._fd, 0, access=_mmap.ACCESS_COPY)
    except (OSError, ValueError):
        return None
    bases: dict[str, torch.Tensor] = {}
    for key in by_storage:
        start, length = meta.records[key]
        if length == 0:
            bases[key] = torch.empty(0, dtype=torch.uint8)
        else:
            bases[key] = torch.frombuffer(mapped, dtype=torch.uint8, count=length, offset=view.start + start)
            if device.type != "cpu":
                bases[key] = bases[key].to(device)

    def build(ref: TensorRef) -> Any:
        base = bases[ref.storage.key]
        tensor = torch.empty(0, dtype=ref.dtype, device=base.device).set_(
            base.untyped_storage(), ref.offset, ref.size, ref.stride
        )
        if ref.parameter:
            return torch.nn.Parameter(tensor, requires_grad=ref.requires_grad)
        return tensor.requires_grad_(ref.requires_grad) if ref.requires_grad else tensor

    return _replace(meta.tree, build)


def _torch_load(view: Any, device: torch.device, verify_crc: int | None) -> Any:
    """The fallback: ``torch.load(weights_only=True)`` after checking the member's CRC."""
    if verify_crc is not None:
        crc = 0
        buf = bytearray(min(_PIECE, max(view.size, 1)))
        pos = 0
        while pos < view.size:
            n = view.read_at(pos, buf)
            if not n:
                break
            crc = zlib.crc32(memoryview(buf)[:n], crc)
            pos += n
        _check_crc(crc, verify_crc, filled=False)
    view.seek(0)
    return torch.load(view, map_location=device, weights_only=True)
