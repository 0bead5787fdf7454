"""A state dict -> a ``.pth`` member: genuine ``torch.save`` output streamed into the
archive with torch's own CRC pass off (zipsave's writer hashes the bytes as they go), and
which values a member holds so that zipsave's weights-only reader reads them back. Each
record's offset, size and CRC-32 are noted from the write calls ``torch.save`` makes
(:class:`RecordingStream`, no second pass), for ``manifest.json``'s per-tensor checksums
that ``_pth_records`` checks on reads."""

from __future__ import annotations

import bisect
import collections
import io
import threading
import zipfile
from typing import Any

import numpy as np
import torch

from .. import _tensors  # _tensors: the loaded-tree check, for a state dict given as a value
from .._archive import crc32
from ..exceptions import EncodeError, ZipsaveError

__all__ = [
    "WEIGHTS_ONLY_CONTAINERS",
    "WEIGHTS_ONLY_LEAVES",
    "RecordingStream",
    "check_weights_only",
    "is_state_dict",
    "save_pth",
]

_crc_option_lock = threading.Lock()

#: The widest integer the reader decodes (``zipsave._bounds.MAX_INT_BITS``; a test keeps the two
#: equal), written out so that a save does not import the reader's bounds for it.
_MAX_INT_BITS = 1 << 17


# -- the records torch.save writes -------------------------------------------------------
#: Writes up to this size are kept (local headers, the central directory) to find records.
_KEEP = 4096


class RecordingStream(io.RawIOBase):
    """Passes ``torch.save``'s writes to the archive's member stream and notes, for each
    write, its offset, size and CRC-32 (the stream's own for large writes, which it hashes
    anyway on its helper threads; computed here for small ones) and the bytes of tiny ones.

    torch writes every record's data with one call (miniz's ``m_pWrite``), so a record is
    one logged write; :meth:`records` finds them from the inner zip's directory.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._checked = getattr(stream, "write_checked", None)
        self._pos = 0
        self._offsets: list[int] = []
        self._writes: list[tuple[int, int]] = []  # (size, crc)
        self._kept: dict[int, bytes] = {}

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        view = memoryview(b)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        if self._checked is not None:
            n, crc = self._checked(view)
        else:
            n, crc = self._stream.write(view), None
        if crc is None:
            crc = crc32(view)
        if n <= _KEEP:
            self._kept[self._pos] = bytes(view)
        self._offsets.append(self._pos)
        self._writes.append((n, crc))
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        self._stream.flush()

    def records(self) -> dict[str, dict[str, Any]] | None:
        """``{inner name: {"offset", "size", "crc32"}}`` for every record of the inner zip
        (its top folder stripped: ``data.pkl``, ``data/0``), or ``None`` when a record was
        not written as one call (then readers check the whole member instead)."""
        try:
            with zipfile.ZipFile(_Sparse(self._kept, self._pos)) as inner:
                infos = inner.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, IndexError, KeyError):
            return None
        table: dict[str, dict[str, Any]] = {}
        for info in infos:
            head = self._kept.get(info.header_offset)
            if head is None or len(head) < 30 or head[:4] != b"PK\x03\x04" or info.compress_size != info.file_size:
                return None
            start = (
                info.header_offset + 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")
            )
            if info.file_size == 0:
                crc = 0
            else:
                i = bisect.bisect_left(self._offsets, start)
                if i == len(self._offsets) or self._offsets[i] != start or self._writes[i][0] != info.file_size:
                    return None
                crc = self._writes[i][1]
            table[info.filename.partition("/")[2] or info.filename] = {
                "offset": start,
                "size": info.file_size,
                "crc32": f"{crc:08x}",
            }
        return table


class _Sparse(io.RawIOBase):
    """The kept small writes as a read-only file; reading a byte that was not kept fails."""

    def __init__(self, kept: dict[int, bytes], size: int) -> None:
        super().__init__()
        self._kept = kept
        self._starts = sorted(kept)
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, b: Any) -> int:
        out = memoryview(b).cast("B")
        want = max(0, min(out.nbytes, self._size - self._pos))
        done = 0
        while done < want:
            pos = self._pos + done
            i = bisect.bisect_right(self._starts, pos) - 1
            if i < 0:
                raise OSError("not kept")
            start = self._starts[i]
            chunk = self._kept[start]
            if pos >= start + len(chunk):
                raise OSError("not kept")
            piece = chunk[pos - start : pos - start + want - done]
            out[done : done + len(piece)] = piece
            done += len(piece)
        self._pos += done
        return done


# -- saving --------------------------------------------------------------------------------
def save_pth(stream: Any, obj: Any) -> None:
    """``torch.save(obj)`` into ``stream`` without torch's own CRC pass.

    The outer zip's CRC-32 covers the same bytes and is computed while they are written, so
    torch's per-record CRC would be a second pass over every tensor for nothing. The inner
    records then carry a CRC of 0, which ``torch.load`` accepts. Each record's own CRC-32
    comes from the same pass and is set on ``stream.records`` (when the stream has that
    attribute) for ``manifest.json``'s per-tensor checksums.
    """
    recorder = RecordingStream(stream)
    with _crc_option_lock:
        previous = torch.serialization.get_crc32_options()
        torch.serialization.set_crc32_options(False)
        try:
            torch.save(obj, recorder)  # type: ignore[arg-type]  # a binary stream, as torch needs
        finally:
            torch.serialization.set_crc32_options(previous)
    if hasattr(stream, "records"):
        stream.records = recorder.records()


# -- what a member holds -------------------------------------------------------------------
#: What ``torch.load(weights_only=True)`` reads back, by exact type (a subclass of a container,
#: a namedtuple, a ``defaultdict``, is a global it refuses; ``Counter``, which ``MultiStepLR``
#: keeps its milestones in, is one it reads).
WEIGHTS_ONLY_LEAVES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    torch.Size,
    torch.dtype,
    torch.device,
    torch.layout,
)
WEIGHTS_ONLY_CONTAINERS = (dict, collections.OrderedDict, collections.Counter, list, tuple, set)

#: The leaves zipsave's reader gives back as they were saved (``torch.Size`` comes back a tuple).
_SAME_LEAVES = frozenset(WEIGHTS_ONLY_LEAVES) - {torch.Size}
#: Dense tensors and the sparse ones the reader assembles from checked parts.
_LAYOUTS = frozenset(
    {torch.strided, torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc}
)
#: Deepest nesting of a state dict's containers: a state dict nests a few levels, the reader
#: refuses past ``MAX_TREE_DEPTH`` (200) and hashes keys nested up to ``MAX_KEY_DEPTH`` (100).
_MAX_DEPTH = 100


def check_weights_only(name: str, value: Any, path: str = "", depth: int = 0) -> None:
    """A state dict of your own stateful object (a replay buffer) becomes a ``.pth`` member,
    which zipsave reads only with torch's ``weights_only`` loader. Values that ``torch.save``
    writes and that loader refuses (numpy arrays and scalars, subclasses of the builtin
    containers) would make an archive no load can read, so they are refused here. Other
    objects are left to ``torch.save``: most of them fail there, before the archive is in place.
    A module's uninitialized parameter (a lazy module before its first call) is refused too."""
    if isinstance(value, torch.Tensor):
        if torch.nn.parameter.is_lazy(value):
            raise EncodeError(
                f"`{name}.state_dict(){path}` is an uninitialized parameter (a lazy module, such as "
                "`torch.nn.LazyLinear`, before its first call), which torch's safe loader (`weights_only=True`, "
                "the only way zipsave reads `.pth` members) refuses; nothing was written.",
                key=name,
                hint="Call the model once on an example input before saving, so that its parameters have shapes.",
            )
        return
    if type(value) in WEIGHTS_ONLY_LEAVES or depth > 100:
        return
    if type(value) in WEIGHTS_ONLY_CONTAINERS:
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            check_weights_only(name, item, f"{path}[{key!r}]", depth + 1)
        return
    refused = isinstance(value, (np.ndarray, np.generic, dict, list, tuple, set, frozenset, collections.deque))
    if not refused:
        return
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    raise EncodeError(
        f"`{name}.state_dict(){path}` is a {kind}, which torch's safe loader (`weights_only=True`, the only way "
        "zipsave reads `.pth` members) refuses, so the archive could not be loaded; nothing was written.",
        key=name,
        hint=(
            "Return tensors, numbers, strings and dicts/lists/tuples of them from `state_dict` (a numpy array as "
            "`torch.from_numpy(array)`, converted back in `load_state_dict`), or keep such values as plain "
            "app-state values (arrays, lists, deques), which `restore` fills in place."
        ),
    )


def is_state_dict(value: Any) -> bool:
    """Whether ``value`` is a state dict that a ``.pth`` member holds as it is: an exact ``dict``
    or ``OrderedDict`` holding at least one tensor, whose whole tree zipsave's weights-only
    reader gives back identically (types, key order, an ``OrderedDict``'s ``_metadata``,
    tensors with their dtype, shape, ``requires_grad`` and shared storages).

    Tensors (``Tensor`` or ``Parameter``, dense or sparse, on the CPU or a GPU, without
    attributes of their own) under string or integer keys, in dicts, ``OrderedDict`` objects,
    lists, tuples and sets, beside ``None``, booleans, integers up to the reader's bound,
    floats, complex numbers, strings, bytes and torch dtypes, devices and layouts. Anything
    else (a numpy array, a ``deque``, a namedtuple, a ``torch.Size``, a quantized tensor) and
    the value is not one."""
    if type(value) not in (dict, collections.OrderedDict) or not value:
        return False
    found = [0]
    if not _same_tree(value, 0, found) or not found[0]:
        return False
    try:
        _tensors.check_tree(value)  # what the reader checks every tree it returns against
    except ZipsaveError:
        return False
    return True


def _same_key(key: Any) -> bool:
    return type(key) is str or (type(key) is int and key.bit_length() <= _MAX_INT_BITS)


def _same_metadata(value: collections.OrderedDict, depth: int) -> bool:
    """A module's state dict carries ``_metadata`` (versions ``load_state_dict`` reads); the
    reader keeps that attribute only, and builds no tensor inside it."""
    attributes = vars(value)
    tensors = [0]
    return (
        set(attributes) == {"_metadata"} and _same_tree(attributes["_metadata"], depth + 1, tensors) and not tensors[0]
    )


def _same_tree(value: Any, depth: int, found: list[int]) -> bool:
    kind = type(value)
    if kind in (torch.Tensor, torch.nn.Parameter):
        found[0] += 1
        return (
            value.layout in _LAYOUTS
            and value.device.type in ("cpu", "cuda")
            and not (value.is_quantized or value.is_conj() or value.is_neg() or value.is_nested)
            and not vars(value)
        )
    if kind in _SAME_LEAVES:
        return kind is not int or value.bit_length() <= _MAX_INT_BITS
    if depth >= _MAX_DEPTH:
        return False
    if kind is dict or kind is collections.OrderedDict:
        if kind is collections.OrderedDict and vars(value) and not _same_metadata(value, depth):
            return False
        return all(_same_key(k) and _same_tree(v, depth + 1, found) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_same_tree(v, depth + 1, found) for v in value)
    if kind is set:
        return all(_same_key(v) for v in value)
    return False
