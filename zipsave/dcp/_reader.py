"""``ZipReader``: DCP's StorageReader for zipsave's sharded checkpoints and for ordinary archives."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import uuid
from typing import Any

from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from .._archive import DEFAULT_LIMITS, ArchiveReader, Limits, open_input
from .._bounds import alloc_budget
from .._json import loads as json_loads
from .._tensors import load_torch_bytes
from .._trust import check_torch_zip
from ..exceptions import ArchiveFormatError, IntegrityError, ZipsaveError, as_zipsave_error
from . import _layout, _metadata, _region
from ._archive_source import ArchiveSource, archive_metadata
from ._metadata import ItemLocation, RankFile
from ._paths import confined
from ._tiling import check_tensors

__all__ = ["ZipReader"]


@dataclasses.dataclass
class _Sharded:
    """``Metadata.storage_data`` of a sharded checkpoint: item locations and rank archives."""

    root: str
    locations: dict[Any, ItemLocation]
    ranks: dict[int, RankFile]


def check_pickle(raw: bytes, archive: Any, member: str, limits: Limits | None = None) -> None:
    """Refuse a pickled value that needs more than torch's ``weights_only`` loader allows.

    DCP's default planner unpickles non-tensor values with ``weights_only=False``, which would
    run whatever code the bytes name; they are first read with the restricted loader here.
    """
    # torch's unpickler builds sets and dicts without a hash-flood check and trusts the zip's
    # sizes: the value's zip and pickle are checked first, bounded by the value's own size.
    limits = limits or DEFAULT_LIMITS
    check_torch_zip(
        io.BytesIO(raw),
        size=len(raw),
        max_bytes=alloc_budget(len(raw), limits),
        max_ratio=limits.max_compression_ratio,
        archive=archive,
        member=member,
    )
    load_torch_bytes(raw, archive=archive, member=member)


def _check_locations(metadata: Metadata, locations: dict, where: str, root: str) -> None:
    """Each tensor chunk is stored, as a member of the chunk's own dtype and shape."""
    for fqn, md in metadata.state_dict_metadata.items():
        if not isinstance(md, TensorStorageMetadata):
            continue
        dtype = _metadata.dtype_name(md.properties.dtype)
        for chunk in md.chunks:
            loc = locations.get(MetadataIndex(fqn, chunk.offsets))
            if loc is None or loc.shape != tuple(chunk.sizes) or loc.dtype != dtype:
                found = (
                    "no stored chunk" if loc is None else f"a stored {loc.dtype} chunk of shape {list(loc.shape or ())}"
                )
                raise ArchiveFormatError(
                    f"tensor `{fqn}`'s chunk at offsets {list(chunk.offsets)} ({dtype}, sizes {list(chunk.sizes)}) "
                    f"has {found}.",
                    archive=root,
                    member=where,
                )


class ZipReader(StorageReader):
    """A ``torch.distributed.checkpoint`` storage reader for zipsave checkpoints.

    ``path`` is either a checkpoint directory written by :class:`ZipWriter`, or one ordinary
    zipsave archive (``zipsave.save``, ``save_archive``, :func:`consolidate`). In both cases
    DCP plans who reads what, so a checkpoint saved on N ranks loads on M ranks (resharding),
    and each rank reads only the byte ranges of the slices it needs, by random access.

    Nothing read runs code: the metadata is JSON (or, for an ordinary archive, the ``.pth``
    members' structure read by zipsave's metadata-only reader), and non-tensor values are
    checked with torch's ``weights_only`` loader before DCP's planner unpickles them.

    Parameters
    ----------
    path
        Checkpoint directory or archive file. ``checkpoint_id`` given to ``dcp.load`` replaces it.
    allow_pickle
        Let non-tensor values that torch's restricted loader refuses through to the planner
        (which unpickles them with ``weights_only=False``). Only for checkpoints you trust.
    limits
        The :class:`~zipsave.Limits` every archive and value is read under (the defaults when
        ``None``): member sizes, and what a pickled value may allocate.

    Notes
    -----
    In a sharded checkpoint every member read whole is checked against its CRC-32; a member
    read in part (resharding across uneven boundaries, or an ordinary archive) is checked
    against the manifest's size and CRC entry only -- ``zipsave verify`` reads every byte.
    """

    def __init__(self, path: str | os.PathLike, *, allow_pickle: bool = False, limits: Limits | None = None) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.allow_pickle = allow_pickle
        self.limits = limits or DEFAULT_LIMITS
        self.load_id = uuid.uuid4().hex
        self._storage: _Sharded | ArchiveSource | None = None
        #: Why the last read_metadata failed: DCP replaces that error by its own AssertionError.
        self.metadata_error: ZipsaveError | None = None

    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self._storage = None
        self.load_id = uuid.uuid4().hex

    # -- metadata -------------------------------------------------------------------------
    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        try:
            if os.path.isdir(self.path):
                metadata = self._read_index()
            else:
                metadata = archive_metadata(self.path, self.limits)
                metadata.version = CURRENT_DCP_VERSION
        except Exception as err:  # the error boundary: DCP would only gather it as a rank's failure
            new = as_zipsave_error(err, self.path)
            if new is None:
                if isinstance(err, ZipsaveError):
                    self.metadata_error = err
                raise
            self.metadata_error = new
            raise new from err
        if metadata.storage_meta is None:
            metadata.storage_meta = StorageMeta(checkpoint_id=self.path)
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def _read_index(self) -> Metadata:
        index = os.path.join(self.path, _layout.INDEX)
        if not os.path.isfile(index):
            raise ZipsaveError(
                f"holds no `{_layout.INDEX}`: no committed zipsave checkpoint is there.",
                archive=self.path,
                hint="A save that did not finish leaves no index; a DCP FileSystemWriter directory "
                "loads with FileSystemReader, or turns into one archive with zipsave.dcp.consolidate.",
            )
        with open_input(index) as fp:
            reader = ArchiveReader(fp, archive=index, limits=self.limits)
            raw = reader.read(_layout.METADATA)
        where = f"{_layout.INDEX}/{_layout.METADATA}"
        doc = json_loads(raw, max_depth=64, limits=self.limits)
        metadata, locations, ranks = _metadata.from_json(doc, where)
        held = 0
        for rank in ranks:  # refused before DCP plans a read: a name may not leave the directory
            file = confined(self.path, rank.file, archive=self.path, member=where, must_exist=False)
            held += os.path.getsize(file) if os.path.isfile(file) else 0
        # Values only from bytes the checkpoint holds: chunks tile each tensor, each stored whole.
        check_tensors(metadata, held, self.limits, archive=self.path, member=where)
        _check_locations(metadata, locations, where, self.path)
        metadata.storage_data = _Sharded(self.path, locations, {r.rank: r for r in ranks})
        return metadata

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if not isinstance(metadata.storage_data, (_Sharded, ArchiveSource)):
            raise ZipsaveError("the metadata was not read by ZipReader.", archive=self.path)
        self._storage = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    # -- data -----------------------------------------------------------------------------
    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        storage = self._storage
        if isinstance(storage, ArchiveSource):
            storage.read(plan.items, planner)
        elif isinstance(storage, _Sharded):
            by_rank: dict[int, list[ReadItem]] = {}
            for item in plan.items:
                loc = storage.locations.get(item.storage_index)
                if loc is None:
                    raise ArchiveFormatError(
                        f"the index lists no storage for `{item.storage_index.fqn}`.",
                        archive=self.path,
                        member=_layout.METADATA,
                    )
                by_rank.setdefault(loc.rank, []).append(item)
            for rank, items in sorted(by_rank.items()):
                self._read_rank(storage, rank, items, planner)
        else:
            raise ZipsaveError("read_data called before set_up_storage_reader.", archive=self.path)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _read_rank(self, storage: _Sharded, rank: int, items: list[ReadItem], planner: LoadPlanner) -> None:
        entry = storage.ranks.get(rank)
        if entry is None:
            raise ArchiveFormatError(f"names no archive for rank {rank}.", archive=self.path, member=_layout.INDEX)
        try:
            path = confined(storage.root, entry.file, archive=storage.root, member=_layout.INDEX)
            fp = open(path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise IntegrityError(
                f"rank {rank}'s archive is missing from the checkpoint directory.",
                archive=storage.root,
                member=entry.file,
                hint="The checkpoint is incomplete (files deleted or not copied); load an intact copy.",
            ) from None
        with fp:
            try:
                reader = ArchiveReader(fp, archive=path, limits=self.limits)
            except ZipsaveError as err:
                raise type(err)(
                    f"rank {rank}'s archive: {err.detail}", archive=path, member=err.member, hint=err.hint
                ) from err
            manifest = reader.read("manifest.json", verify=False) if "manifest.json" in reader else b""
            if hashlib.sha256(manifest).hexdigest() != entry.manifest_sha256:
                raise IntegrityError(
                    f"rank {rank}'s manifest differs from the one {_layout.INDEX} recorded (the archive was "
                    "replaced or changed after the save).",
                    archive=path,
                    member="manifest.json",
                )
            for item in items:
                loc = storage.locations[item.storage_index]
                self._read_item(reader, path, rank, loc, item, planner)

    def _read_item(
        self, reader: ArchiveReader, path: str, rank: int, loc: ItemLocation, item: ReadItem, planner: LoadPlanner
    ) -> None:
        if loc.member not in reader:
            raise IntegrityError(f"rank {rank}'s archive lacks this member.", archive=path, member=loc.member)
        try:
            reader.check_recorded(loc.member)
        except ZipsaveError as err:
            raise IntegrityError(f"rank {rank}: {err.detail}", archive=path, member=loc.member) from err
        if item.type == LoadItemType.BYTE_IO:
            try:
                raw = reader.read(loc.member)
            except ZipsaveError as err:
                raise type(err)(f"rank {rank}: {err.detail}", archive=path, member=loc.member) from err
            if not self.allow_pickle:
                check_pickle(raw, path, loc.member, self.limits)
            planner.load_bytes(item, io.BytesIO(raw))
            return
        if loc.dtype is None or loc.shape is None:
            raise ArchiveFormatError("is listed as a tensor without dtype or shape.", archive=path, member=loc.member)
        dtype = _metadata.dtype_from_name(loc.dtype, loc.member)
        info = reader.info(loc.member)
        view = reader.open_view(loc.member)
        with view:
            _region.read_into(
                view,
                0,
                loc.shape,
                dtype,
                item,
                planner,
                crc=info.CRC,
                member_size=info.file_size,
                where=f"rank {rank}",
                archive=path,
                member=loc.member,
            )

    @property
    def checkpoint_id(self) -> str:
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        return _layout.is_checkpoint_dir(checkpoint_id)
