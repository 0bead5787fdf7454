"""State dicts <-> ``.pth`` members, straight between the archive file and tensor memory.

A ``.pth`` member is genuine ``torch.save`` output (a zip of stored, 64-byte-aligned
records). Saving streams ``torch.save`` into the member. Loading reads the member's tiny
``data.pkl`` with a metadata-only unpickler (no tensor bytes, no foreign globals), then reads
every storage record once, in file order, with ``readinto`` directly into its destination:
the live parameter when one exists (restore in place), else a fresh storage. The member's
CRC-32 is computed on a helper thread while the next record is read. Anything the metadata
reader does not understand falls back to ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import mmap as _mmap
import pickle
import threading
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import torch

from .exceptions import ArchiveFormatError, IntegrityError, ParameterMismatchError

__all__ = ["TensorRef", "get_device", "load_pth", "read_pth_meta", "save_pth"]

_CHUNK = 16 << 20
_crc_lock = threading.Lock()


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

    The outer zip's CRC-32 and the manifest's SHA-256 cover the same bytes, so torch's
    per-record CRC would be a second pass over every tensor for nothing.
    """
    with _crc_lock:
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
        return self.numel * _itemsize(self.dtype)

    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self.size), reversed(self.stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize


def _rebuild_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    if backward_hooks or metadata:
        raise _Unsupported("tensor with hooks or metadata")
    if not isinstance(storage, _StorageRef):
        raise _Unsupported("tensor without a storage record")
    return TensorRef(storage, int(storage_offset), tuple(size), tuple(stride), bool(requires_grad))


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
            attr = getattr(torch, name, None)
            if isinstance(attr, torch.dtype):
                return attr
            if name.endswith("Storage") and isinstance(attr, type) and issubclass(attr, torch.storage._LegacyStorage):
                return _StorageType(attr._dtype)  # `.dtype` warns that TypedStorage is deprecated
        raise _Unsupported(f"global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _Unsupported("unknown persistent id")
        _, stype, key, _location, numel = pid
        if not isinstance(stype, _StorageType):
            raise _Unsupported("unknown storage type")
        return _StorageRef(str(key), stype.dtype, int(numel) * _itemsize(stype.dtype))


@dataclasses.dataclass
class PthMeta:
    """The structure of one ``.pth`` member: the object tree with :class:`TensorRef` leaves
    and, for each storage key, the byte offset and length of its record in the member."""

    tree: Any
    records: dict[str, tuple[int, int]]


def read_pth_meta(view: Any) -> PthMeta:
    """Parse a ``.pth`` member's inner zip and ``data.pkl`` without touching tensor bytes.

    Raises ``_Unsupported`` for content only ``torch.load`` understands.
    """
    try:
        inner = zipfile.ZipFile(view)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
        raise _Unsupported(f"not a torch zip ({err})") from err
    with inner:
        infos = inner.infolist()
        pkl = [i for i in infos if i.filename.endswith("/data.pkl")]
        if len(pkl) != 1:
            raise _Unsupported("no single data.pkl")
        prefix = pkl[0].filename[: -len("data.pkl")]
        names = {i.filename: i for i in infos}
        order = names.get(prefix + "byteorder")
        if order is not None and _raw_record(view, order).strip() != b"little":
            raise _Unsupported("big-endian archive")
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
    if info.compress_type != zipfile.ZIP_STORED:
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
    buf = bytearray(info.file_size)
    if view.read_at(_record_start(view, info), buf) != len(buf):
        raise _Unsupported("short record")
    return bytes(buf)


def _walk_refs(tree: Any, path: tuple = ()):  # yields (path, TensorRef)
    if isinstance(tree, TensorRef):
        yield path, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _walk_refs(v, path + (k,))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _walk_refs(v, path + (i,))


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
        return type(tree)(_replace(v, build) for v in tree) if type(tree) is not tuple else tuple(_replace(v, build) for v in tree)
    return tree


def _byte_view(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory."""
    flat = t.detach().reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return memoryview(flat.numpy()).cast("B")


def _in_place_target(ref: TensorRef, target: Any) -> bool:
    return (
        isinstance(target, torch.Tensor)
        and target.device.type == "cpu"
        and target.dtype == ref.dtype
        and tuple(target.shape) == ref.size
        and target.is_contiguous()
        and not target.is_conj()
        and not target.is_neg()
        and target.layout == torch.strided
        and ref.is_contiguous()
    )


class _Crc:
    """CRC-32 of a member computed in order on one helper thread, overlapping the reads."""

    def __init__(self, enabled: bool) -> None:
        self.value = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zipsave-crc") if enabled else None
        self._jobs: list = []

    def _update(self, buf: Any) -> None:
        self.value = zlib.crc32(buf, self.value)

    def feed(self, buf: Any) -> None:
        if self._pool is not None:
            self._jobs.append(self._pool.submit(self._update, buf))

    def finish(self) -> int | None:
        if self._pool is None:
            return None
        for job in self._jobs:
            job.result()
        self._pool.shutdown()
        return self.value


def _read_exact(view: Any, offset: int, buf: memoryview, crc: _Crc, what: str) -> None:
    done = 0
    total = buf.nbytes
    while done < total:
        piece = buf[done : min(total, done + _CHUNK)]
        n = view.read_at(offset + done, piece)
        if n != piece.nbytes:
            raise ArchiveFormatError(f"ends inside {what} (truncated).")
        crc.feed(piece)
        done += n


def load_pth(
    view: Any,
    *,
    device: torch.device,
    targets: Any = None,
    verify_crc: int | None = None,
    mmap: bool = False,
) -> tuple[Any, set[tuple]]:
    """Load one ``.pth`` member from a :class:`~zipsave._archive.MemberView`.

    Parameters
    ----------
    targets
        An object tree shaped like the saved one (e.g. the current ``state_dict(keep_vars=True)``);
        a saved tensor whose target has the same dtype and shape is read straight into it.
    verify_crc
        The member's expected CRC-32; checked while reading. ``None`` skips the check.
    mmap
        Map records from the file instead of reading them (lazy; no CRC check).

    Returns
    -------
    (tree, filled)
        The loaded tree (filled targets appear as themselves) and the paths filled in place.
    """
    try:
        meta = read_pth_meta(view)
    except _Unsupported:
        return _torch_load(view, device, verify_crc), set()
    refs = list(_walk_refs(meta.tree))
    by_storage: dict[str, list[tuple[tuple, TensorRef]]] = collections.defaultdict(list)
    for path, ref in refs:
        if ref.storage.key not in meta.records:
            raise ArchiveFormatError(f"data.pkl names storage record `{ref.storage.key}` that is missing.")
        _start, length = meta.records[ref.storage.key]
        if ref.numel and (ref.offset + 1 + sum((n - 1) * s for n, s in zip(ref.size, ref.stride))) * _itemsize(ref.dtype) > length:
            raise ArchiveFormatError(f"storage record `{ref.storage.key}` is shorter than the tensors that use it.")
        by_storage[ref.storage.key].append((path, ref))

    if mmap and verify_crc is None and getattr(view, "_fd", None) is not None:
        return _mmap_tree(view, meta, by_storage, device), set()

    # Decide each record's destination: one live target tensor, or a fresh storage.
    dest: dict[str, memoryview] = {}
    direct: dict[str, torch.Tensor] = {}
    storages: dict[str, torch.Tensor] = {}
    filled: set[tuple] = set()
    for key, users in by_storage.items():
        start, length = meta.records[key]
        if len(users) == 1 and targets is not None:
            path, ref = users[0]
            target = _lookup(targets, path)
            if _in_place_target(ref, target) and ref.offset == 0 and ref.nbytes == length:
                direct[key] = target
                dest[key] = _byte_view(target) if length else memoryview(b"")
                filled.add(path)
                continue
        buf = torch.empty(length, dtype=torch.uint8)
        storages[key] = buf
        dest[key] = memoryview(buf.numpy()).cast("B") if length else memoryview(bytearray())

    crc = _Crc(verify_crc is not None)
    cursor = 0
    try:
        for key in sorted(dest, key=lambda k: meta.records[k][0]):
            start, length = meta.records[key]
            if start > cursor:
                gap = bytearray(start - cursor)
                if view.read_at(cursor, gap) != len(gap):
                    raise ArchiveFormatError("ends early (truncated).")
                crc.feed(gap)
            elif start < cursor:
                raise _Unsupported("overlapping records")
            _read_exact(view, start, dest[key], crc, f"record `{key}`")
            cursor = start + length
        if verify_crc is not None and cursor < view.size:
            tail = bytearray(view.size - cursor)
            view.read_at(cursor, tail)
            crc.feed(tail)
    finally:
        actual = crc.finish()
    if verify_crc is not None and actual != verify_crc:
        raise IntegrityError(f"CRC-32 {actual:08x} does not match the recorded {verify_crc:08x} (corrupted).")

    def build(ref: TensorRef) -> Any:
        key = ref.storage.key
        if key in direct:
            tensor = direct[key]
        else:
            raw = storages[key]
            tensor = torch.empty(0, dtype=ref.dtype).set_(raw.untyped_storage(), ref.offset, ref.size, ref.stride)
            if device.type != "cpu":
                tensor = tensor.to(device)
        if ref.parameter and not isinstance(tensor, torch.nn.Parameter):
            return torch.nn.Parameter(tensor, requires_grad=ref.requires_grad)
        if ref.requires_grad and key not in direct:
            tensor.requires_grad_(True)
        return tensor

    return _replace(meta.tree, build), filled


def _mmap_tree(view: Any, meta: PthMeta, by_storage: dict, device: torch.device) -> Any:
    mapped = _mmap.mmap(view._fd, 0, access=_mmap.ACCESS_COPY)
    bases: dict[str, torch.Tensor] = {}
    for key in by_storage:
        start, length = meta.records[key]
        if length == 0:
            bases[key] = torch.empty(0, dtype=torch.uint8)
        else:
            bases[key] = torch.frombuffer(mapped, dtype=torch.uint8, count=length, offset=view.start + start)

    def build(ref: TensorRef) -> Any:
        base = bases[ref.storage.key]
        tensor = torch.empty(0, dtype=ref.dtype).set_(base.untyped_storage(), ref.offset, ref.size, ref.stride)
        if device.type != "cpu":
            tensor = tensor.to(device)
        if ref.parameter:
            return torch.nn.Parameter(tensor, requires_grad=ref.requires_grad)
        return tensor.requires_grad_(ref.requires_grad) if ref.requires_grad else tensor

    return _replace(meta.tree, build)


def _torch_load(view: Any, device: torch.device, verify_crc: int | None) -> Any:
    if verify_crc is not None:
        crc = 0
        buf = bytearray(_CHUNK)
        pos = 0
        while pos < view.size:
            n = view.read_at(pos, buf)
            if not n:
                break
            crc = zlib.crc32(memoryview(buf)[:n], crc)
            pos += n
        if crc != verify_crc:
            raise IntegrityError(f"CRC-32 {crc:08x} does not match the recorded {verify_crc:08x} (corrupted).")
    view.seek(0)
    return torch.load(view, map_location=device, weights_only=True)


def check_shapes(tree: Any, targets: Any, *, exact: bool) -> list[str]:
    """Describe every saved tensor whose target has another shape or dtype."""
    problems = []
    for path, value in _walk_tensors(tree):
        target = _lookup(targets, path)
        if isinstance(target, torch.Tensor) and isinstance(value, torch.Tensor):
            if tuple(target.shape) != tuple(value.shape):
                problems.append(f"`{'.'.join(map(str, path))}`: saved shape {tuple(value.shape)}, expected {tuple(target.shape)}")
            elif exact and target.dtype != value.dtype:
                problems.append(f"`{'.'.join(map(str, path))}`: saved dtype {value.dtype}, expected {target.dtype}")
    return problems


def _walk_tensors(tree: Any, path: tuple = ()):
    if isinstance(tree, torch.Tensor):
        yield path, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _walk_tensors(v, path + (k,))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _walk_tensors(v, path + (i,))
