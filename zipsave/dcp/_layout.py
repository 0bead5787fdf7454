"""Names in a sharded checkpoint directory: the index archive, the rank archives and their members."""

from __future__ import annotations

import os
import re

from .._format import DCP_INDEX as INDEX
from .._format import DCP_METADATA as METADATA
from .._tools import is_checkpoint_dir

__all__ = ["INDEX", "METADATA", "bytes_member", "is_checkpoint_dir", "rank_file", "stale_files", "tensor_member"]

_RANK_FILE = re.compile(r"rank-(\d{5,})-([0-9a-f]{8,32})\.zip")
_RANK_TMP = re.compile(r"\.rank-(\d{5,})-([0-9a-f]{8,32})\.zip\..*\.zipsave-tmp")
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-:]{0,199}")


def rank_file(rank: int, generation: str) -> str:
    """The file name of ``rank``'s archive written by the save ``generation``."""
    return f"rank-{rank:05d}-{generation}.zip"


def _name(fqn: str, serial: int) -> str:
    # A key that would make an odd member name (slashes, `..`, control characters) is
    # stored under its position instead; the metadata maps keys to members either way.
    return fqn if _SAFE.fullmatch(fqn) else f"item-{serial}"


def tensor_member(fqn: str, offsets: tuple[int, ...] | list[int], serial: int) -> str:
    """Member of one tensor chunk: ``shards/<key>@<offsets>``."""
    return f"shards/{_name(fqn, serial)}@{','.join(map(str, offsets))}"


def bytes_member(fqn: str, serial: int) -> str:
    """Member of one non-tensor value (``torch.save`` bytes made by DCP's planner)."""
    return f"objects/{_name(fqn, serial)}"


def stale_files(folder: str, keep: set[str]) -> list[str]:
    """Rank archives (and temporary files of killed saves) in ``folder`` that ``keep`` does not name."""
    out = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name in keep:
                continue
            if _RANK_FILE.fullmatch(entry.name) or _RANK_TMP.fullmatch(entry.name):
                out.append(entry.name)
    return sorted(out)
