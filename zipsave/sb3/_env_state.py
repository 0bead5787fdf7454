"""``VecEnvState``: the Python-level state of an SB3 ``DummyVecEnv`` and the wrappers around
and inside it (physics variables, step counters, random generators, ``VecNormalize``'s running
return), as a stateful object, so a resumed run steps the environments exactly as the run
that was saved."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from .._api import RNGState
from ..exceptions import ParameterMismatchError

__all__ = ["VecEnvState"]

_GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)


def _plain(value: Any, depth: int = 0) -> bool:
    """A value made of numbers, strings, arrays and containers of them, and nothing else."""
    if depth > 8:
        return False
    if value is None or isinstance(value, (bool, int, float, str, np.generic, np.ndarray)):
        return not isinstance(value, np.ndarray) or value.dtype != object
    if type(value) in (list, tuple):
        return all(_plain(v, depth + 1) for v in value)
    if type(value) is dict or type(value).__name__ == "OrderedDict":
        return all(isinstance(k, (str, int)) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _copy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if type(value) in (list, tuple):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _copy(v)) for k, v in value.items())
    return value


def _statistics(value: Any) -> bool:
    """An object that only holds plain values, such as the ``RunningMeanStd`` of gymnasium's
    ``NormalizeObservation`` and ``NormalizeReward`` (``obs_rms``, ``return_rms``)."""
    if isinstance(value, type) or type(value).__module__ == "builtins" or not hasattr(value, "__dict__"):
        return False
    attrs = vars(value)
    return bool(attrs) and all(_plain(v) for v in attrs.values())


def _layers(venv: Any) -> list[tuple[str, Any]]:
    """Every object that holds environment state, by a stable name: the VecEnv wrappers down
    to the DummyVecEnv, then each sub-environment's wrappers down to the unwrapped env."""
    out = []
    depth = 0
    while hasattr(venv, "venv"):
        out.append((f"vec{depth}", venv))
        venv, depth = venv.venv, depth + 1
    envs = getattr(venv, "envs", None)
    if envs is None:
        raise ParameterMismatchError(
            f"VecEnvState needs a DummyVecEnv (its environments in this process); found {type(venv).__name__}.",
            hint="Environments in subprocesses (SubprocVecEnv) keep their state out of reach; resume them with a reset.",
        )
    out.append((f"vec{depth}", venv))
    for i, env in enumerate(envs):
        layer = 0
        while True:
            out.append((f"env{i}.{layer}", env))
            inner = getattr(env, "env", None)
            if inner is None or inner is env:
                break
            env, layer = inner, layer + 1
    return out


class VecEnvState:
    """The state of a ``DummyVecEnv`` and its wrappers, for an app state or
    ``CheckpointCallback(env_state=True)``.

    :meth:`state_dict` takes, from every layer (VecEnv wrappers, the ``DummyVecEnv``, each
    gymnasium wrapper and unwrapped environment), the attributes made only of numbers,
    strings and numpy arrays, those of the objects made only of them (the running statistics
    ``obs_rms`` and ``return_rms`` of gymnasium's ``NormalizeObservation`` and
    ``NormalizeReward``), and the state of its random generators. That is the whole
    state of environments written in Python (classic control, most custom environments);
    a simulator that keeps its state in native memory (MuJoCo, Box2D, Atari) is not
    captured beyond its Python attributes.

    Parameters
    ----------
    venv
        The vectorized environment (``model.get_env()``).
    """

    def __init__(self, venv: Any) -> None:
        self.venv = venv

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for name, layer in _layers(self.venv):
            attrs = {k: _copy(v) for k, v in vars(layer).items() if _plain(v)}
            generators = {k: v for k, v in vars(layer).items() if isinstance(v, _GENERATORS)}
            rng = RNGState(torch=False, cuda=False, numpy=False, python=False, generators=generators)
            state[name] = {"class": type(layer).__qualname__, "attrs": attrs, "generators": rng.state_dict()}
            objects = {k: _copy(vars(v)) for k, v in vars(layer).items() if _statistics(v)}
            if objects:
                state[name]["objects"] = objects
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        layers = _layers(self.venv)
        found = {name: type(layer).__qualname__ for name, layer in layers}
        saved = {name: entry.get("class") for name, entry in state.items()}
        if found != saved:
            raise ParameterMismatchError(
                f"the saved environment state has layers {sorted(saved.items())}, but this environment has "
                f"{sorted(found.items())}.",
                hint="Build the environment as the saved run did (same wrappers, same number of envs).",
            )
        for name, layer in layers:
            entry = state[name]
            for key, value in entry["attrs"].items():
                setattr(layer, key, _copy(value))
            for key, saved_attrs in entry.get("objects", {}).items():
                live = getattr(layer, key, None)
                if not _statistics(live):
                    raise ParameterMismatchError(
                        f"the saved environment state has the statistics `{name}.{key}`, but this environment's "
                        f"{type(layer).__qualname__} holds {type(live).__name__} there.",
                        key=key,
                        hint="Build the environment as the saved run did (same wrappers, same arguments).",
                    )
                vars(live).update(_copy(saved_attrs))
            generators: dict[str, Any] = {k: v for k, v in vars(layer).items() if isinstance(v, _GENERATORS)}
            saved_generators = entry["generators"].get("generators") or {}
            for key in set(saved_generators) - set(generators):
                if saved_generators[key].get("kind") == "numpy":  # e.g. an env never reset before
                    generators[key] = np.random.default_rng()
                    setattr(layer, key, generators[key])
            generators = {k: v for k, v in generators.items() if k in saved_generators}
            RNGState(torch=False, cuda=False, numpy=False, python=False, generators=generators).load_state_dict(
                {"generators": saved_generators}
            )
