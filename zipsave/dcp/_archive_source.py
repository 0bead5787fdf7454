"""An ordinary zipsave archive seen as a DCP checkpoint: every ``.pth`` member's tensors are
one-chunk entries that ranks read slices of by random access."""

from __future__ import annotations

import dataclasses
import io
import os
from typing import Any

import torch
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlanner, ReadItem

from .._archive import DEFAULT_LIMITS, ArchiveReader, Limits, open_input
from .._tensors import SparseRef, TensorRef, as_torch_tree, read_pth_meta, torch_dtype
from .._tensors._tree import check_views
from ..exceptions import ArchiveFormatError, ZipsaveError
from . import _region

__all__ = ["ArchiveSource", "archive_metadata"]

_PTH = ".pth"


@dataclasses.dataclass(frozen=True)
class _TensorEntry:
    member: str
    start: int  # byte offset of the tensor's first element inside the member
    ref: TensorRef


@dataclasses.dataclass
class ArchiveSource:
    """``Metadata.storage_data`` for an ordinary archive: each key's tensor or plain value."""

    path: str
    entries: dict[MetadataIndex, _TensorEntry | Any]
    limits: Limits = DEFAULT_LIMITS

    def read(self, items: list[ReadItem], planner: LoadPlanner) -> None:
        with open_input(self.path) as fp:
            reader = ArchiveReader(fp, archive=self.path, limits=self.limits)
            views: dict[str, Any] = {}
            try:
                for item in items:
                    entry = self.entries.get(item.storage_index)
                    if item.type == LoadItemType.BYTE_IO:
                        # Values come from the metadata-only reader (plain data); torch.save here
                        # is how DCP's planner wants them handed over.
                        buf = io.BytesIO()
                        torch.save(entry, buf)
                        buf.seek(0)
                        planner.load_bytes(item, buf)
                        continue
                    if not isinstance(entry, _TensorEntry):
                        raise ArchiveFormatError(f"holds no tensor `{item.storage_index.fqn}`.", archive=self.path)
                    view = views.get(entry.member)
                    if view is None:
                        reader.check_recorded(entry.member)
                        view = views[entry.member] = reader.open_view(entry.member)
                    self._read_tensor(view, entry, item, planner)
            finally:
                for view in views.values():
                    view.close()

    def _read_tensor(self, view: Any, entry: _TensorEntry, item: ReadItem, planner: LoadPlanner) -> None:
        ref = entry.ref
        if ref.is_contiguous():
            _region.read_into(
                view,
                entry.start,
                ref.size,
                torch_dtype(ref.dtype),
                item,
                planner,
                crc=None,
                member_size=None,
                where=f"tensor `{item.storage_index.fqn}`",
                archive=self.path,
                member=entry.member,
            )
            return
        # A strided view was saved (rare): read the span it covers, then slice it in memory.
        raw = bytearray(ref.extent)
        if view.read_at(entry.start, raw) != len(raw):
            raise ArchiveFormatError("ends early (truncated).", archive=self.path, member=entry.member)
        dtype = torch_dtype(ref.dtype)
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        full = flat.as_strided(ref.size, ref.stride)
        for dim, (start, length) in enumerate(zip(item.storage_offsets, item.lengths)):
            full = full.narrow(dim, start, length)
        _region.check_bools(full, f"tensor `{item.storage_index.fqn}`", archive=self.path, member=entry.member)
        target = planner.resolve_tensor(item).detach()
        target.copy_(full)
        planner.commit_tensor(item, target)


def _tree_with_meta_tensors(tree: Any, found: dict[int, TensorRef]) -> Any:
    """``tree`` with every TensorRef replaced by a meta tensor of its shape, so DCP's own
    flattening names the keys exactly as it does for the live state dict."""
    if isinstance(tree, SparseRef):
        raise ArchiveFormatError(
            f"holds a {tree.layout} tensor; DCP loading reads dense tensors only.",
            hint="Load the archive with `zipsave.load` instead.",
        )
    if isinstance(tree, TensorRef):
        meta = torch.empty(tree.size, dtype=torch_dtype(tree.dtype), device="meta")
        found[id(meta)] = tree
        return meta
    if isinstance(tree, dict):
        return {k: _tree_with_meta_tensors(v, found) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_tree_with_meta_tensors(v, found) for v in tree]
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return tuple(_tree_with_meta_tensors(v, found) for v in tree)
    return tree


def archive_metadata(path: str, limits: Limits = DEFAULT_LIMITS) -> Metadata:
    """DCP ``Metadata`` for an ordinary zipsave archive: key ``<member>.<state-dict key>`` for
    each value in each ``.pth`` member (``model.pth`` -> ``model.0.weight``), one chunk per tensor."""
    path = os.fspath(path)
    state: dict[str, Any] = {}
    refs: dict[int, tuple[str, TensorRef]] = {}
    starts: dict[tuple[str, str], int] = {}
    with open_input(path) as fp:
        reader = ArchiveReader(fp, archive=path, limits=limits)
        for name in reader.names():
            if not name.endswith(_PTH):
                continue
            reader.check_recorded(name)
            with reader.open_view(name) as view:
                try:
                    meta = read_pth_meta(view, reader.limits)
                except ZipsaveError:
                    raise
                except Exception as err:  # the metadata reader refuses what only torch.load understands
                    raise ArchiveFormatError(
                        f"cannot be read by random access ({err}); DCP loading reads plain tensor state dicts.",
                        archive=path,
                        member=name,
                    ) from err
                try:  # every view inside its record, nothing refused, before DCP plans a read
                    check_views(meta.tree, {key: length for key, (_, length) in meta.records.items()})
                except ZipsaveError as err:
                    err.archive, err.member = path, name
                    err.args = (err._compose(),)
                    raise
            found: dict[int, TensorRef] = {}
            tree = as_torch_tree(meta.tree) if meta.torch_values else meta.tree  # a dtype value: torch's
            state[name[: -len(_PTH)]] = _tree_with_meta_tensors(tree, found)
            for key, ref in found.items():
                refs[key] = (name, ref)
                starts[(name, ref.storage.key)] = meta.records[ref.storage.key][0]
    flat, mappings = flatten_state_dict(state)
    md: dict[str, Any] = {}
    entries: dict[MetadataIndex, Any] = {}
    for fqn, value in flat.items():
        if isinstance(value, torch.Tensor) and id(value) in refs:
            member, ref = refs[id(value)]
            md[fqn] = TensorStorageMetadata(
                TensorProperties(dtype=torch_dtype(ref.dtype), requires_grad=ref.requires_grad),
                torch.Size(ref.size),
                [ChunkStorageMetadata(torch.Size([0] * len(ref.size)), torch.Size(ref.size))],
            )
            start = starts[(member, ref.storage.key)] + ref.offset * ref.dtype.itemsize
            entries[MetadataIndex(fqn, [0] * len(ref.size))] = _TensorEntry(member, start, ref)
        else:
            md[fqn] = BytesStorageMetadata()
            entries[MetadataIndex(fqn)] = value
    return Metadata(state_dict_metadata=md, planner_data=mappings, storage_data=ArchiveSource(path, entries, limits))
