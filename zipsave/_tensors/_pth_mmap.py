"""Tensors backed by the archive's own pages: a private (copy-on-write) map of the file per
``.pth`` member, checked once in place (per record, or the whole member) unless told not to."""

from __future__ import annotations

import mmap as _mmap
from typing import Any

import torch

from .. import _format
from ..exceptions import ArchiveFormatError, IntegrityError
from ._device import TORCH_OBJECTS
from ._prefault import mapped_crcs
from ._pth_meta import PthMeta, TensorRef
from ._pth_records import check_record
from ._tree import named, replace

__all__ = ["mmap_tree"]


def _check_crc(actual: int, expected: int) -> None:
    if actual != expected:
        raise IntegrityError(
            f"CRC-32 {actual:08x} does not match the recorded {expected:08x} (corrupted).",
            expected=f"crc32 {expected:08x}",
            found=f"crc32 {actual:08x}",
        )


def mmap_tree(
    view: Any,
    meta: PthMeta,
    by_storage: dict,
    device: torch.device,
    *,
    verify_crc: int | None = None,
    records: dict | None = None,
) -> Any:
    """The tree with every tensor backed by a private (copy-on-write) map of the file, or
    ``None`` when a record is not aligned for its dtype (e.g. an archive another tool wrote).

    With ``verify_crc`` the mapped bytes are checked once, before any tensor is made: each
    record against its own CRC-32 (``records``), else the whole member, leaving none of their
    pages resident (:func:`_check_mapped`); without it nothing is read until used."""
    for key in by_storage:
        start, length = meta.records[key]
        if length and (view.start + start) % _format.ALIGNMENT:
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
    if verify_crc is not None:
        _check_mapped(view, mapped, meta, by_storage, verify_crc, records)
    if device.type != "cpu":
        bases = {key: base.to(device) for key, base in bases.items()}

    def build(ref: TensorRef) -> Any:
        base = bases[ref.storage.key]
        tensor = torch.empty(0, dtype=TORCH_OBJECTS[ref.dtype], device=base.device).set_(
            base.untyped_storage(), ref.offset, ref.size, ref.stride
        )
        if ref.parameter:
            return torch.nn.Parameter(tensor, requires_grad=ref.requires_grad)
        return tensor.requires_grad_(ref.requires_grad) if ref.requires_grad else tensor

    return replace(meta.tree, build, torch_values=meta.torch_values)


def _check_mapped(view: Any, mapped: Any, meta: PthMeta, by_storage: dict, expected: int, records: dict | None) -> None:
    """Check the bytes about to be handed back mapped, leaving none of their pages resident
    (:func:`._prefault.mapped_crcs`)."""
    if records is None:
        (crc,) = mapped_crcs(view, mapped, view.start, [(0, view.size)])
        if crc is None:
            raise ArchiveFormatError("ends early (truncated).")
        _check_crc(crc, expected)
        return
    keys = sorted(by_storage, key=lambda k: meta.records[k][0])
    for key, crc in zip(keys, mapped_crcs(view, mapped, view.start, [meta.records[key] for key in keys])):
        if crc is None:
            raise ArchiveFormatError(f"ends inside storage record `{key}` (truncated).")
        check_record(
            records, "data/" + key, *meta.records[key], crc, tensors=named(path for path, _ in by_storage[key])
        )
