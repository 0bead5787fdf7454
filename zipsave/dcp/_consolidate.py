"""One ordinary zipsave archive out of a sharded checkpoint (zipsave's, or DCP's FileSystemWriter's)."""

from __future__ import annotations

import io
import math
import os
import pickle
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader, _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
from torch.futures import Future

from .._api import save_archive
from .._archive import Limits
from .._invariants import check_structure
from .._tensors import load_torch_bytes
from .._trust import prescan_pickle
from ..exceptions import ArchiveFormatError, IntegrityError, UnsafeGlobalError, ZipsaveError, reading
from . import _layout
from ._errors import raise_zipsave_error
from ._paths import confined
from ._reader import ZipReader, check_pickle
from ._tiling import check_tensors

__all__ = ["SafeFileSystemReader", "consolidate"]

_DCP_METADATA = ".metadata"

#: What DCP's pickled ``.metadata`` may reference: its own dataclasses, torch dtypes and sizes.
_ALLOWED = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata",
        "MetadataIndex",
        "ChunkStorageMetadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "TensorProperties",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"},
    "pathlib._local": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"},  # CPython 3.13
    "collections": {"OrderedDict"},
}


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, fp: Any, where: str) -> None:
        super().__init__(fp)
        self._where = where

    def find_class(self, module: str, name: str) -> Any:
        if name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeGlobalError(
            f"{module}.{name}",
            archive=self._where,
            member=_DCP_METADATA,
            hint="DCP's metadata holds only its own dataclasses; this file was made by something else.",
        )


class SafeFileSystemReader(FileSystemReader):
    """DCP's ``FileSystemReader`` whose pickled ``.metadata`` is read by an allowlist unpickler
    (DCP's metadata dataclasses, torch dtypes and sizes) instead of plain ``pickle.load``."""

    #: Why the last read_metadata failed: DCP replaces that error by its own.
    metadata_error: ZipsaveError | None = None
    #: The :class:`~zipsave.Limits` the ``.metadata`` pickle is read under.
    limits: Limits | None = None

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        try:
            return self._read_metadata()
        except ZipsaveError as err:
            self.metadata_error = err
            raise

    def _read_metadata(self) -> Metadata:
        path = os.path.join(os.fspath(self.path), _DCP_METADATA)
        with open(path, "rb") as fp:
            try:
                raw = fp.read()
                # C's unpickler preallocates claimed lengths and builds sets/dicts unchecked.
                prescan_pickle(raw, limits=self.limits, archive=os.fspath(self.path), member=_DCP_METADATA)
                metadata = _MetadataUnpickler(io.BytesIO(raw), os.fspath(self.path)).load()
            except ZipsaveError:
                raise
            except Exception as err:
                raise ArchiveFormatError(
                    f"cannot be read ({err}).", archive=os.fspath(self.path), member=_DCP_METADATA
                ) from err
        if not isinstance(metadata, Metadata):
            raise ArchiveFormatError("does not hold DCP Metadata.", archive=os.fspath(self.path), member=_DCP_METADATA)
        # The memo may share a chunk list among tensors, or one size among chunks: 23 KB naming
        # one list of 2 000 chunks under 2 000 keys took 7 s to check (quadratic), before any
        # walk: refused unless walking it is linear in what it holds (no cycle, no deep nesting).
        check_structure(metadata, objects=True, archive=os.fspath(self.path), member=_DCP_METADATA)
        held = _check_storage(os.fspath(self.path), metadata)
        check_tensors(metadata, held, self.limits, archive=os.fspath(self.path), member=_DCP_METADATA)
        _check_chunk_lengths(os.fspath(self.path), metadata)
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """DCP's ``FileSystemReader.read_data``, with each chunk read as zipsave reads a
        ``.pth`` member (its pickle checked first, its tensor checked after) and placed only
        where the metadata puts it."""
        root = os.fspath(self.path)
        per_file: dict[str, list[ReadItem]] = {}
        for item in plan.items:
            per_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        for relative_path, items in per_file.items():
            with open(confined(root, relative_path, archive=root, member=_DCP_METADATA), "rb") as stream:
                for item in items:
                    self._read_item(stream, root, relative_path, item, planner)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _read_item(self, stream: Any, root: str, relative_path: str, item: ReadItem, planner: LoadPlanner) -> None:
        info = self.storage_data[item.storage_index]
        fqn = item.storage_index.fqn
        if getattr(info, "transform_descriptors", None):
            raise ArchiveFormatError(
                f"stores `{fqn}` through transforms {list(info.transform_descriptors)!r}; zipsave "
                "reads plain DCP chunks.",
                archive=root,
                member=relative_path,
            )
        stream.seek(info.offset)
        raw = stream.read(info.length)
        if len(raw) != info.length:
            raise IntegrityError(f"ends inside `{fqn}` (truncated).", archive=root, member=relative_path)
        if item.type == LoadItemType.BYTE_IO:
            planner.load_bytes(item, io.BytesIO(raw))
            return
        tensor = load_torch_bytes(raw, archive=root, member=relative_path)
        target = planner.resolve_tensor(item).detach()
        try:
            if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided or tensor.dtype != target.dtype:
                raise ValueError(f"a {type(tensor).__name__} where a dense {target.dtype} chunk belongs")
            tensor = narrow_tensor_by_index(tensor, item.storage_offsets, item.lengths)
            if target.size() != tensor.size():
                raise ValueError(f"a {list(tensor.size())} slice where {list(target.size())} belongs")
        except (ValueError, RuntimeError, IndexError) as err:
            raise ArchiveFormatError(f"chunk of `{fqn}` holds {err}.", archive=root, member=relative_path) from None
        target.copy_(tensor)
        planner.commit_tensor(item, target)


def _check_storage(root: str, metadata: Metadata) -> int:
    """Every file the metadata's ``storage_data`` names lies inside ``root`` (a regular file),
    at a non-negative offset and length: DCP opens ``root / relative_path`` and reads that range.
    Returns the bytes those files hold."""
    storage = getattr(metadata, "storage_data", None)
    if not isinstance(storage, dict):
        raise ArchiveFormatError(
            f"holds no storage table (found {type(storage).__name__}).", archive=root, member=_DCP_METADATA
        )
    checked: dict[str, None] = {}
    held = 0
    for index, info in storage.items():
        if not isinstance(info, _StorageInfo):
            raise ArchiveFormatError(
                f"locates `{getattr(index, 'fqn', index)}` with a {type(info).__name__}, not DCP's _StorageInfo.",
                archive=root,
                member=_DCP_METADATA,
            )
        if info.relative_path not in checked:
            try:
                held += os.path.getsize(confined(root, info.relative_path, archive=root, member=_DCP_METADATA))
            except FileNotFoundError:
                raise IntegrityError(
                    f"names the file {info.relative_path!r}, which is missing from the checkpoint directory.",
                    archive=root,
                    member=_DCP_METADATA,
                ) from None
            checked[info.relative_path] = None
        if not all(type(n) is int and n >= 0 for n in (info.offset, info.length)):
            raise ArchiveFormatError(
                f"locates `{getattr(index, 'fqn', index)}` at offset {info.offset!r}, length {info.length!r}; "
                "expected non-negative integers.",
                archive=root,
                member=_DCP_METADATA,
            )
    return held


def _check_chunk_lengths(root: str, metadata: Metadata) -> None:
    """Each tensor chunk is stored, in at least the bytes its elements take."""
    for fqn, md in metadata.state_dict_metadata.items():
        if not isinstance(md, TensorStorageMetadata):
            continue
        for chunk in md.chunks:
            info = metadata.storage_data.get(MetadataIndex(fqn, chunk.offsets))
            need = math.prod(chunk.sizes) * md.properties.dtype.itemsize
            if info is None or info.length < need:
                found = "no stored chunk" if info is None else f"{info.length} stored bytes"
                raise ArchiveFormatError(
                    f"tensor `{fqn}`'s chunk at offsets {list(chunk.offsets)} needs {need} bytes and has {found}.",
                    archive=root,
                    member=_DCP_METADATA,
                )


class _ConsolidatePlanner(_EmptyStateDictLoadPlanner):
    """Rebuilds the whole state dict from the metadata; values load with ``weights_only``."""

    def __init__(self, allow_pickle: bool, source: str, limits: Limits | None = None) -> None:
        super().__init__()
        self._allow_pickle = allow_pickle
        self._source = source
        self._limits = limits

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        if self._allow_pickle:
            super().load_bytes(read_item, value)
            return
        raw = value.getvalue()
        check_pickle(raw, self._source, read_item.storage_index.fqn, self._limits)
        loaded = load_torch_bytes(raw, archive=self._source, member=read_item.storage_index.fqn)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


def _reader_for(src: str, allow_pickle: bool, limits: Limits | None = None) -> Any:
    if _layout.is_checkpoint_dir(src):
        return ZipReader(src, allow_pickle=allow_pickle, limits=limits)
    if os.path.isfile(os.path.join(src, _DCP_METADATA)):
        reader = SafeFileSystemReader(src)
        reader.limits = limits
        return reader
    raise ZipsaveError(
        f"is neither a zipsave DCP checkpoint (no `{_layout.INDEX}`) nor a DCP FileSystemWriter "
        f"directory (no `{_DCP_METADATA}`).",
        archive=src,
    )


def consolidate(
    src: str | os.PathLike, dst: Any, *, allow_pickle: bool = False, limits: Limits | None = None
) -> dict[str, Any]:
    """Turn a sharded checkpoint into one ordinary zipsave archive.

    Every shard is read in this one process (no process group needed) and each top-level
    key of the saved state dict becomes one member of ``dst``: a nested dict (a model's or
    optimizer's state dict) -> ``<key>.pth``, a tensor -> ``pytorch_variables.pth``, any other
    value -> ``data``. ``zipsave.load(dst)`` returns that dict again, ``zipsave.restore``
    loads it into live objects, ``zipsave.read(dst, "model/0.weight")`` reads one tensor,
    ``zipsave.load_archive`` (SB3's shape) returns ``(data, params, variables)``, and
    :class:`ZipReader` ``(dst)`` loads it back into any number of ranks.

    Parameters
    ----------
    src
        A checkpoint directory written by :class:`ZipWriter`, or by DCP's ``FileSystemWriter``
        (its pickled ``.metadata`` is read with an allowlist unpickler).
    dst
        The archive to write (path or writable binary file); replaced atomically.
    allow_pickle
        Let non-tensor values through that torch's ``weights_only`` loader refuses.
    limits
        The :class:`~zipsave.Limits` the checkpoint is read under (the defaults when ``None``).

    Returns
    -------
    dict
        The consolidated state dict (tensors on CPU).

    Notes
    -----
    The whole state is held in memory once: about the checkpoint's size.
    """
    src = os.fspath(src)
    state: dict[str, Any] = {}
    with reading(src):  # the error boundary: what reading the checkpoint raises names it
        reader = _reader_for(src, allow_pickle, limits)
        # dcp.load copies the dict it is given; the empty-state planner fills this one (as
        # torch's own dcp_to_torch_save does).
        try:
            _load_state_dict(
                state, storage_reader=reader, planner=_ConsolidatePlanner(allow_pickle, src, limits), no_dist=True
            )
        except CheckpointException as err:  # a BaseException: a damaged rank archive raises zipsave's error
            raise_zipsave_error(err, src, getattr(reader, "metadata_error", None), what="consolidating the checkpoint")
    data: dict[str, Any] = {}
    params: dict[str, Any] = {}
    variables: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if isinstance(value, dict):
            params[key] = value
        elif isinstance(value, torch.Tensor):
            variables[key] = value
        else:
            data[key] = value
    save_archive(dst, data=data, params=params, pytorch_variables=variables or None)
    return state
