"""``VecEnvState``: :class:`zipsave.EnvState` as the SB3 integration has named it since 0.1,
with the state as numpy values, for a model attribute or an app-state value."""

from __future__ import annotations

from typing import Any

from .._api import EnvState

__all__ = ["VecEnvState"]


class VecEnvState(EnvState):
    """The state of a ``DummyVecEnv`` and its wrappers, for ``CheckpointCallback(env_state=True)``
    or an app-state value: :class:`zipsave.EnvState` whose :meth:`state_dict` keeps numpy arrays
    (the ``data`` codec stores them as ``.npy`` members). In an app state, put
    ``zipsave.EnvState(venv)`` itself instead.

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
