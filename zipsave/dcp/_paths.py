"""Confining the file names a checkpoint's metadata lists to its directory: a name read from
``.metadata`` or the index is attacker-chosen (``/etc/passwd``, ``../x``, ``/dev/zero``)."""

from __future__ import annotations

import os
import stat
from typing import Any

from ..exceptions import ArchiveFormatError

__all__ = ["confined"]


def confined(root: str, name: Any, *, archive: Any, member: str, must_exist: bool = True) -> str:
    """The real path of the file ``name`` inside the checkpoint directory ``root``.

    ``name`` must be a relative path without ``..`` whose real path (symlinks followed) lies
    inside ``root`` and is a regular file: never an absolute path, a path out of the directory,
    a symlink leading out of it, or a device or pipe (``/dev/zero``, ``/dev/stdin``).

    Raises
    ------
    ArchiveFormatError
        Naming ``name`` and why it was refused.
    FileNotFoundError
        When ``must_exist`` and no such file exists (the caller reports a missing shard).
    """

    def refuse(why: str) -> ArchiveFormatError:
        return ArchiveFormatError(
            f"names the file {name!r}, which {why}; a checkpoint only reads regular files inside its directory.",
            archive=archive,
            member=member,
            key=str(name)[:200],
            hint="The metadata was not written by DCP or zipsave as it is; load an intact checkpoint.",
        )

    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name or "\0" in name:
        raise refuse("is not a file name")
    parts = name.replace("\\", "/").split("/")
    if os.path.isabs(name) or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise refuse("is an absolute path")
    if ".." in parts:
        raise refuse("leads out of the checkpoint directory (`..`)")
    base = os.path.realpath(root)
    real = os.path.realpath(os.path.join(base, name))
    if os.path.commonpath([base, real]) != base or real == base:
        raise refuse("resolves (through a symbolic link) to a place outside the checkpoint directory")
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        if must_exist:
            raise
        return real
    except OSError as err:
        raise refuse(f"cannot be examined ({err.strerror})") from err
    if not stat.S_ISREG(mode):
        raise refuse("is not a regular file (a device, pipe, socket or folder)")
    return real
