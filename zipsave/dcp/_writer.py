"""``ZipWriter``: DCP's StorageWriter that writes one zip archive per rank and commits an index."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from typing import Any

import orjson
import torch
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from .._archive import ArchiveWriter, atomic_output
from .._invariants import flat_bytes
from ..exceptions import ZipsaveError
from . import _layout, _metadata
from ._metadata import ItemLocation, RankFile

__all__ = ["ZipWriter"]


@dataclasses.dataclass(frozen=True)
class _RankPlan:
    """What the coordinator tells each rank: its rank number and the file it writes."""

    rank: int
    file: str


@dataclasses.dataclass(frozen=True)
class _Written:
    """A WriteResult's storage data: where the item went, and its rank's finished archive."""

    location: ItemLocation
    rank_file: RankFile


def _tensor_bytes(tensor: torch.Tensor) -> tuple[torch.Tensor, memoryview]:
    """A contiguous CPU copy of ``tensor`` (or itself when it already is one) and its bytes."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    flat = flat_bytes(t) if t.numel() else torch.empty(0, dtype=torch.uint8)
    return t, flat.numpy().data.cast("B")


class ZipWriter(StorageWriter):
    """A ``torch.distributed.checkpoint`` storage that writes zip archives.

    Each rank writes its own shards, in parallel with the others, to its own archive
    ``rank-<rank>-<save id>.zip`` in the checkpoint directory: one stored, 64-byte-aligned
    member per tensor chunk, with CRC-32s and a ``manifest.json``. When every rank's archive
    is on disk (and synced), the coordinator writes ``index.zip`` -- DCP's ``Metadata`` as
    JSON plus the size and manifest hash of every rank archive -- by an atomic rename. That
    rename is the commit: until it happens the previous checkpoint in the directory stays
    whole and is what loads. The archives of the previous save are deleted after it.

    Parameters
    ----------
    path
        The checkpoint directory (created if missing). ``checkpoint_id`` given to
        ``dcp.save`` replaces it.
    sync_files
        ``fsync`` every archive and the directory before committing (the default). Without
        it a power loss may leave an index that names archives not fully on disk.
    sha256
        Also record a SHA-256 of every tensor member in the rank manifests (``zipsave verify``
        checks it); CRC-32 is always recorded and checked on load.

    Examples
    --------
    >>> import torch.distributed.checkpoint as dcp  # doctest: +SKIP
    >>> dcp.save(state_dict, storage_writer=zipsave.dcp.ZipWriter("ckpt"))  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike, *, sync_files: bool = True, sha256: bool = False) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.sync_files = sync_files
        self.sha256 = sha256
        self.save_id = uuid.uuid4().hex[:16]
        self.is_coordinator = False
        self.rank: int | None = None

    # -- DCP's sequence of calls ----------------------------------------------------------
    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.save_id = uuid.uuid4().hex[:16]

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        if not kwargs.get("use_collectives", True):
            raise ZipsaveError(
                "the zipsave DCP storage commits one index for all ranks and needs `use_collectives=True`.",
                archive=self.path,
            )

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        os.makedirs(self.path, exist_ok=True)
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ZipsaveError("is not a directory; a DCP checkpoint is a directory.", archive=self.path)
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # A fresh save id for every save, shared by all ranks: a save never overwrites a file the
        # committed index names, even when one writer object is reused without a checkpoint_id.
        self.save_id = uuid.uuid4().hex[:16]
        return [
            dataclasses.replace(plan, storage_data=_RankPlan(rank, _layout.rank_file(rank, self.save_id)))
            for rank, plan in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        rank_plan: _RankPlan = plan.storage_data
        results: list[tuple[MetadataIndex, int, ItemLocation]] = []
        target = os.path.join(self.path, rank_plan.file)
        rank_file = None
        if plan.items:
            with atomic_output(target, durable=self.sync_files) as f:
                writer = ArchiveWriter(f, sha256=True if self.sha256 else None)
                try:
                    for serial, item in enumerate(plan.items):
                        results.append(self._write_item(writer, rank_plan.rank, serial, item, planner))
                    writer.write_manifest()
                    manifest_sha = writer.members[-1].sha256
                    writer.close()
                except BaseException:
                    writer.abort()
                    raise
            rank_file = RankFile(rank_plan.rank, rank_plan.file, os.path.getsize(target), manifest_sha or "")
        out = [WriteResult(index, size, _Written(loc, rank_file)) for index, size, loc in results if rank_file]
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(out)
        return fut

    def _write_item(
        self, writer: ArchiveWriter, rank: int, serial: int, item: Any, planner: SavePlanner
    ) -> tuple[MetadataIndex, int, ItemLocation]:
        data: Any = planner.resolve_data(item)
        if item.type == WriteItemType.BYTE_IO:
            member = _layout.bytes_member(item.index.fqn, serial)
            raw = data.getvalue()
            writer.write_bytes(member, raw)
            return item.index, len(raw), ItemLocation(rank, member)
        tensor, view = _tensor_bytes(data)
        offsets = tuple(item.index.offset) if item.index.offset is not None else (0,) * tensor.dim()
        member = _layout.tensor_member(item.index.fqn, offsets, serial)
        with writer.open_member(member) as stream:
            stream.write(view)
        return (
            item.index,
            view.nbytes,
            ItemLocation(rank, member, _metadata.dtype_name(tensor.dtype), tuple(tensor.shape)),
        )

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        locations: dict[MetadataIndex, ItemLocation] = {}
        ranks: dict[int, RankFile] = {}
        for rank_results in results:
            for result in rank_results:
                written: _Written = result.storage_data
                locations[result.index] = written.location
                ranks[written.rank_file.rank] = written.rank_file
        metadata.version = CURRENT_DCP_VERSION
        metadata.storage_meta = self.storage_meta()
        doc = _metadata.to_json(metadata, locations, [ranks[r] for r in sorted(ranks)])
        metadata.storage_data = locations
        index = os.path.join(self.path, _layout.INDEX)
        with atomic_output(index, durable=self.sync_files) as f:
            writer = ArchiveWriter(f)
            try:
                writer.write_bytes(_layout.METADATA, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
                writer.write_manifest()
                writer.close()
            except BaseException:
                writer.abort()
                raise
        # Committed: the previous save's archives (and leftovers of killed saves) can go.
        for name in _layout.stale_files(self.path, {r.file for r in ranks.values()}):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.path, name))

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    @property
    def checkpoint_id(self) -> str:
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        return _layout.is_checkpoint_dir(checkpoint_id)
