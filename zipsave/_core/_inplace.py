"""Restoring plain values into the live ones in place (an app state's values, an object's
attributes, their random generators and tensors), so a training loop's variables
(``rb = ReplayBuffer(); app_state = {"rb": rb}``) see what ``restore`` loaded."""

from __future__ import annotations

import collections
import dataclasses
import enum
import random
from typing import Any

import numpy as np
import torch

from ._parts import PLAIN_VALUES

__all__ = ["adopt_live", "fill_in_place"]


def fill_in_place(live: Any, saved: Any, depth: int = 0) -> Any:
    """``live`` holding ``saved``'s value where it can hold it in place (an array or tensor of
    the same shape and dtype, a list, dict or deque, an object of the same plain class), else
    ``saved``. Numbers and strings cannot change in place: the caller stores ``saved``."""
    memmap = type(live) is np.memmap and type(saved) is np.ndarray  # saved as the array it views
    if live is saved or live is None or (type(live) is not type(saved) and not memmap) or depth > 20:
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


def adopt_live(live: Any, saved: Any, depth: int = 0) -> Any:
    """``saved``, with each random generator and tensor in it replaced by the live one at the
    same place in ``live`` (a dict key, a list index), that one set to the saved state: so a
    DataLoader holding ``self.rngs["torch"]`` draws from the restored state, and an optimizer
    over ``self.params["w"]`` goes on training the tensor the model uses."""
    if type(saved) in PLAIN_VALUES or live is None or depth > 20:
        return saved
    if _restore_rng(live, saved) or _copy_tensor_into(live, saved):
        return live
    if type(live) is not type(saved):
        return saved
    if isinstance(saved, dict):
        for k, v in saved.items():
            if k in live:
                saved[k] = adopt_live(live[k], v, depth + 1)
    elif isinstance(saved, list):
        saved[: len(live)] = [
            b if type(b) in PLAIN_VALUES else adopt_live(a, b, depth + 1) for a, b in zip(live, saved)
        ]
    elif isinstance(saved, tuple) and len(saved) == len(live):
        items = [b if type(b) in PLAIN_VALUES else adopt_live(a, b, depth + 1) for a, b in zip(live, saved)]
        if any(a is not b for a, b in zip(items, saved)):
            return type(saved)(*items) if hasattr(type(saved), "_fields") else type(saved)(items)
    return saved


def _copy_tensor_into(live: Any, saved: Any) -> bool:
    """Copy a loaded tensor into the live one of the same shape and dtype, where the live one is
    a leaf that requires grad (what an optimizer holds); other tensors are replaced, as values."""
    if not (isinstance(live, torch.Tensor) and isinstance(saved, torch.Tensor)) or live is saved:
        return False
    if not (live.requires_grad and live.is_leaf):
        return False
    if live.shape != saved.shape or live.dtype != saved.dtype or live.layout != torch.strided:
        return False
    if saved.layout != torch.strided or live.is_inference():
        return False
    with torch.no_grad():
        live.copy_(saved)
    return True


def _restore_rng(target: Any, value: Any) -> bool:
    """Put a loaded random generator's state into the live one of the same type, so whatever
    else holds it (a DataLoader, an environment, a buffer) draws from the restored state too."""
    if target is value or type(target) is not type(value):
        return False
    try:
        if isinstance(target, torch.Generator):
            target.set_state(value.get_state())
        elif isinstance(target, random.Random):
            target.setstate(value.getstate())
        elif isinstance(target, np.random.Generator):
            target.bit_generator.state = value.bit_generator.state
        elif isinstance(target, np.random.RandomState):
            target.set_state(value.get_state())
        else:
            return False
    except (RuntimeError, TypeError, ValueError):
        return False  # another device or bit generator: the loaded object replaces it
    return True
