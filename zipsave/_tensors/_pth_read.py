"""A ``.pth`` member -> tensors: every storage record read once, in file order, with ``readinto``
straight into its destination (the live tensor when it fits, else fresh memory), CRC-32 checked
on helper threads; anything unusual falls back to ``torch.load(weights_only=True)``."""

from __future__ import annotations

import collections
import mmap as _mmap
import zlib
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import torch
from torch.autograd.graph import increment_version

from .. import _format
from .._archive import OrderedCrc
from ..exceptions import ArchiveFormatError, IntegrityError, ParameterMismatchError, ZipsaveError
from ._pth_meta import PthMeta, TensorRef, Unsupported, read_pth_meta
from ._tree import BufferView, byte_view, dotted, lookup, replace, walk_leaves, walk_refs

__all__ = ["load_member", "load_pth"]

#: Members up to this size are read whole with one call, checked, then parsed from memory.
_SMALL_MEMBER = 1 << 20
#: Large records are read in pieces of this size, so checksumming starts on the first piece.
_PIECE = 4 << 20
_ALIGNMENT = _format.ALIGNMENT

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
        target = lookup(targets, path)
        if not isinstance(target, torch.Tensor):
            continue
        if shapes and tuple(target.shape) != tuple(ref.shape):
            problems.append((path, f"saved shape {tuple(ref.shape)}, expected {tuple(target.shape)}"))
        elif dtypes and target.dtype != ref.dtype:
            problems.append((path, f"saved dtype {ref.dtype}, expected {target.dtype}"))
    if problems:
        listed = "; ".join(f"`{dotted(path)}`: {what}" for path, what in problems)
        raise ParameterMismatchError(
            f"{len(problems)} saved tensor(s) do not fit the object: {listed}.",
            key=dotted(problems[0][0]),
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
        source = BufferView(data)
    try:
        meta = read_pth_meta(source)
    except Unsupported:
        tree = _torch_load(source, device, verify_crc)
        if validate is not None:
            validate(tree)
        if targets is not None and (check_shapes or check_dtypes):
            _check_targets(list(walk_leaves(tree, torch.Tensor)), targets, shapes=check_shapes, dtypes=check_dtypes)
        return tree, set()
    refs = list(walk_refs(meta.tree))
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
            target = lookup(targets, path)
            if _in_place_target(ref, target, length):
                direct[key] = target
                dest[key] = byte_view(target) if length else memoryview(b"")
                filled.add(path)
                continue
        # Plain 4 KiB pages: transparent huge pages (madvise) halved the page-fault cost when
        # free memory was at hand, but stalled on compaction when it was not (1.5-2x slower).
        buf = torch.empty(length, dtype=torch.uint8)
        storages[key] = buf
        dest[key] = buf.numpy().data.cast("B") if length else memoryview(bytearray())

    crc = OrderedCrc() if verify_crc is not None else None
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

    return replace(meta.tree, build), filled


def _read_records(view: Any, meta: PthMeta, dest: dict[str, memoryview], crc: OrderedCrc | None) -> None:
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


def _read_gap(view: Any, start: int, end: int, crc: OrderedCrc) -> None:
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

    return replace(meta.tree, build)


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


def load_member(
    reader: Any, member: str, *, device: torch.device, targets: Any = None, verify: bool = True, mmap: bool = False,
    **checks: Any,
) -> tuple[Any, set]:
    """Load the ``.pth`` member ``member`` of an open ``ArchiveReader`` (into ``targets`` in
    place where they fit); ``checks`` are :func:`load_pth`'s. Errors name the archive and member."""
    if verify:
        reader.check_recorded(member)
    info = reader.info(member)
    view = reader.open_view(member)
    try:
        return load_pth(
            view,
            device=device,
            targets=targets,
            verify_crc=info.CRC if verify and not mmap else None,
            mmap=mmap and targets is None,
            **checks,
        )
    except ZipsaveError as err:
        err.archive, err.member = reader.archive, member
        err.args = (err._compose(),)
        raise
    except Exception as err:
        raise ArchiveFormatError(
            f"is not a loadable torch state ({type(err).__name__}: {err}).", archive=reader.archive, member=member
        ) from err
