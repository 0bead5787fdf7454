"""Which algorithm an SB3 archive holds, read from its ``data`` without decoding anything: for
the error that asks the caller to name the class (``load(path, cls=SAC)``)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from .._codec import NATIVE_KEY, SERIALIZED_KEY
from .._trust import pickle_globals
from ..exceptions import ZipsaveError

__all__ = ["algorithm_of_policy", "import_line", "suggest_algorithm"]

# The module of a policy class -> the algorithm(s) using it.
_BY_POLICY_MODULE = {
    "stable_baselines3.ppo.policies": "PPO",
    "stable_baselines3.a2c.policies": "A2C",
    "stable_baselines3.dqn.policies": "DQN",
    "stable_baselines3.sac.policies": "SAC",
    "stable_baselines3.td3.policies": "TD3",  # or DDPG (below)
    "sb3_contrib.qrdqn.policies": "QRDQN",
    "sb3_contrib.tqc.policies": "TQC",
    "sb3_contrib.ars.policies": "ARS",
    "sb3_contrib.crossq.policies": "CrossQ",
    "sb3_contrib.ppo_mask.policies": "MaskablePPO",
    "sb3_contrib.common.maskable.policies": "MaskablePPO",
    "sb3_contrib.ppo_recurrent.policies": "RecurrentPPO",
    "sb3_contrib.common.recurrent.policies": "RecurrentPPO",
}
_CONTRIB = {"QRDQN", "TQC", "ARS", "CrossQ", "MaskablePPO", "RecurrentPPO", "TRPO"}


def _policy_module(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return None
    native = entry.get(NATIVE_KEY)
    if isinstance(native, dict) and isinstance(native.get("path"), str):
        return native["path"].partition(":")[0]
    if isinstance(entry.get("__module__"), str):
        return entry["__module__"]
    try:
        names = pickle_globals(base64.b64decode(str(entry.get(SERIALIZED_KEY, "")), validate=True))
    except (binascii.Error, ValueError, ZipsaveError):
        return None
    return names[-1].rpartition(".")[0] if names else None


def suggest_algorithm(data: Any) -> str | None:
    """``"SAC"``, ``"TD3 or DDPG"``, ... for a raw ``data`` object; ``None`` when unsure."""
    if not isinstance(data, dict):
        return None
    module = _policy_module(data.get("policy_class"))
    if module is None:
        return None
    name = _BY_POLICY_MODULE.get(module)
    if name == "TD3" and data.get("policy_delay") == 1:
        name = "DDPG"
    if name is None and module == "stable_baselines3.common.policies":  # ActorCriticPolicy
        name = "PPO" if "clip_range" in data else "TRPO" if "cg_max_steps" in data else "A2C"
    return name


def algorithm_of_policy(policy: type) -> str | None:
    """The algorithm whose own policy module defines ``policy`` (``SACPolicy``: ``"SAC"``), if any."""
    return _BY_POLICY_MODULE.get(getattr(policy, "__module__", ""))


def import_line(name: str) -> str:
    package = "sb3_contrib" if name in _CONTRIB else "stable_baselines3"
    return f"from {package} import {name}"
