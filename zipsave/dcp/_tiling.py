"""A checkpoint's chunks must tile each tensor exactly -- no gap, no overlap, nothing outside
its bounds -- and its tensors must fit the memory budget, before anything is allocated: so
``consolidate`` and ``load`` build values only from bytes the checkpoint holds.

The tiling check is exact in any number of dimensions and takes O(n log n) for n chunks (a 300x300
grid of 90 000 chunks: 0.9 s on the shared 2-core VM, 10 us a chunk; 10 000: 0.15 s): a
box ``[a, b)`` has, as its discrete mixed difference, +1 or -1 at each of its 2^d corners (the
sign of the number of coordinates taken from ``b``). That map is linear and one-to-one, so the
chunks' indicator functions sum to the tensor's exactly when their signed corners, summed
point by point, equal the tensor's own. Only the dimensions some chunk splits count (real
checkpoints split one or two), and the corners are sorted, not hashed.

The corners are compared only for chunks whose volumes add up to the tensor's (a count that
differs is refused at once), and they are charged against the allocation budget: a chunk split
along 8 dimensions has 256 corners, about 10 KB of Python integers for 57 bytes of JSON, and
100 000 such chunks (5.6 MB of index) took 2 GB and a minute before they were refused."""

from __future__ import annotations

from typing import Any

from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

from .._bounds import alloc_budget
from ..exceptions import ArchiveFormatError, ArchiveLimitError

__all__ = ["CORNER_BYTES", "MAX_SPLIT_DIMS", "check_tensors", "check_tiling"]

#: Most dimensions one tensor's chunks may split (each chunk has 2^d corners to compare).
MAX_SPLIT_DIMS = 8
#: What one corner costs while the chunks are compared: an integer of the list being sorted.
CORNER_BYTES = 48
#: The most elements a tensor may have (torch counts them in a signed 64-bit integer).
_MAX_NUMEL = (1 << 63) - 1


def _corners(lo: list[int], hi: list[int], radix: list[int], out: list[int]) -> None:
    """Append the box's signed corners to ``out``, each one integer: the corner's coordinates in
    mixed radix, times two, plus one for a positive sign (integers are not tracked by the
    garbage collector, so a million corners cost no collection passes)."""
    d = len(lo)
    for bits in range(1 << d):
        code = 0
        for i in range(d):
            code = code * radix[i] + (hi[i] if bits >> i & 1 else lo[i])
        out.append(code * 2 + (0 if bin(bits).count("1") % 2 else 1))


def _signed(corners: list[int]) -> list[tuple[int, int]]:
    """Signed corners summed point by point (zeros dropped), in sorted order."""
    corners.sort()
    out: list[tuple[int, int]] = []
    for entry in corners:
        point, sign = entry >> 1, 1 if entry & 1 else -1
        if out and out[-1][0] == point:
            total = out[-1][1] + sign
            if total:
                out[-1] = (point, total)
            else:
                out.pop()
        else:
            out.append((point, sign))
    return out


def _count(dims: tuple[int, ...], what: str, fqn: str, **where: Any) -> int:
    """The elements ``dims`` hold, refused unless each is a non-negative integer and there are
    at most as many as a tensor can have (2**63 - 1), found without multiplying past that: a
    product of 60 000 declared 62-bit dimensions took 9 s."""
    if not all(isinstance(n, int) and n >= 0 for n in dims):
        raise ArchiveFormatError(
            f"tensor `{fqn}` has {what} {list(dims)}; dimensions are non-negative integers.", **where
        )
    if 0 in dims:
        return 0
    count = 1
    for n in dims:
        count *= n
        if count > _MAX_NUMEL:
            raise ArchiveFormatError(
                f"tensor `{fqn}` has {what} of {len(dims)} dimensions holding more than {_MAX_NUMEL} elements, more "
                "than a tensor can have.",
                **where,
            )
    return count


def check_tiling(
    fqn: str, size: tuple[int, ...], chunks: list[Any], *, max_corners: int | None = None, **where: Any
) -> int:
    """Refuse chunks (``offsets``/``sizes`` each) that do not tile a tensor of ``size`` exactly,
    and (an :class:`ArchiveLimitError`) chunks whose comparison would take more than
    ``max_corners`` corners. Linear in the chunks' dimensions until the corners; returns the
    corners it took."""
    d = len(size)
    numel = _count(size, "size", fqn, **where)
    boxes = []  # (offsets, sizes) of the chunks that hold an element
    volume = 0
    for chunk in chunks:
        offsets, sizes = tuple(chunk.offsets), tuple(chunk.sizes)
        if (
            len(offsets) != d
            or len(sizes) != d
            or not all(isinstance(n, int) for n in offsets + sizes)
            or any(o < 0 or n < 0 or o + n > s for o, n, s in zip(offsets, sizes, size))
        ):
            raise ArchiveFormatError(
                f"tensor `{fqn}` of size {list(size)} has a chunk at offsets {list(offsets)} of sizes {list(sizes)}, "
                "outside the tensor.",
                **where,
            )
        count = _count(sizes, "a chunk of sizes", fqn, **where)
        volume += count
        if count:
            boxes.append((offsets, sizes))
    split = sorted({k for offsets, sizes in boxes for k in range(d) if offsets[k] != 0 or sizes[k] != size[k]})
    if len(split) > MAX_SPLIT_DIMS:
        raise ArchiveLimitError(
            f"tensor `{fqn}` is split along {len(split)} dimensions; zipsave checks chunks split along at most "
            f"{MAX_SPLIT_DIMS}.",
            **where,
        )
    if volume != numel:
        _refuse_cover(fqn, size, volume, numel, **where)
    corners = (1 << len(split)) * (1 + len(boxes))
    if max_corners is not None and corners > max_corners:
        raise ArchiveLimitError(
            f"tensor `{fqn}` has chunks whose check takes {corners} corners ({len(split)} split dimensions), past "
            f"the {max_corners} the checkpoint's size allows (64 MiB plus 16 times its size, {CORNER_BYTES} bytes a "
            "corner).",
            **where,
        )
    radix = [size[k] + 1 for k in split]
    found: list[int] = []
    for offsets, sizes in boxes:
        _corners([offsets[k] for k in split], [offsets[k] + sizes[k] for k in split], radix, found)
    whole: list[int] = []
    if numel:
        _corners([0] * len(split), [size[k] for k in split], radix, whole)
    if _signed(found) != _signed(whole):
        _refuse_cover(fqn, size, volume, numel, **where)
    return corners


def _refuse_cover(fqn: str, size: tuple[int, ...], volume: int, numel: int, **where: Any) -> None:
    how = (
        "leave part of it uncovered"
        if volume < numel
        else "overlap"
        if volume > numel
        else "overlap and leave part of it uncovered"
    )
    raise ArchiveFormatError(
        f"the chunks of tensor `{fqn}` (size {list(size)}) {how}: they hold {volume} elements, the tensor "
        f"{numel}. Every element must come from exactly one chunk.",
        **where,
    )


def check_tensors(metadata: Metadata, held_bytes: int, limits: Any = None, **where: Any) -> None:
    """Every tensor of ``metadata`` tiled exactly by its chunks, and all of them together
    within the allocation budget of a checkpoint of ``held_bytes`` bytes (``limits``: 64 MiB
    plus 16x by default): checked before a loader allocates a tensor of the sizes the metadata
    declares. The comparison of all tensors' chunks takes at most that budget too."""
    budget = alloc_budget(held_bytes, limits)
    corners_left = budget // CORNER_BYTES
    total = 0
    for fqn, md in metadata.state_dict_metadata.items():
        if not isinstance(md, TensorStorageMetadata):
            continue
        size = tuple(md.size)
        total += _count(size, "size", fqn, **where) * md.properties.dtype.itemsize
        if total > budget:
            raise ArchiveLimitError(
                f"tensor `{fqn}` (size {list(size)}) brings the tensors to {total} bytes, past the {budget} bytes a "
                f"checkpoint of {held_bytes} bytes may allocate (64 MiB plus 16 times its size).",
                **where,
            )
        corners_left -= check_tiling(fqn, size, list(md.chunks), max_corners=corners_left, **where)
