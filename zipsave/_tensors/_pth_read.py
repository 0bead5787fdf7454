"""A ``.pth`` member -> tensors: every storage record read once, in file order, with ``readinto``
straight into its destination (the live tensor when it fits, else fresh memory), CRC-32 checked
on helper threads; anything unusual falls back to ``torch.load(weights_only=True)`` (checked
first and after, ``_pth_fallback.py``). Every tensor returned passes :mod:`._invariants`."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import torch
from torch.autograd.graph import increment_version

from .. import _archive, _format, _tensors  # _archive, _tensors: their rarely used parts, on first use
from .._archive import crc32
from .._invariants import flat_bytes
from ..exceptions import ArchiveFormatError, IntegrityError, ParameterMismatchError, UnsafeGlobalError, ZipsaveError
from ._device import TORCH_OBJECTS, as_torch
from ._invariants import check_tree
from ._pth_meta import PthMeta, TensorRef, Unsupported, read_pth_meta
from ._pth_records import check_record, record_table, verify_pickle
from ._tree import NAMED, BufferView, byte_view, check_views, dotted, lookup, named, replace, walk_leaves, walk_refs

if TYPE_CHECKING:
    from .._archive import OrderedCrc
    from ._prefault import Prefaulter

__all__ = ["load_member", "load_pth"]

#: Members up to this size are read whole with one call, checked, then parsed from memory.
#: Their fresh storages are under the sizes at which an arena (``_arena.ARENA_MIN``) or a
#: prefaulting thread (``_prefault.PREFAULT_MIN``) starts to pay (a test keeps it so), so a
#: load of small members never imports either.
_SMALL_MEMBER = 1 << 20
#: Large records are read in pieces of this size, so checksumming starts on the first piece.
_PIECE = 4 << 20
_ALIGNMENT = _format.ALIGNMENT


def _in_place_target(ref: TensorRef, target: Any, length: int) -> bool:
    """Can the record (``length`` bytes) be read straight into ``target``'s memory (on the
    CPU, or on a device through pinned staging buffers)?"""
    return (
        isinstance(target, torch.Tensor)
        and target.device.type in ("cpu", "cuda")
        and target.dtype == TORCH_OBJECTS[ref.dtype]
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


def _check_targets(refs: Iterable[tuple[tuple, Any]], targets: Any, *, shapes: bool, dtypes: bool) -> None:
    """Refuse, before a byte is read, saved tensors that do not fit their live targets."""
    problems = []
    for path, ref in refs:
        target = lookup(targets, path)
        if not isinstance(target, torch.Tensor):
            continue
        if shapes and tuple(target.shape) != tuple(ref.shape):
            problems.append((path, f"saved shape {tuple(ref.shape)}, expected {tuple(target.shape)}"))
        elif dtypes and target.dtype != as_torch(ref.dtype):
            problems.append((path, f"saved dtype {ref.dtype}, expected {target.dtype}"))
    if problems:
        listed = "; ".join(f"`{dotted(path)}`: {what}" for path, what in problems[:NAMED])
        if len(problems) > NAMED:
            listed += f"; and {len(problems) - NAMED} more"
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
    records: dict[str, dict[str, Any]] | None = None,
    limits: Any = None,
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
    records
        The member's per-tensor checksums from ``manifest.json`` (``None`` for archives
        without them). With ``verify_crc`` given and a member over 1 MiB, each record read is
        checked against its own CRC-32 instead of the whole member's (the bytes between
        records are then never read), and a mismatch names the tensor.

    limits
        The archive's :class:`~zipsave.Limits`, applied to the member's own zip too.

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
            _check_crc(crc32(data), verify_crc, filled=False)
            verify_crc = None
        source = BufferView(data)
    try:
        meta = read_pth_meta(source, limits)
    except Unsupported:
        tree = _tensors.torch_load(source, device, verify_crc, limits)
        if validate is not None:
            validate(tree)
        if targets is not None and (check_shapes or check_dtypes):
            _check_targets(walk_leaves(tree, torch.Tensor), targets, shapes=check_shapes, dtypes=check_dtypes)
        return tree, set()
    per_record = records is not None and verify_crc is not None
    if records is not None and per_record:
        verify_pickle(source, meta, records)
    # Every tensor is a view inside its record, or a refusal naming its key, before a byte is read.
    check_views(meta.tree, {key: length for key, (_, length) in meta.records.items()})
    # Each tensor the pickle holds, under the first key that names it, by storage record; and
    # how many keys name each record. A path for each key held only as the walk passes: a
    # pickle may name one tensor under a million keys in 2 bytes each.
    by_storage: dict[str, list[tuple[tuple, TensorRef]]] = collections.defaultdict(list)
    uses: collections.Counter[str] = collections.Counter()
    seen: set[int] = set()
    for path, ref in walk_refs(meta.tree):
        uses[ref.storage.key] += 1
        if id(ref) not in seen:
            seen.add(id(ref))
            by_storage[ref.storage.key].append((path, ref))
    if per_record:
        for key in by_storage:
            name = "data/" + key
            rec = records.get(name) if records else None
            if rec is None or (rec["offset"], rec["size"]) != meta.records[key]:
                check_record(
                    records or {}, name, *meta.records[key], 0, tensors=named(path for path, _ in by_storage[key])
                )
    if validate is not None:
        validate(meta.tree)
    if targets is not None and (check_shapes or check_dtypes):
        _check_targets(walk_refs(meta.tree), targets, shapes=check_shapes, dtypes=check_dtypes)
    spans = sorted(meta.records.values())
    if any(ref.extras for users in by_storage.values() for _, ref in users) or any(
        start + length > next_start for (start, length), (next_start, _) in pairwise(spans)
    ):
        return _tensors.torch_load(source, device, verify_crc, limits, census=False), set()

    if mmap and source is view and getattr(view, "_fd", None) is not None:
        mapped = _tensors.mmap_tree(
            view, meta, by_storage, device, verify_crc=verify_crc, records=records if per_record else None
        )
        if mapped is not None:
            return check_tree(mapped), set()

    # Each record's destination: one live target tensor, or a fresh storage.
    dest: dict[str, Any] = {}  # a memoryview of host memory, or a uint8 device tensor
    direct: dict[str, torch.Tensor] = {}
    storages: dict[str, torch.Tensor] = {}
    filled: set[tuple] = set()
    pending: list[str] = []  # fresh host storages, allocated together below
    for key, users in by_storage.items():
        length = meta.records[key][1]
        if targets is not None and uses[key] == 1:
            path, ref = users[0]
            target = lookup(targets, path)
            if _in_place_target(ref, target, length):
                direct[key] = target
                if target.device.type != "cpu":
                    dest[key] = flat_bytes(target.detach())
                else:
                    dest[key] = byte_view(target) if length else memoryview(b"")
                filled.add(path)
                continue
        if device.type == "cuda":  # straight into device memory: no CPU copy of the record
            storages[key] = dest[key] = torch.empty(length, dtype=torch.uint8, device=device)
            continue
        pending.append(key)
    # Fresh host storages: one arena (_arena.py), an idle one whose pages are resident or a
    # new one, huge pages where free; else torch.empty (the allocator's free memory, or 4 KiB
    # pages). New pages are populated ahead of the reads by a Prefaulter (_prefault.py).
    small = source is not view  # read whole already (see _SMALL_MEMBER)
    arena = _tensors.host_arena([meta.records[key][1] for key in pending]) if pending and not small else None
    for index, key in enumerate(pending):
        if arena is not None:
            storages[key], dest[key] = arena.parts[index]
            continue
        length = meta.records[key][1]
        buf = torch.empty(length, dtype=torch.uint8)
        storages[key] = buf
        dest[key] = buf.numpy().data.cast("B") if length else memoryview(bytearray())

    # Bytes read into fresh host memory are checksummed by this thread right after each read,
    # from the cache; into live tensors (a restore) by a helper thread beside the reads.
    inline = {key: key in storages and storages[key].device.type == "cpu" for key in dest}
    crc = _archive.OrderedCrc(inline=all(inline.values())) if verify_crc is not None and not per_record else None
    record_crcs = {key: _archive.OrderedCrc(inline=inline[key]) for key in dest} if per_record else None
    fresh = (
        [] if small or (arena is not None and not arena.fresh) else sorted(pending, key=lambda k: meta.records[k][0])
    )
    prefaulter = (
        _tensors.Prefaulter(
            [
                (storages[key].data_ptr() + done, min(_PIECE, meta.records[key][1] - done))
                for key in fresh
                for done in range(0, meta.records[key][1], _PIECE)
            ]
        )
        if fresh
        else None
    )
    try:
        _read_records(source, meta, dest, crc, record_crcs, prefaulter, frozenset(fresh))
        actual = crc.value() if crc is not None else None
        if record_crcs is not None:
            for key in sorted(record_crcs, key=lambda k: meta.records[k][0]):
                found = record_crcs[key].value()
                check_record(
                    records or {},
                    "data/" + key,
                    *meta.records[key],
                    found,
                    tensors=named(path for path, _ in by_storage[key]),
                )
    except BaseException as err:
        if crc is not None:
            crc.cancel()
        for each in (record_crcs or {}).values():
            each.cancel()
        if direct and isinstance(err, ArchiveFormatError):
            err.detail += " Tensors of the live object were partly overwritten."
            err.args = (err._compose(),)
        raise
    finally:
        if prefaulter is not None:
            prefaulter.close()
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
        tensor = torch.empty(0, dtype=TORCH_OBJECTS[ref.dtype], device=raw.device).set_(
            raw.untyped_storage(), ref.offset, ref.size, ref.stride
        )
        if ref.parameter:
            return torch.nn.Parameter(tensor, requires_grad=ref.requires_grad)
        if ref.requires_grad:
            tensor.requires_grad_(True)
        return tensor

    try:
        return check_tree(replace(meta.tree, build, torch_values=meta.torch_values)), filled
    except ArchiveFormatError as err:
        if direct:  # a live bool never keeps a byte torch leaves undefined (2 reads as True)
            for target in direct.values():
                if target.dtype is torch.bool:
                    target.detach().view(torch.uint8).clamp_(max=1)
            err.detail += " Tensors of the live object were partly overwritten."
            err.args = (err._compose(),)
        raise


def _read_records(
    view: Any,
    meta: PthMeta,
    dest: dict[str, Any],
    crc: OrderedCrc | None,
    record_crcs: dict[str, OrderedCrc] | None = None,
    prefaulter: Prefaulter | None = None,
    fresh: frozenset[str] = frozenset(),
) -> None:
    """Read every destined record once, in file order; with ``crc``, also feed it every byte
    of the member (headers and unused records included) in order; with ``record_crcs``, feed
    each record to its own checksum (helper threads checksum record *i* while this thread
    reads record *i + 1*). The ``fresh`` records' pieces of ``_PIECE`` bytes are the
    ``prefaulter``'s, in the same order: each is read once the helper made it resident."""
    cursor = 0
    piece_index = 0
    stager: _tensors.Stager | None = None
    for key in sorted(dest, key=lambda k: meta.records[k][0]):
        start, length = meta.records[key]
        if crc is not None and start > cursor:
            _read_gap(view, cursor, start, crc)
        target = dest[key]
        if isinstance(target, torch.Tensor):  # device memory, through pinned staging buffers
            feeds = [c for c in (crc, record_crcs[key] if record_crcs is not None else None) if c is not None]
            stager = stager or _tensors.Stager(target.device)
            stager.read_into(view, start, length, target, feeds)
            cursor = start + length
            continue
        done = 0
        while done < length:
            piece = target[done : min(length, done + _PIECE)]
            if prefaulter is not None and key in fresh:
                prefaulter.wait(piece_index)
                piece_index += 1
            if view.read_at(start + done, piece) != piece.nbytes:
                raise ArchiveFormatError(f"ends inside storage record `{key}` (truncated).")
            if crc is not None:
                crc.feed(piece)
            if record_crcs is not None:
                record_crcs[key].feed(piece)
            done += piece.nbytes
        cursor = start + length
    if crc is not None and cursor < view.size:
        _read_gap(view, cursor, view.size, crc)
    if stager is not None:
        stager.finish()


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
        raise IntegrityError(
            f"CRC-32 {actual:08x} does not match the recorded {expected:08x} (corrupted).{note}",
            expected=f"crc32 {expected:08x}",
            found=f"crc32 {actual:08x}",
        )


def load_member(
    reader: Any,
    member: str,
    *,
    device: torch.device,
    targets: Any = None,
    verify: bool = True,
    mmap: bool = False,
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
            verify_crc=info.CRC if verify else None,
            mmap=mmap and targets is None,
            records=record_table(reader.expected(member)) if verify else None,
            limits=reader.limits,
            **checks,
        )
    except UnsafeGlobalError as err:  # a tensor member that is not a state dict: no key to skip alone
        raise ArchiveFormatError(err.detail, archive=reader.archive, member=member, hint=err.hint) from err
    except ZipsaveError as err:
        err.archive, err.member = reader.archive, member
        err.args = (err._compose(),)
        raise
    except Exception as err:
        raise ArchiveFormatError(
            f"is not a loadable torch state ({type(err).__name__}: {err}).", archive=reader.archive, member=member
        ) from err
