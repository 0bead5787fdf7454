"""``VecEnvState``: :class:`zipsave.EnvState` as the SB3 integration has named it since 0.1,
with the state as numpy values, for a ``data`` value (``CheckpointCallback(env_state=True)``)."""

from __future__ import annotations

from typing import Any

from .._api import EnvState

__all__ = ["VecEnvState"]


class VecEnvState(EnvState):
    """The state of a ``DummyVecEnv`` and its wrappers, for ``CheckpointCallback(env_state=True)``:
    :class:`zipsave.EnvState` whose :meth:`state_dict` keeps numpy arrays (the ``data`` codec
    stores them as ``.npy`` members). It cannot be an app-state value itself (a stateful object's
    state goes to a ``.pth`` member, which holds no numpy arrays; the save refuses it): put
    ``zipsave.EnvState(venv)`` there.

    Parameters
    ----------
    venv
        The vectorized environment (``model.get_env()``).
    """

    def __init__(self, venv: Any) -> None:
        super().__init__(venv)
        self.venv = venv

    def state_dict(self) -> dict[str, Any]:
        return self._capture()
