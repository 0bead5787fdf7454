"""Stable-Baselines3 integration: ``CheckpointCallback`` (checkpoints through a
``zipsave.CheckpointManager``) and ``VecEnvState``. SB3 is imported only when one of these
names is first used, never by ``import zipsave``."""

from __future__ import annotations

from typing import Any

__all__ = ["CheckpointCallback", "VecEnvState"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from .._optional import require

        require("stable_baselines3", package="stable-baselines3", extra="sb3", feature=f"`zipsave.sb3.{name}`")
    if name == "CheckpointCallback":
        from ._callback import CheckpointCallback

        return CheckpointCallback
    if name == "VecEnvState":
        from ._env_state import VecEnvState

        return VecEnvState
    raise AttributeError(f"module 'zipsave.sb3' has no attribute {name!r}")
