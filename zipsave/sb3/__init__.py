"""Stable-Baselines3 support, as a plug-in of the core: SB3 algorithms save with
``zipsave.save(model, path)`` and load with ``zipsave.load(path, cls=PPO, env=env)``; the replay
buffer and ``VecNormalize`` statistics can live in the same archive. :func:`install` adopts
zipsave for SB3's own ``save``/``load`` calls in one line.

SB3 itself is imported only when an SB3 object is saved or built, or by :func:`install`, never
by ``import zipsave``. The handler is registered through the ``zipsave.handlers`` entry point
(``setup.cfg``). ``CheckpointCallback`` (checkpoints through a ``zipsave.CheckpointManager``) and
``VecEnvState`` import SB3 when they are first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_attributes
from .._optional import require
from ._allowlist import SB3_ALLOWLIST
from ._allowlist_contrib import SB3_CONTRIB_ALLOWLIST
from ._handler import SB3Handler

if TYPE_CHECKING:  # what __getattr__ below imports on first use, spelled out for type checkers
    from . import _build as _build  # the modules the handler uses when it saves or builds a model
    from . import _checks as _checks
    from . import _extras as _extras
    from ._callback import CheckpointCallback
    from ._env_state import VecEnvState
    from ._extras import EXTRAS
    from ._install import install, installed, is_installed, uninstall

__all__ = [
    "EXTRAS",
    "SB3_ALLOWLIST",
    "SB3_CONTRIB_ALLOWLIST",
    "CheckpointCallback",
    "SB3Handler",
    "VecEnvState",
    "handler",
    "install",
    "installed",
    "is_installed",
    "uninstall",
]
_LAZY = ("CheckpointCallback", "VecEnvState")

#: The instance the ``zipsave.handlers`` entry point names.
handler = SB3Handler()

# Imported on first use (PEP 562): the registry imports this package for the handler's
# allowlist alone when it inspects an SB3 archive, and that imports no torch. The handler's
# methods find the modules that save, build and restore models here (`_build`, `_extras`...).
_names, __dir__ = lazy_attributes(
    __name__,
    {"EXTRAS": "._extras", **dict.fromkeys(("install", "installed", "is_installed", "uninstall"), "._install")},
    frozenset({"_build", "_checks", "_extras"}),
)


def __getattr__(name: str) -> Any:
    # CheckpointCallback subclasses SB3's BaseCallback, so its module imports SB3: load it on
    # first use only, never with `import zipsave.sb3` (which the handler registry does).
    if name not in _LAZY:
        return _names(name)
    require("stable_baselines3", package="stable-baselines3", extra="sb3", feature=f"`zipsave.sb3.{name}`")
    module = importlib.import_module("._callback" if name == "CheckpointCallback" else "._env_state", __name__)
    return getattr(module, name)
