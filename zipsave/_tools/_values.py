"""When two decoded values are the same for ``zipsave diff``: equal in type and value all the
way down, random generators by their state (a gymnasium space compares its bounds only)."""

from __future__ import annotations

import hashlib
import random
import types
from typing import Any

import numpy as np
import torch

from .._invariants import flat_bytes

__all__ = ["rng_change", "same_value"]


def _rng_state(value: Any) -> Any:
    """The state of a random generator (they compare by identity, or not at all), else ``None``."""
    if isinstance(value, torch.Generator):
        return value.get_state()
    if isinstance(value, random.Random):
        return value.getstate()
    if isinstance(value, np.random.Generator):
        return value.bit_generator.state
    if isinstance(value, np.random.RandomState):
        return value.get_state(legacy=False)
    return None


def _rng_states(value: Any, depth: int = 0) -> list[Any]:
    """The states of the random generators inside ``value`` (a space's ``np_random``, those of a
    ``Dict`` space's members...), in order."""
    state = _rng_state(value)
    if state is not None or depth > 20:
        return [] if state is None else [state]
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    elif isinstance(getattr(value, "__dict__", None), dict) and not isinstance(value, (type, torch.Tensor, np.ndarray)):
        items = vars(value).values()
    else:
        return []
    return [found for item in items for found in _rng_states(item, depth + 1)]


def rng_change(a: Any, b: Any) -> tuple[str, str] | None:
    """``("RNG state <digest>", "RNG state <digest>")`` when two values equal by ``==`` (gymnasium
    spaces compare their bounds only) hold random generators in different states, else ``None``."""
    states = _rng_states(a), _rng_states(b)
    if same_value(*states):
        return None
    digests = (hashlib.sha256(repr(s).encode()).hexdigest()[:12] if s else "none" for s in states)
    return tuple(f"RNG state {d}" for d in digests)  # type: ignore[return-value]


def same_value(a: Any, b: Any, depth: int = 0) -> bool:
    """Equal in type and value, all the way down (classes and functions by identity)."""
    if depth > 50 or type(a) is not type(b):
        return False
    if isinstance(a, (type, types.FunctionType, types.BuiltinFunctionType)) or a is None:
        return a is b
    if isinstance(a, float):  # NaN equal to NaN, as in arrays
        return _same_float(a, b)
    if isinstance(a, complex):
        return _same_float(a.real, b.real) and _same_float(a.imag, b.imag)
    if isinstance(a, (torch.Tensor, np.ndarray)):
        return a.dtype == b.dtype and a.shape == b.shape and _same_array(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y, depth + 1) for x, y in zip(a, b))
    state = _rng_state(a)
    if state is not None:
        return same_value(state, _rng_state(b), depth + 1)
    try:
        equal = a == b
        if isinstance(equal, np.bool_):  # e.g. gymnasium 0.29's spaces compare numpy integers
            equal = bool(equal)
        if isinstance(equal, bool) and (equal or type(a).__eq__ is not object.__eq__):
            return equal
    except Exception:  # noqa: BLE001 - a type whose == fails is compared by its state
        pass
    state_a, state_b = getattr(a, "__dict__", None), getattr(b, "__dict__", None)
    return isinstance(state_a, dict) and isinstance(state_b, dict) and same_value(state_a, state_b, depth + 1)


def _same_float(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def _same_array(a: Any, b: Any) -> bool:
    """Two tensors or arrays of one dtype and shape hold the same values (NaN equal to NaN);
    byte for byte where torch has no comparison for the dtype (``bits8``, ``complex32``) or an
    object array's items refuse ``==`` (a signalling NaN decimal)."""
    try:
        if isinstance(a, torch.Tensor):
            return bool(torch.equal(a, b))
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    except Exception:  # noqa: BLE001 - any failure to compare is settled by the bytes, or "differ"
        if isinstance(a, torch.Tensor):
            return bool(torch.equal(flat_bytes(a.detach().contiguous()), flat_bytes(b.detach().contiguous())))
        return not a.dtype.hasobject and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
