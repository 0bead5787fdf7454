"""DCP's ``Metadata`` <-> a JSON document: data only, so reading it back runs no code."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from ..exceptions import ArchiveFormatError, EncodeError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ItemLocation",
    "RankFile",
    "dtype_from_name",
    "dtype_name",
    "from_json",
    "to_json",
]

FORMAT = "zipsave-dcp"
FORMAT_VERSION = 1

_MEMORY_FORMATS = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "preserve_format": torch.preserve_format,
}
_LAYOUTS = {"strided": torch.strided}


@dataclasses.dataclass(frozen=True)
class ItemLocation:
    """Where one written item lives: which rank's archive, which member, and its chunk's
    dtype and shape (``None`` for a bytes item)."""

    rank: int
    member: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class RankFile:
    """One rank's archive as the index records it."""

    rank: int
    file: str
    size: int
    manifest_sha256: str


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: Any, where: str) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ArchiveFormatError(f"names an unknown dtype {name!r}.", member=where)
    return dtype


def _path_to_json(path: Any) -> list:
    out = []
    for part in path:
        if not isinstance(part, (str, int)) or isinstance(part, bool):
            raise EncodeError(
                f"the planner's key path {path!r} holds a {type(part).__name__}; only str and int parts "
                "can be stored as JSON.",
                hint="Use DefaultSavePlanner, or a planner whose planner_data maps keys to str/int paths.",
            )
        out.append(part)
    return out


def to_json(metadata: Metadata, locations: dict[MetadataIndex, ItemLocation], ranks: list[RankFile]) -> dict:
    """The JSON document for ``metadata`` (``locations`` replaces its ``storage_data``)."""
    entries: dict[str, Any] = {}
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            entries[fqn] = {"type": "bytes"}
            continue
        props = md.properties
        memory_format = next((k for k, v in _MEMORY_FORMATS.items() if v == props.memory_format), None)
        layout = next((k for k, v in _LAYOUTS.items() if v == props.layout), None)
        if memory_format is None or layout is None:
            raise EncodeError(
                f"has layout {props.layout} / memory format {props.memory_format}, which the "
                "zipsave DCP storage does not store.",
                key=fqn,
            )
        entries[fqn] = {
            "type": "tensor",
            "dtype": dtype_name(props.dtype),
            "size": list(md.size),
            "requires_grad": bool(props.requires_grad),
            "layout": layout,
            "memory_format": memory_format,
            "pin_memory": bool(props.pin_memory),
            "chunks": [{"offsets": list(c.offsets), "sizes": list(c.sizes)} for c in md.chunks],
        }
    planner_data = metadata.planner_data
    if planner_data is not None:
        if not isinstance(planner_data, dict):
            raise EncodeError(
                f"the planner's planner_data is a {type(planner_data).__name__}; the zipsave DCP "
                "storage stores a dict of key paths (what DefaultSavePlanner makes)."
            )
        planner_data = {str(k): _path_to_json(v) for k, v in planner_data.items()}
    storage_meta = None
    if metadata.storage_meta is not None:
        sm = metadata.storage_meta
        storage_meta = {
            "checkpoint_id": None if sm.checkpoint_id is None else str(sm.checkpoint_id),
            "save_id": sm.save_id,
            "modules": list(sm.modules),
        }
    storage = [
        {
            "fqn": index.fqn,
            "offset": None if index.offset is None else list(index.offset),
            "index": index.index,
            "rank": loc.rank,
            "member": loc.member,
            "dtype": loc.dtype,
            "shape": None if loc.shape is None else list(loc.shape),
        }
        for index, loc in locations.items()
    ]
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "dcp_version": metadata.version,
        "ranks": [dataclasses.asdict(r) for r in ranks],
        "state_dict_metadata": entries,
        "planner_data": planner_data,
        "storage_meta": storage_meta,
        "storage_data": storage,
    }


def _ints(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ArchiveFormatError(f"holds {value!r} where a list of integers belongs.", member=where)
    return value


def _field(obj: Any, key: str, kind: type | tuple, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj or not isinstance(obj[key], kind):
        raise ArchiveFormatError(f"lacks `{key}` of the expected type.", member=where)
    return obj[key]


def from_json(doc: Any, where: str) -> tuple[Metadata, dict[MetadataIndex, ItemLocation], list[RankFile]]:
    """Rebuild ``Metadata``, the item locations and the rank files from :func:`to_json`'s document.

    Only plain values are read; every field is type-checked, and a malformed document raises
    :class:`~zipsave.ArchiveFormatError` naming ``where``.
    """
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ArchiveFormatError(f"is not a {FORMAT} metadata document.", member=where)
    version = doc.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ArchiveFormatError(
            f"has format_version {version!r}; this zipsave reads up to {FORMAT_VERSION}.",
            member=where,
            hint="Upgrade zipsave to read this checkpoint.",
        )
    state: dict[str, Any] = {}
    for fqn, entry in _field(doc, "state_dict_metadata", dict, where).items():
        kind = _field(entry, "type", str, where)
        if kind == "bytes":
            state[fqn] = BytesStorageMetadata()
            continue
        if kind != "tensor":
            raise ArchiveFormatError(f"entry `{fqn}` has unknown type {kind!r}.", member=where)
        layout = _LAYOUTS.get(_field(entry, "layout", str, where))
        memory_format = _MEMORY_FORMATS.get(_field(entry, "memory_format", str, where))
        if layout is None or memory_format is None:
            raise ArchiveFormatError(f"entry `{fqn}` has an unknown layout or memory format.", member=where)
        props = TensorProperties(
            dtype=dtype_from_name(entry.get("dtype"), where),
            layout=layout,
            requires_grad=bool(_field(entry, "requires_grad", bool, where)),
            memory_format=memory_format,
            pin_memory=bool(_field(entry, "pin_memory", bool, where)),
        )
        chunks = [
            ChunkStorageMetadata(
                offsets=torch.Size(_ints(c.get("offsets") if isinstance(c, dict) else None, where)),
                sizes=torch.Size(_ints(c.get("sizes") if isinstance(c, dict) else None, where)),
            )
            for c in _field(entry, "chunks", list, where)
        ]
        state[fqn] = TensorStorageMetadata(props, torch.Size(_ints(entry.get("size"), where)), chunks)
    planner_data = doc.get("planner_data")
    if planner_data is not None:
        if not isinstance(planner_data, dict):
            raise ArchiveFormatError("`planner_data` is not an object.", member=where)
        planner_data = {k: tuple(_field({"p": v}, "p", list, where)) for k, v in planner_data.items()}
    storage_meta = None
    sm = doc.get("storage_meta")
    if isinstance(sm, dict):
        storage_meta = StorageMeta(
            checkpoint_id=sm.get("checkpoint_id"), save_id=sm.get("save_id"), modules=list(sm.get("modules") or [])
        )
    locations: dict[MetadataIndex, ItemLocation] = {}
    for item in _field(doc, "storage_data", list, where):
        offset = item.get("offset") if isinstance(item, dict) else None
        index = MetadataIndex(
            _field(item, "fqn", str, where),
            None if offset is None else _ints(offset, where),
            item.get("index") if isinstance(item.get("index"), int) else None,
        )
        shape = item.get("shape")
        locations[index] = ItemLocation(
            rank=_field(item, "rank", int, where),
            member=_field(item, "member", str, where),
            dtype=item.get("dtype") if isinstance(item.get("dtype"), str) else None,
            shape=None if shape is None else tuple(_ints(shape, where)),
        )
    ranks = [
        RankFile(
            rank=_field(r, "rank", int, where),
            file=_field(r, "file", str, where),
            size=_field(r, "size", int, where),
            manifest_sha256=_field(r, "manifest_sha256", str, where),
        )
        for r in _field(doc, "ranks", list, where)
    ]
    metadata = Metadata(
        state_dict_metadata=state,
        planner_data=planner_data,
        storage_data=locations,
        storage_meta=storage_meta,
        version=doc.get("dcp_version") if isinstance(doc.get("dcp_version"), str) else None,
    )
    return metadata, locations, ranks
