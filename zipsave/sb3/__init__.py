"""Stable-Baselines3 support, as a plug-in of the core: SB3 algorithms save with
``zipsave.save(model, path)`` and load with ``zipsave.load(path, cls=PPO, env=env)``; the replay
buffer and ``VecNormalize`` statistics can live in the same archive.

SB3 itself is imported only when an SB3 object is saved or built, never by ``import zipsave``.
The handler is registered through the ``zipsave.handlers`` entry point (``setup.cfg``).
"""

from ._allowlist import SB3_ALLOWLIST
from ._extras import EXTRAS
from ._handler import SB3Handler

__all__ = ["EXTRAS", "SB3_ALLOWLIST", "SB3Handler", "handler"]

#: The instance the ``zipsave.handlers`` entry point names.
handler = SB3Handler()
