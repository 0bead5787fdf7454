"""What a gymnasium space decoded from an archive may hold: plain numpy arrays, dtypes, numbers,
strings and child spaces -- never an object that numpy or SB3 would read protocol attributes
from (a ``low`` carrying ``__array_interface__`` crashes the process when spaces are compared)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .._bounds import ALLOC_FLOOR
from ._checks import check_bit_generator

__all__ = ["built_problem", "space_problem"]

#: Attribute values a space keeps that are plain data, whatever the space.
_PLAIN = (bool, int, float, str, bytes, type(None), np.integer, np.floating, np.bool_, np.dtype)
#: Array kinds a space's arrays may have: numbers and booleans, never objects or raw bytes.
_ARRAY_KINDS = "biuf"


def built_problem(obj: Any) -> str | None:
    """What is wrong with ``obj`` once the unpickler has set its state (BUILD), or ``None``:
    a bit generator's position out of its buffer, or a gymnasium space that is not plain data."""
    problem = check_bit_generator(obj)
    if problem:
        return f"random generator state is out of range: {problem}"
    if type(obj).__module__.startswith("gymnasium.spaces"):
        problem = space_problem(obj)
        return f"the pickled space is refused: {problem}" if problem else None
    return None


def space_problem(space: Any, depth: int = 0) -> str | None:
    """Why ``space`` (a gymnasium ``Space`` built from archive data) is unsafe to hand to code
    that compares or samples it, or ``None`` when it holds plain data only.

    A ``Box``'s ``low``/``high`` (and its ``bounded_*`` masks) must be numpy arrays of its
    ``shape`` (and dtype); every other attribute must be a number, a string, a dtype, a tuple,
    a frozenset or dict of those, a random generator, or a child space checked the same way.
    Its values are ones gymnasium's constructor accepts and ``sample()`` can use: a
    ``Discrete``'s and ``MultiDiscrete``'s values fit their dtype, a ``Box`` has no NaN bound
    and no ``low`` above ``high``.
    A space or container inside itself is refused, and so is sharing that multiplies what a
    walk visits (see :data:`_PATHS_FLOOR`). Each space and container is checked once, so the
    check is linear when a pickle's memo shares them.
    """
    seen: dict[int, int] = {}  # id -> what a walk of it visits; -1 while it is being checked
    problem = _space_problem(space, depth, seen)
    if problem is None:
        visits, distinct = seen[id(space)], seen[_WORK]
        if visits > max(_PATHS_FLOOR, _SHARING * distinct):
            return f"its parts are shared so that a walk of its {distinct} values would visit {visits}"
    return problem


#: Sharing is refused when a walk of every path through a space would visit more than this
#: and more than :data:`_SHARING` times the values the space holds: ``Tuple([s, s])`` nested 30
#: deep is a kilobyte of pickle whose comparison or ``repr`` visits 2**31 spaces.
_PATHS_FLOOR = 1 << 16
_SHARING = 16
_WORK = 0  # the key of ``seen`` that counts the values checked (no live object has id 0)


def _space_problem(space: Any, depth: int, seen: dict[int, int]) -> str | None:
    from gymnasium.spaces import Box, Space

    if depth > 64:
        return "spaces are nested more than 64 deep"
    if not isinstance(space, Space):
        return f"expected a gymnasium space, found {type(space).__name__}"
    if id(space) in seen:  # checked once, however many places hold it; or inside itself
        return f"the {type(space).__name__} holds itself" if seen[id(space)] < 0 else None
    state = getattr(space, "__dict__", None)
    if not isinstance(state, dict):
        return f"the {type(space).__name__} has no attribute dictionary"
    for name in state:
        if not isinstance(name, str) or name.startswith("__"):
            return f"the {type(space).__name__} has the attribute {name!r}, which no space has"
    pairs = [(f"{type(space).__name__}.{name}", value) for name, value in state.items()]
    problem = _walk(space, pairs, depth, seen)
    return problem or (_box_problem(space) if isinstance(space, Box) else _sample_problem(space))


#: The most elements a sample of a space whose size is a number (``MultiBinary``'s shape,
#: ``Text``'s ``max_length``) may take: the allocation floor of ``zipsave._bounds``. Those
#: few bytes stood for samples of any size (``MultiBinary([10**6, 10**6])``: 931 GiB); a
#: ``Box`` allocates its bounds when it is built, within the same budget.
_MAX_SAMPLE = ALLOC_FLOOR


def _sample_problem(space: Any) -> str | None:
    from gymnasium.spaces import Discrete, MultiBinary, MultiDiscrete, Text

    size: Any
    if isinstance(space, Discrete):
        return _discrete_problem(vars(space))
    if isinstance(space, MultiDiscrete):
        return _multi_discrete_problem(vars(space))
    if isinstance(space, MultiBinary):
        shape = vars(space).get("_shape")
        if not (isinstance(shape, tuple) and all(isinstance(n, numbers.Integral) for n in shape)):
            return f"MultiBinary.shape must be a tuple of integers, found {shape!r}"
        if not all(int(n) > 0 for n in shape):  # as gymnasium's constructor requires
            return f"MultiBinary.shape must hold positive sizes, found {shape!r}"
        size, what = math.prod(int(n) for n in shape), f"a MultiBinary of shape {shape}"
    elif isinstance(space, Text):
        size, least, what = vars(space).get("max_length"), vars(space).get("min_length", 0), "a Text space"
        if not (isinstance(size, numbers.Integral) and isinstance(least, numbers.Integral)):
            return f"Text.min_length and max_length must be integers, found {least!r} and {size!r}"
        if not 0 <= int(least) <= int(size):  # as gymnasium's constructor requires
            return f"a Text space needs 0 <= min_length <= max_length, found {int(least)} and {int(size)}"
        what += f" of max_length {int(size)}"
        # gymnasium's repr shows the charset as it is: a printed model must not carry an
        # escape sequence, a bidi override or any other character a terminal acts on
        chars = vars(space).get("_char_str", "")
        hidden = sorted({ch for ch in chars if isinstance(chars, str) and not (ch.isprintable() or ch in "\t\n")})
        if hidden:
            return f"a Text charset holds {len(hidden)} character(s) a terminal acts on ({ascii(''.join(hidden[:8]))})"
    else:
        return None
    if int(size) > _MAX_SAMPLE:
        return f"{what} stands for samples of more than {_MAX_SAMPLE} elements"
    return None


def _integer_range(dtype: Any, what: str) -> tuple[int, int] | str:
    if not (isinstance(dtype, np.dtype) and dtype.kind in "iu"):
        return f"{what}.dtype must be an integer dtype, found {dtype!r}"
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _discrete_problem(state: dict[str, Any]) -> str | None:
    """A ``Discrete`` gymnasium's constructor accepts (``n > 0``, integers) whose values
    ``start .. start + n - 1`` and end ``start + n`` its dtype holds: ``sample()`` computes
    ``start + k`` in that dtype and gymnasium 0.29's ``contains`` ``start + n``, so
    ``Discrete(2**63 - 1, start=2**63 - 1)``, which gymnasium builds, overflowed (a warning and
    a wrong sample), as ``contains`` did on 0.29 for ``Discrete(1, start=2**63 - 1)``."""
    values = {}
    for name in ("n", "start"):
        value = state.get(name, 0)
        if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
            return f"Discrete.{name} must be an integer, found {type(value).__name__}"
        values[name] = int(value)
    n, start = values["n"], values["start"]
    if n <= 0:
        return f"Discrete.n must be positive, found {n}"
    bounds = _integer_range(state.get("dtype"), "Discrete")
    if isinstance(bounds, str):
        return bounds
    if start < bounds[0] or start + n > bounds[1]:
        return (
            f"a Discrete of n={n}, start={start} ends at {start + n}, past its dtype {state['dtype']} "
            f"({bounds[0]} .. {bounds[1]}): sample() or contains() would overflow"
        )
    return None


def _multi_discrete_problem(state: dict[str, Any]) -> str | None:
    """A ``MultiDiscrete`` as gymnasium's constructor builds it (``nvec`` and ``start``
    integer arrays of its dtype and shape, ``nvec > 0``) whose values ``start + nvec - 1``
    its dtype holds (``sample()`` adds ``start`` in that dtype, wrapping silently)."""
    bounds = _integer_range(state.get("dtype"), "MultiDiscrete")
    if isinstance(bounds, str):
        return bounds
    nvec, start = state.get("nvec"), state.get("start")
    for name, value in (("nvec", nvec), ("start", start)):
        if type(value) is not np.ndarray or value.dtype != state["dtype"]:
            found = f"dtype {value.dtype}" if isinstance(value, np.ndarray) else type(value).__name__
            return f"MultiDiscrete.{name} must be an array of its dtype {state['dtype']}, found {found}"
        if value.shape != state.get("_shape"):
            return f"MultiDiscrete.{name} has shape {value.shape}, but the space has shape {state.get('_shape')}"
    assert isinstance(nvec, np.ndarray) and isinstance(start, np.ndarray)  # for mypy
    if not (nvec > 0).all():
        return "MultiDiscrete.nvec must be positive"
    # start + nvec - 1 <= max, as max - start >= nvec - 1: both sides are exact in uint64
    # (max - start lies in 0 .. 2**64 - 1 and wraps back to its value)
    room = np.uint64(bounds[1]) - start.astype(np.uint64)
    if not (nvec.astype(np.uint64) - np.uint64(1) <= room).all():
        return f"a MultiDiscrete's start + nvec - 1 goes past its dtype {state['dtype']}: sample() would overflow"
    return None


def _walk(owner: Any, pairs: list[tuple[str, Any]], depth: int, seen: dict[int, int]) -> str | None:
    """Check each ``(where, value)`` of ``owner`` (a space's attributes, a container's items;
    the caller found it not in ``seen``), and record in ``seen`` what a walk of it visits."""
    seen[id(owner)] = -1
    visits = 1
    for where, value in pairs:
        problem = _value_problem(value, where, depth, seen)
        if problem:
            return problem
        visits += seen.get(id(value), 1)
    seen[_WORK] = seen.get(_WORK, 0) + len(pairs)
    seen[id(owner)] = visits
    return None


def _box_problem(box: Any) -> str | None:
    state = vars(box)
    shape, dtype = state.get("_shape", state.get("shape")), state.get("dtype")
    if not (isinstance(shape, tuple) and all(isinstance(n, numbers.Integral) and int(n) >= 0 for n in shape)):
        return f"Box.shape must be a tuple of non-negative integers, found {shape!r}"
    for field in ("low", "high", "bounded_below", "bounded_above"):
        if field not in state:
            if field in ("low", "high"):
                return f"Box has no `{field}`"
            continue
        value = state[field]
        if isinstance(value, (np.bool_, np.number)) and tuple(shape) == ():
            value = np.asarray(value)  # a 0-d Box compares to numpy scalars
        if type(value) is not np.ndarray:
            return f"Box.{field} must be a numpy array, found {type(value).__name__}"
        if tuple(value.shape) != tuple(shape):
            return f"Box.{field} has shape {value.shape}, but the Box has shape {shape}"
        if field.startswith("bounded") and value.dtype != np.bool_:
            return f"Box.{field} must be a bool array, found dtype {value.dtype}"
        if field in ("low", "high") and isinstance(dtype, np.dtype) and value.dtype != dtype:
            return f"Box.{field} has dtype {value.dtype}, but the Box has dtype {dtype}"
    return _bounds_problem(state)


def _bounds_problem(state: dict[str, Any]) -> str | None:
    """What gymnasium's ``Box`` constructor refuses (a NaN bound, ``low > high``) and what it
    never builds: a bound marked bounded that is infinite (``sample()`` would draw from it)."""
    low, high = np.asarray(state["low"]), np.asarray(state["high"])  # a 0-d Box may hold scalars
    if low.dtype.kind not in _ARRAY_KINDS or high.dtype.kind not in _ARRAY_KINDS:
        return f"Box bounds must be numbers, found dtypes {low.dtype} and {high.dtype}"
    if np.isnan(low).any() or np.isnan(high).any():
        return "a Box bound is NaN"
    if (low > high).any():
        return "a Box has a low bound above its high bound"
    for field, bound in (("bounded_below", low), ("bounded_above", high)):
        mask = state.get(field)
        if isinstance(mask, np.ndarray) and mask.shape == bound.shape and (mask & np.isinf(bound)).any():
            return f"Box.{field} marks an infinite bound as bounded"
    return None


def _value_problem(value: Any, where: str, depth: int, seen: dict[int, int]) -> str | None:
    from gymnasium.spaces import Space

    if isinstance(value, _PLAIN) and not isinstance(value, np.ndarray):
        return None
    if type(value) is np.ndarray:
        if value.dtype.kind not in _ARRAY_KINDS:
            return f"{where} is an array of dtype {value.dtype}; a space holds numbers or booleans only"
        return None
    if isinstance(value, Space):
        return _space_problem(value, depth + 1, seen)
    if type(value) in (np.random.Generator, np.random.RandomState):
        return None
    plain_dict = isinstance(value, dict) and type(value).__module__ in ("builtins", "collections")
    if type(value) in (tuple, list, frozenset, set) or plain_dict:
        if id(value) in seen:  # checked once (its items are not listed again), or inside itself
            return f"{where} holds itself" if seen[id(value)] < 0 else None
        if depth >= 64:
            return "spaces are nested more than 64 deep"
        items = (*value, *value.values()) if plain_dict else value
        return _walk(value, [(where, item) for item in items], depth + 1, seen)
    return f"{where} is a {type(value).__module__}.{type(value).__qualname__} object; a space holds plain data only"
