"""What a load asks of an archive folder before it involves any integration: the names of its
members (where a handler's markers are looked up), its ``data`` as stored (where its data keys
are), and whether the manifest lists it as saved from a dict (then no handler is asked)."""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from typing import Any

from .. import _format
from ..exceptions import ZipsaveError

__all__ = ["data_bytes", "member_names", "saved_as_app_state"]


class _FolderMembers(AbstractSet):
    """Member names relative to a folder and to the root, looked up without listing them: a
    set built per folder made a load quadratic in its component folders."""

    def __init__(self, src: Any, prefix: str) -> None:
        self._src = src
        self._prefix = prefix

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return self._src.has(name) or bool(self._prefix) and self._src.has(self._prefix + name)

    def __iter__(self) -> Iterator[str]:
        names = self._src.names()
        below = {n[len(self._prefix) :] for n in names if self._prefix and n.startswith(self._prefix)}
        return iter(set(names) | below)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def member_names(src: Any, folder: str) -> AbstractSet[str]:
    """The names of the archive's members relative to ``folder`` and to the root: what a
    handler's ``markers`` are looked up in, so integrations that cannot recognise the folder
    are not imported to be asked. ``src``: an ``ArchiveSource`` or a load session."""
    return _FolderMembers(src, folder.strip("/") + "/" if folder.strip("/") else "")


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


def saved_as_app_state(src: Any, folder: str) -> bool:
    """Whether the manifest lists ``folder`` as saved from a dict: no handler wrote it, so none
    is asked whether it recognises it (nor are handler entry points listed for that, 2-3 ms of
    a first load). ``src``: an ``ArchiveSource`` or a load session."""
    return folder.strip("/") in src.reader.app_state
