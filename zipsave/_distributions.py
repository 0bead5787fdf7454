"""The installed distributions along ``sys.path``, known by the names of their metadata folders
(``numpy-2.4.6.dist-info``) as ``importlib.metadata`` finds them, without importing it."""

from __future__ import annotations

import os
import sys

__all__ = ["SUFFIXES", "folder_parts", "metadata_folders", "normalized"]

SUFFIXES = (".dist-info", ".egg-info")


def metadata_folders() -> list[tuple[str, list[str]]] | None:
    """``(folder, names)`` for each folder along ``sys.path`` (each spelling once; ``folder`` as
    it is to be opened, ``"."`` for ``""``): the names of its children ending in one of
    :data:`SUFFIXES` in any case, in listing order. ``None`` where distributions may also come
    from elsewhere, so that the caller asks ``importlib.metadata``: a finder that lists its own,
    a path entry that is not a string, a zip on ``sys.path``, an unpacked egg (named by its
    ``PKG-INFO``)."""
    from importlib.machinery import PathFinder

    if any(getattr(f, "find_distributions", None) is not None and f is not PathFinder for f in sys.meta_path):
        return None
    listed: set[str] = set()
    folders: list[tuple[str, list[str]]] = []
    for entry in sys.path:
        if not isinstance(entry, str):  # bytes or other path entries: importlib.metadata's rules
            return None
        try:
            # The same folder again (written the same way, or '' and the working directory)
            # holds no new name; telling other spellings apart (a stat each) costs more than
            # it saves where nothing is listed twice.
            folder = entry or os.getcwd()
            if folder in listed:
                continue
            listed.add(folder)
            children = os.listdir(entry or ".")
        except NotADirectoryError:
            return None  # a zip on sys.path
        except (OSError, ValueError):  # missing, unreadable, a NUL in the path: no distributions
            continue
        if entry.lower().endswith(".egg") and any(child.lower() == "egg-info" for child in children):
            return None
        folders.append((entry or ".", [child for child in children if child.lower().endswith(SUFFIXES)]))
    return folders


def folder_parts(child: str) -> tuple[str, str, str]:
    """``(name, version, suffix)`` of a metadata folder's name as written: ``("My.Pkg", "1.0",
    "dist-info")`` of ``My.Pkg-1.0.dist-info``; the name ends at the first ``-``."""
    stem, _, suffix = child.rpartition(".")
    name, _, version = stem.partition("-")
    return name, version, suffix


def normalized(name: str) -> str:
    """``name`` as ``importlib.metadata`` compares distribution names: lowercase, each run of
    ``-``, ``_`` and ``.`` one ``_``."""
    name = name.lower()
    if "." in name or "-" in name or "__" in name:  # most names are already so: no pattern needed
        import re

        name = re.sub(r"[-_.]+", "_", name)
    return name
