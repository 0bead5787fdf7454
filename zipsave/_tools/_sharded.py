"""``zipsave verify`` and ``zipsave inspect`` for a sharded checkpoint directory (the layout
:mod:`zipsave.dcp` writes), with no torch.distributed: a tool, so the CLI needs no integration."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from .._archive import ArchiveReader, open_input
from .._format import DCP_INDEX as INDEX
from .._format import DCP_METADATA as METADATA
from .._json import loads as json_loads
from .._printable import visible
from ..exceptions import ZipsaveError, reading
from ._verify import verify as verify_archive

__all__ = ["describe_sharded", "is_checkpoint_dir", "render_sharded", "verify_sharded"]


def is_checkpoint_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory holding a committed sharded checkpoint."""
    return os.path.isfile(os.path.join(os.fspath(path), INDEX))


def _index(path: str) -> dict:
    index = os.path.join(path, INDEX)
    with open_input(index) as fp:
        raw = ArchiveReader(fp, archive=index).read(METADATA)
    doc = json_loads(raw, max_depth=64)
    if not isinstance(doc, dict) or not isinstance(doc.get("ranks"), list):
        raise ZipsaveError("is not a zipsave DCP index.", archive=index, member=METADATA)
    return doc


def verify_sharded(path: str | os.PathLike) -> list[str]:
    """Check a sharded checkpoint: the index and every rank archive, every byte.

    Parameters
    ----------
    path
        A checkpoint directory written by :class:`~zipsave.dcp.ZipWriter`.

    Returns
    -------
    list of str
        One sentence per problem (naming the rank and member); empty when intact. Each rank
        archive is checked as ``zipsave verify`` checks one archive, and against the size and
        manifest hash the index recorded; every member the index names must exist.
    """
    path = os.fspath(path)
    with reading(os.path.join(path, INDEX)):  # the index's values are untrusted input
        return _verify_sharded(path)


def _verify_sharded(path: str) -> list[str]:
    problems = [f"{INDEX}: {p}" for p in verify_archive(os.path.join(path, INDEX))]
    if problems:
        return problems
    doc = _index(path)
    members: dict[Any, set[Any]] = {}
    for item in doc.get("storage_data") or []:
        if isinstance(item, dict):
            members.setdefault(item.get("rank"), set()).add(item.get("member"))
    for entry in doc["ranks"]:
        rank, file = entry.get("rank"), str(entry.get("file"))
        full = os.path.join(path, file)
        if not os.path.isfile(full):
            problems.append(f"rank {rank}: archive `{file}` is missing.")
            continue
        found = verify_archive(full)
        problems += [f"rank {rank} (`{file}`): {p}" for p in found]
        if found:
            continue
        with open(full, "rb") as fp:
            reader = ArchiveReader(fp, archive=full)
            manifest = reader.read("manifest.json", verify=False)
            names = set(reader.names())
        if hashlib.sha256(manifest).hexdigest() != entry.get("manifest_sha256"):
            problems.append(f"rank {rank} (`{file}`): manifest.json differs from the one {INDEX} recorded.")
        for member in sorted(members.get(rank, set()) - names):
            problems.append(f"rank {rank} (`{file}`): member `{member}` is missing.")
    return problems


def describe_sharded(path: str | os.PathLike) -> dict[str, Any]:
    """A summary of a sharded checkpoint for ``zipsave inspect``: ranks, files and keys."""
    path = os.fspath(path)
    with reading(os.path.join(path, INDEX)):
        return _describe_sharded(path)


def _describe_sharded(path: str) -> dict[str, Any]:
    doc = _index(path)
    keys = {}
    for fqn, entry in (doc.get("state_dict_metadata") or {}).items():
        if isinstance(entry, dict) and entry.get("type") == "tensor":
            keys[fqn] = {
                "dtype": entry.get("dtype"),
                "shape": entry.get("size"),
                "chunks": len(entry.get("chunks") or []),
            }
        else:
            keys[fqn] = {"type": "value"}
    return {
        "checkpoint": path,
        "format": doc.get("format"),
        "format_version": doc.get("format_version"),
        "ranks": doc["ranks"],
        "keys": keys,
    }


def render_sharded(info: dict[str, Any]) -> str:
    """``describe_sharded``'s summary as text."""
    v = visible
    lines = [f"{v(info['checkpoint'])}: zipsave DCP checkpoint, {len(info['ranks'])} rank archive(s)"]
    for r in info["ranks"]:
        lines.append(f"  rank {v(r['rank'])}: {v(r['file'])} ({v(r['size'])} bytes)")
    lines.append(f"  {len(info['keys'])} keys:")
    for fqn, k in info["keys"].items():
        if "dtype" in k:
            lines.append(f"    {v(fqn)}: {v(k['dtype'])} {v(k['shape'])} in {v(k['chunks'])} chunk(s)")
        else:
            lines.append(f"    {v(fqn)}: value")
    return "\n".join(lines)
