"""Conversions between zipsave archives and RLlib's own checkpoint directories."""

from __future__ import annotations

import os
from typing import Any

from .._api import load, save
from ..exceptions import describe_path, reading
from ._rllib_dir import check_dir_names, read_dir, write_dir
from ._tree import Node

__all__ = ["from_rllib", "to_rllib"]


def from_rllib(directory: str | os.PathLike, archive: Any, **save_options: Any) -> None:
    """Convert an RLlib checkpoint directory into one zipsave archive.

    Parameters
    ----------
    directory
        What ``algo.save_to_path()`` (or ``algo.save()``, or any ``Checkpointable``'s
        ``save_to_path``) wrote. It is read as RLlib reads it, unpickling its files: convert
        only directories you trust.
    archive
        Where to write the archive: a path, URL or binary file object, as for
        :func:`zipsave.save`.
    **save_options
        Passed on to :func:`zipsave.save`.

    Examples
    --------
    >>> from_rllib("checkpoints/ppo", "ppo.zip")  # doctest: +SKIP
    """
    save(read_dir(directory), archive, **save_options)


def to_rllib(archive: Any, directory: str | os.PathLike, **load_options: Any) -> str:
    """Write an RLlib checkpoint directory from a zipsave archive.

    ``Algorithm.from_checkpoint(directory)`` (or the component class's ``from_checkpoint``)
    then reads it. The archive is decoded under zipsave's usual trust rules first.

    Parameters
    ----------
    archive
        A zipsave archive of an RLlib object (path, URL or binary file object).
    directory
        The directory to write (created if missing).
    **load_options
        Passed on to :func:`zipsave.load` (``trusted=``, ``allow_pickle=``, ``component=``...).

    Returns
    -------
    str
        ``directory``.

    Examples
    --------
    >>> to_rllib("ppo.zip", "checkpoints/ppo")  # doctest: +SKIP
    """
    node = load(archive, cls=Node, **load_options)
    check_dir_names(node, archive=describe_path(archive))
    with reading(archive, doing="written as an RLlib directory"):
        return write_dir(node, directory)
