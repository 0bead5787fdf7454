"""What a ``.pth`` member holds, read from its tiny ``data.pkl`` with a metadata-only unpickler:
tensor references (storage record, dtype, shape, strides), no tensor bytes, no foreign globals,
and no ``import torch`` unless the pickle names ``torch.Size`` or ``torch.device``."""

from __future__ import annotations

import _compat_pickle
import importlib
import sys
import zipfile
from typing import Any

from .._archive import DEFAULT_LIMITS
from .._bounds import check_zip_infos
from .._invariants import check_structure
from .._trust import BoundedUnpickler
from ..exceptions import ArchiveFormatError, UnsafeGlobalError, ZipsaveError
from ._pth_dtypes import DTYPES, QSCHEMES, STORAGE_DTYPES, TENSOR_CLASSES
from ._pth_refs import RefusedRef, SparseRef, StorageRef, TensorRef
from ._pth_vocab import (
    LAYOUT_GLOBAL,
    META_GLOBALS,
    StorageType,
    TensorClass,
    bytearray_,
    complex_,
    counter,
    ints,
    short,
)

__all__ = [
    "Damaged",
    "PthMeta",
    "RefusedRef",
    "SparseRef",
    "StorageRef",
    "TensorRef",
    "Unsupported",
    "check_inner_zip",
    "parse_meta",
    "parse_pickle",
    "raw_record",
    "read_pth_meta",
    "record_start",
]


class Unsupported(Exception):
    """The member's *format* is one only ``torch.load`` reads (deflated or big-endian records,
    no zip at all): its pickle is still read by this reader first (``_pth_fallback.py``).
    What the pickle *holds* is never left to torch: it is built, or refused by key."""


class Damaged(Unsupported):
    """The member's own zip structure is broken (a record header or record that is not where
    its directory says): damage, not a format this reader leaves to ``torch.load``."""


class _MetaUnpickler(BoundedUnpickler):
    """pickle's pure-Python unpickler (C's preallocates whatever length a pickle claims)
    with linear-time containers, resolving only torch's tensor-rebuilding names."""

    # It builds no slice, deque, defaultdict or array (none is among its names), and its tree's
    # depth is bounded by `check_structure`, tuples included: no check as each is built.
    checks_nesting = False
    #: Whether the pickle named a dtype, layout or quantization scheme that its tree may hold
    #: as a value (a stand-in, which a load turns into torch's: :attr:`PthMeta.torch_values`).
    torch_values = False

    def find_class(self, module: str, name: str) -> Any:
        if self.proto < 3:  # torch pickles with protocol 2: Python 2's names (`__builtin__.set`)
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            else:
                module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        found = META_GLOBALS.get((module, name))
        if found is not None:
            self.torch_values = self.torch_values or found is LAYOUT_GLOBAL
            return found
        if module == "torch":
            if name in STORAGE_DTYPES:
                return StorageType(STORAGE_DTYPES[name])
            named = DTYPES.get(name) or QSCHEMES.get(name)
            if named is not None:
                self.torch_values = True
                return named
            if name in ("Size", "device"):  # rare in a state dict: torch's own, so torch's checks
                return getattr(importlib.import_module("torch"), name)
        if f"{module}.{name}" in TENSOR_CLASSES:
            return TensorClass(f"{module}.{name}")
        plain = {
            "_codecs.encode": self._encode,
            "builtins.set": self._set,
            "builtins.complex": complex_,
            "builtins.bytearray": bytearray_,
            "collections.Counter": counter,
        }.get(f"{module}.{name}")
        if plain is not None:  # the plain values torch's weights-only loader builds
            return plain
        # torch.load(weights_only=True) refuses every other global too (unless a caller
        # widened it with add_safe_globals, which zipsave does not follow).
        raise UnsafeGlobalError(
            f"{module}.{name}"[:200],
            hint="A torch state dict holds tensors and plain values; torch.load(weights_only=True) refuses this "
            "global too. Load the file with torch.load yourself only if you trust it completely.",
        )

    def _encode(self, text: Any, encoding: Any = "latin1") -> bytes:
        if type(text) is not str or encoding not in ("latin1", "latin-1", "utf-8", "utf8"):
            raise ArchiveFormatError("`data.pkl` encodes bytes in a way pickle never does.")
        return text.encode(encoding)

    def _set(self, items: Any = ()) -> set:
        if type(items) not in (list, tuple):
            raise ArchiveFormatError("`data.pkl` builds a set from something other than a list.")
        out: set = set()
        self.keys.add_all(out, items)
        out.update(items)
        return out

    def persistent_load(self, pid: Any) -> Any:
        # torch's zip format: ("storage", type, key, location, numel); its legacy format adds
        # a view of another storage, which torch stopped writing long before SB3 existed.
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage" and pid[5:] in ((), (None,))):
            raise ArchiveFormatError(f"`data.pkl` holds the persistent id {short(pid)}, which is not a storage.")
        _, stype, key, _location, numel = pid[:5]
        if not isinstance(stype, StorageType) or not ints((numel,)) or not isinstance(key, (str, int)):
            raise ArchiveFormatError(
                f"`data.pkl` holds the storage {short(pid)}; expected a storage type, key and size."
            )
        return StorageRef(str(key), stype.dtype, numel * stype.dtype.itemsize)


def parse_pickle(payload: bytes) -> Any:
    """The tree ``data.pkl`` describes: references for tensors, refusals for what zipsave does
    not build, plain values bounded, its shape walkable (:func:`check_structure`); a pickle
    torch.save never writes is an error."""
    return parse_meta(payload)[0]


def parse_meta(payload: bytes) -> tuple[Any, bool]:
    """:func:`parse_pickle`'s tree, and whether it may hold stand-ins of torch's dtypes,
    layouts or quantization schemes as values (:attr:`PthMeta.torch_values`)."""
    try:
        unpickler = _MetaUnpickler(payload)
        return check_structure(unpickler.load()), unpickler.torch_values
    except (Unsupported, ZipsaveError):
        raise
    except Exception as err:  # torch.save never writes a pickle this reader cannot follow
        raise ArchiveFormatError(
            f"`data.pkl` is not a pickle torch.save writes ({type(err).__name__}: {err})."
        ) from err


class PthMeta:
    """The structure of one ``.pth`` member: the object tree with :class:`TensorRef` leaves
    and, for each storage key, the byte offset and length of its record in the member;
    ``pickle`` is the ``(offset, size)`` of the ``data.pkl`` record the tree was parsed from;
    ``torch_values`` says whether the tree may hold a dtype, layout or quantization scheme as
    a value: a stand-in (:mod:`._pth_dtypes`) that a load turns into torch's object."""

    __slots__ = ("tree", "records", "pickle", "torch_values")

    def __init__(
        self,
        tree: Any,
        records: dict[str, tuple[int, int]],
        pickle: tuple[int, int] = (0, 0),
        torch_values: bool = False,
    ) -> None:
        self.tree = tree
        self.records = records
        self.pickle = pickle
        self.torch_values = torch_values

    def __repr__(self) -> str:
        return (
            f"PthMeta(tree={self.tree!r}, records={self.records!r}, pickle={self.pickle!r}, "
            f"torch_values={self.torch_values!r})"
        )


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
        tree, torch_values = parse_meta(raw_record(view, pkl[0]))
        data_prefix = prefix + "data/"
        records = {
            info.filename[len(data_prefix) :]: (record_start(view, info), info.file_size)
            for info in infos
            if info.filename.startswith(data_prefix)
        }
    return PthMeta(tree, records, pickle_span, torch_values)


def check_inner_zip(infos: list, size: int, limits: Any = None) -> None:
    """The outer archive's :class:`~zipsave.Limits` applied to a ``.pth`` member's own zip:
    its members together may not decompress past what one member may hold."""
    limits = limits or DEFAULT_LIMITS
    check_zip_infos(
        infos,
        size=size,
        max_bytes=min(limits.max_member_bytes, limits.max_total_bytes),
        max_ratio=limits.max_compression_ratio,
        max_members=limits.max_members,
    )


def record_start(view: Any, info: zipfile.ZipInfo) -> int:
    """Offset of a stored record's bytes inside the member (from its local header)."""
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise Unsupported("compressed record")
    head = bytearray(30)
    if (
        not 0 <= info.header_offset <= view.size - 30
        or view.read_at(info.header_offset, head) != 30
        or head[:4] != b"PK\x03\x04"
    ):
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
