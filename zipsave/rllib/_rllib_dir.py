"""RLlib's own checkpoint directories <-> :class:`~zipsave.rllib._tree.Node` trees.

RLlib writes, per component folder, ``metadata.json`` (``rllib_checkpoint.json`` for an
``Algorithm``), ``class_and_ctor_args.pkl`` and ``<STATE_FILE_NAME>.pkl|.msgpack``; a
sub-folder holding a ``class_and_ctor_args.pkl`` is a sub-component. Reading such a directory
unpickles it, as RLlib itself does: convert only directories you trust.
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

import cloudpickle

from ..exceptions import ArchiveFormatError
from ._tree import Node

_CTOR = "class_and_ctor_args.pkl"
_METADATA_NAMES = ("metadata.json", "rllib_checkpoint.json")
#: What RLlib's ``save_to_path`` adds to the metadata it writes.
_CHECKPOINT_VERSION = "2.1"


def read_dir(path: str | os.PathLike) -> Node:
    """Read an RLlib checkpoint directory (``save_to_path``/``algo.save``) into a tree.

    Parameters
    ----------
    path
        The checkpoint directory (a local path).

    Returns
    -------
    Node
    """
    folder = os.fspath(path)
    ctor_file = os.path.join(folder, _CTOR)
    if not os.path.isfile(ctor_file):
        raise FileNotFoundError(f"{folder!r} is not an RLlib checkpoint directory: it has no {_CTOR}.")
    with open(ctor_file, "rb") as f:
        info = pickle.load(f)  # noqa: S301 - the caller's own checkpoint, read as RLlib reads it
    cls = info["class"]
    args, kwargs = info["ctor_args_and_kwargs"]
    metadata: dict = {}
    for name in (getattr(cls, "METADATA_FILE_NAME", "metadata.json"), *_METADATA_NAMES):
        meta_file = os.path.join(folder, name)
        if os.path.isfile(meta_file):
            with open(meta_file, encoding="utf-8") as f:
                metadata = json.load(f)
            break
    state = _read_state(folder, getattr(cls, "STATE_FILE_NAME", "state"))
    children = {}
    for entry in sorted(os.listdir(folder)):
        sub = os.path.join(folder, entry)
        if os.path.isdir(sub) and os.path.isfile(os.path.join(sub, _CTOR)):
            children[entry] = read_dir(sub)
    return Node(cls=cls, args=tuple(args), kwargs=dict(kwargs), metadata=metadata, state=state, children=children)


def _files_of(cls: Any) -> set[str]:
    """The file names RLlib keeps in a component's folder (and reads back by these names)."""
    stem = getattr(cls, "STATE_FILE_NAME", "state")
    names = {
        _CTOR,
        getattr(cls, "METADATA_FILE_NAME", "metadata.json"),
        *_METADATA_NAMES,
        f"{stem}.pkl",
        f"{stem}.msgpack",
    }
    return {name for name in names if isinstance(name, str)}


def check_dir_names(node: Node, where: str = "", archive: Any = None) -> None:
    """Refuse, before anything is written, a component whose name is not one plain folder name,
    or is the name of a file RLlib keeps beside it (a component `metadata.json/` would make
    the folder where the metadata file goes)."""
    taken = _files_of(node.cls)
    for name in node.children:
        path = f"{where}{name}"
        if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise ArchiveFormatError(
                f"holds a component named {name!r}, which is not a folder name; nothing was written.",
                archive=archive,
                key=path,
            )
        if name in taken:
            raise ArchiveFormatError(
                f"holds a component `{path}/` named as a file RLlib keeps in its folder; nothing was written.",
                archive=archive,
                key=path,
                hint="RLlib never names a component so; the archive was edited or made to break readers.",
            )
    for name, child in node.children.items():
        check_dir_names(child, f"{where}{name}/", archive)


def _read_state(folder: str, stem: str) -> dict:
    packed = os.path.join(folder, stem + ".msgpack")
    if os.path.isfile(packed):
        from ray.rllib.utils.checkpoints import try_import_msgpack

        msgpack = try_import_msgpack(error=True)
        with open(packed, "rb") as f:
            return msgpack.load(f, strict_map_key=False)
    pickled = os.path.join(folder, stem + ".pkl")
    if os.path.isfile(pickled):
        with open(pickled, "rb") as f:
            return pickle.load(f)  # noqa: S301 - as above
    return {}


def write_dir(node: Node, path: str | os.PathLike) -> str:
    """Write a tree as RLlib's ``save_to_path`` would, so ``from_checkpoint(path)`` reads it.

    Parameters
    ----------
    node
        The tree (from an archive or a live algorithm).
    path
        The directory to create (made if missing; files in it are overwritten).

    Returns
    -------
    str
        ``path``.
    """
    check_dir_names(node)
    folder = os.fspath(path)
    os.makedirs(folder, exist_ok=True)
    cls = node.cls
    metadata = dict(node.metadata)
    metadata.setdefault("checkpoint_version", _CHECKPOINT_VERSION)
    with open(os.path.join(folder, getattr(cls, "METADATA_FILE_NAME", "metadata.json")), "w", encoding="utf-8") as f:
        json.dump(metadata, f)
    with open(os.path.join(folder, _CTOR), "wb") as f:
        cloudpickle.dump({"class": cls, "ctor_args_and_kwargs": (tuple(node.args), dict(node.kwargs))}, f)
    for name, child in node.children.items():
        write_dir(child, os.path.join(folder, name))
    with open(os.path.join(folder, getattr(cls, "STATE_FILE_NAME", "state") + ".pkl"), "wb") as f:
        cloudpickle.dump(node.state, f)
    return folder
