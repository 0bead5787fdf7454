"""Restoring an app state's plain values into the live ones in place, so a training loop's
variables (``rb = ReplayBuffer(); app_state = {"rb": rb}``) see what ``restore`` loaded."""

from __future__ import annotations

import collections
import dataclasses
import enum
from typing import Any

import numpy as np
import torch

__all__ = ["fill_in_place"]


def fill_in_place(live: Any, saved: Any, depth: int = 0) -> Any:
    """``live`` holding ``saved``'s value where it can hold it in place (an array or tensor of
    the same shape and dtype, a list, dict or deque, an object of the same plain class), else
    ``saved``. Numbers and strings cannot change in place: the caller stores ``saved``."""
    if live is saved or live is None or type(live) is not type(saved) or depth > 20:
        return saved
    if isinstance(saved, np.ndarray):
        if live.shape != saved.shape or live.dtype != saved.dtype or not live.flags.writeable:
            return saved
        live[...] = saved
        return live
    if isinstance(saved, torch.Tensor):
        if (live.shape, live.dtype, live.layout, saved.layout) != (
            saved.shape,
            saved.dtype,
            torch.strided,
            torch.strided,
        ) or live.is_inference():
            return saved
        with torch.no_grad():
            live.copy_(saved)
        return live
    if isinstance(saved, dict):
        items = {k: fill_in_place(live.get(k), v, depth + 1) if k in live else v for k, v in saved.items()}
        live.clear()
        live.update(items)
        return live
    if isinstance(saved, list):
        live[:] = [fill_in_place(a, b, depth + 1) for a, b in zip(live, saved)] + saved[len(live) :]
        return live
    if isinstance(saved, collections.deque):
        if live.maxlen != saved.maxlen:
            return saved
        live.clear()
        live.extend(saved)
        return live
    if _plain_object(saved):
        state = vars(live)
        for key, value in vars(saved).items():
            state[key] = fill_in_place(state.get(key), value, depth + 1)
        return live
    return saved


def _plain_object(value: Any) -> bool:
    """An instance of a user's class that keeps its state in ``__dict__`` (a replay buffer, a
    config), not a frozen dataclass and not a builtin or library value with its own rules."""
    cls = type(value)
    if cls.__module__ in ("builtins", "numpy", "torch") or not hasattr(value, "__dict__"):
        return False
    if isinstance(value, enum.Enum):
        return False  # a singleton: filling `Mode.TRAIN` with `Mode.EVAL` would rename it
    if hasattr(cls, "__slots__") or hasattr(cls, "__setstate__"):
        return False
    params = getattr(cls, "__dataclass_params__", None)
    return not (dataclasses.is_dataclass(value) and params is not None and params.frozen)
