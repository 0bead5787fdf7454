"""``inspect(verify=True)``: every member's bytes checked against its CRC-32, and every tensor
record of a ``.pth`` member against its own per-tensor CRC-32 when the manifest has one."""

from __future__ import annotations

from .. import _format
from .._archive import ArchiveSource
from .._tensors import (
    Unsupported,
    check_member,
    check_stored_record,
    dotted,
    read_pth_meta,
    record_table,
    walk_refs,
)
from ..exceptions import ArchiveFormatError, ArchiveLimitError, IntegrityError, UnsafeGlobalError, ZipsaveError

__all__ = ["check_archive"]


def check_archive(src: ArchiveSource) -> list[str]:
    """One sentence per problem (empty when every checked byte matches)."""
    reader = src.reader
    problems: list[str] = []
    for name in reader.names():
        if name == _format.MANIFEST:
            continue
        table = record_table(reader.expected(name)) if name.endswith(_format.PTH_SUFFIX) else None
        try:
            reader.check_recorded(name)
            with reader.open_view(name) as view:
                if table is None:
                    check_member(view, reader.info(name).CRC)
                    continue
                try:
                    meta = read_pth_meta(view, reader.limits)
                except (Unsupported, UnsafeGlobalError, ArchiveFormatError) as err:
                    if isinstance(err, (ArchiveLimitError, IntegrityError)):
                        raise
                    check_member(view, reader.info(name).CRC)  # what it holds is a load's to refuse
                    continue
                users: dict[str, list[str]] = {}
                for path, ref in walk_refs(meta.tree):
                    users.setdefault(ref.storage.key, []).append(f"`{dotted(path)}`")
                for key in sorted(meta.records, key=lambda k: meta.records[k][0]):
                    try:
                        check_stored_record(view, meta, key, table=table, tensors=", ".join(users.get(key, [])))
                    except ZipsaveError as err:
                        problems.append(f"`{name}`: {err.detail}")
        except ZipsaveError as err:
            problems.append(f"`{name}`: {err.detail}")
    return problems
