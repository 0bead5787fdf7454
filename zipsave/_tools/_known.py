"""What the registered integrations know of a folder's ``data`` values without decoding them
(SB3's and the RL Zoo's schedule closures): rebuilt for ``read``, said in words for ``inspect``
and ``diff``; the same handlers a load of the folder would ask."""

from __future__ import annotations

from typing import Any

from .. import _tools  # the registry, on first use
from .._archive import ArchiveSource, data_bytes, member_names, saved_as_app_state

__all__ = ["described_values", "involve_handlers", "known_values"]


def involve_handlers(src: Any, folder: str) -> None:
    """Import the integrations a load of ``folder`` would ask about it, so a tool judging its values
    uses their reviewed allowlists as that load would (none for a folder saved from a dict)."""
    if folder not in src.involved and not saved_as_app_state(src, folder):
        _tools.handlers(members=member_names(src, folder), data=lambda: data_bytes(src, folder))
        src.involved.add(folder)


class _SessionView:
    """What a handler's ``recognises``, ``known_values`` and ``describe_values`` read of a load
    session."""

    def __init__(self, src: ArchiveSource, policy: Any) -> None:
        self.source, self.reader, self.policy = src, src.reader, policy

    def has(self, member: str) -> bool:
        return member in self.reader

    def read_json(self, member: str) -> Any:
        return self.source.read_json(member)


def _recognising(src: ArchiveSource, policy: Any, folder: str) -> tuple[Any, _SessionView] | None:
    """The first registered handler that recognises ``folder`` (as a load asks), with its view."""
    if saved_as_app_state(src, folder):
        return None
    view = _SessionView(src, policy)
    for handler in _tools.handlers(members=member_names(src, folder), data=lambda: data_bytes(src, folder)):
        if handler.recognises(view, folder):
            return handler, view
    return None


def known_values(src: ArchiveSource, policy: Any, folder: str) -> dict[str, Any]:
    """The ``data`` values a registered handler that recognises ``folder`` rebuilds without
    decoding them (SB3's and the RL Zoo's schedule closures), as :func:`zipsave.load_archive`
    and every load have them: a key those read is a key ``read`` reads."""
    found = _recognising(src, policy, folder)
    return found[0].known_values(found[1], None, folder) if found else {}


def described_values(src: ArchiveSource, folder: str) -> dict[str, str]:
    """Those values in words (``{"lr_schedule": "constant 0.0003"}``), found without unpickling,
    importing the integration's library or torch; ``{}`` where no handler knows any."""
    try:
        found = _recognising(src, None, folder)
        return found[0].describe_values(found[1], folder) if found else {}
    except Exception:  # noqa: BLE001 - only a description: the entry is then listed as stored
        return {}
