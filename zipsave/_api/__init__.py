"""The verbs users call: save, load, restore, save_archive, load_archive, background saves,
the ``Saveable`` mixin, ``RNGState`` and ``EnvState``; each a thin front of the core."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._background import SaveHandle, start_background_save, wait_for_pending
    from ._env_state import EnvState
    from ._load import load, load_archive, restore, set_parameters_from_archive
    from ._rng import RNGState
    from ._save import save, save_archive
    from ._saveable import Saveable
    from ._shadow import release_snapshots

# Each name's module, imported on first use (PEP 562): a load needs ``_load``, not the
# background saver, its snapshots or the save path; a plain save needs ``_save``, not the
# background saver.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("SaveHandle", "start_background_save", "wait_for_pending"), "._background"),
    "EnvState": "._env_state",
    "load": "._load",
    "load_archive": "._load",
    "restore": "._load",
    "set_parameters_from_archive": "._load",
    "RNGState": "._rng",
    "save": "._save",
    "save_archive": "._save",
    "release_snapshots": "._shadow",
    "Saveable": "._saveable",
}


# Its modules, found as attributes as when this file imported them all (``zipsave._api._env_state``).
_SUBMODULES = frozenset({"_background", "_env_state", "_load", "_rng", "_save", "_saveable", "_shadow"})


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)


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
    "start_background_save",
    "wait_for_pending",
]
