"""The integrations a folder of an archive involves, by the registry's rules for a load: those
whose markers are among its members or whose data keys its ``data`` holds. A tool that decodes
or judges a folder's values (``read``, ``diff``, ``inspect``) imports them first, so it uses
their reviewed allowlists exactly as a load of that folder would, and imports no other."""

from __future__ import annotations

from typing import Any

from .. import _format, _registry
from ..exceptions import ZipsaveError

__all__ = ["data_bytes", "involve_handlers", "member_names"]


def member_names(src: Any, folder: str) -> set[str]:
    """The names of the archive's members relative to ``folder`` and to the root: what a
    handler's ``markers`` are looked up in, so integrations that cannot recognise the folder
    are not imported to be asked. ``src``: an ``ArchiveSource`` or a load session."""
    names = set(src.names())
    prefix = folder.strip("/") + "/" if folder.strip("/") else ""
    return names | {n[len(prefix):] for n in names if prefix and n.startswith(prefix)}


def data_bytes(src: Any, folder: str) -> bytes | None:
    """The folder's ``data`` as stored (at most the JSON limit; neither checked nor parsed):
    where a handler's ``data_keys`` are looked for. ``b""`` without one, ``None`` when it
    cannot be read (every such handler is then asked, and the decode reports the damage)."""
    member = _format.join(folder, _format.DATA)
    if not src.has(member):
        return b""
    try:
        return src.json_bytes(member)
    except ZipsaveError:
        return None


def involve_handlers(src: Any, folder: str) -> None:
    """Import the handlers a load of ``folder`` would ask about it (and so add their allowlists).
    ``src``: an ``ArchiveSource``; once a folder (each call reads the folder's ``data`` again)."""
    if folder not in src.involved:
        _registry.handlers(members=member_names(src, folder), data=lambda: data_bytes(src, folder))
        src.involved.add(folder)
