"""The verbs users call: save, load, restore, save_archive, load_archive, background saves,
the ``Saveable`` mixin, ``RNGState`` and ``EnvState``; each a thin front of the core."""

from ._background import SaveHandle, wait_for_pending
from ._env_state import EnvState
from ._load import load, load_archive, restore, set_parameters_from_archive
from ._rng import RNGState
from ._save import save, save_archive
from ._shadow import release_snapshots
from ._saveable import Saveable

__all__ = [
    "EnvState",
    "RNGState",
    "SaveHandle",
    "Saveable",
    "load",
    "load_archive",
    "release_snapshots",
    "restore",
    "save",
    "save_archive",
    "set_parameters_from_archive",
    "wait_for_pending",
]
