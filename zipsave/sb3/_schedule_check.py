"""SB3's schedule objects as a pickle builds them (SB3 >= 2.7 pickles ``FloatSchedule``,
``ConstantSchedule`` and ``LinearSchedule``; the RL Zoo its ``SimpleLinearSchedule``): what each
must hold for its first call to return a number, asked by the unpickler once a pickle is read.

A pickle sets their state as it is: ``clip_range`` of ``FloatSchedule(ConstantSchedule("abc"))``,
of a 5 000-digit integer or of ``FloatSchedule(bytearray)`` loaded, and PPO's first ``train``
raised ``ValueError``, ``OverflowError`` or ``TypeError``."""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np

from .._printable import shown
from .._trust import default_allowlist
from ._same import global_name

__all__ = ["SCHEDULE_CHECKS"]

_UTILS = "stable_baselines3.common.utils."
_CONSTANT, _LINEAR, _FLOAT = (f"{_UTILS}{n}" for n in ("ConstantSchedule", "LinearSchedule", "FloatSchedule"))
_ZOO = "rl_zoo3.utils.SimpleLinearSchedule"
#: The numbers each schedule object keeps, which its call does arithmetic on or casts to float.
_NUMBERS = {_CONSTANT: ("val",), _LINEAR: ("start", "end", "end_fraction"), _ZOO: ("initial_value",)}
#: What a ``FloatSchedule`` may wrap of what a pickle can name: SB3's schedules, and the lambda
#: a policy records as its own ``lr_schedule``.
_SCHEDULES = (_CONSTANT, _LINEAR, _ZOO, "stable_baselines3.common.policies.BasePolicy._dummy_schedule")
#: Modules none of whose other callables is a schedule (a caller's own, trusted, may be one).
_LIBRARIES = ("numpy", "torch", "builtins", "copyreg", "_codecs", "stable_baselines3", "gymnasium", "collections")


def _number_problem(value: Any) -> str | None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return f"is a {type(value).__name__}"
    if isinstance(value, int) and value.bit_length() > 64:
        return f"is {shown(value)}"
    return None if math.isfinite(value) else f"is {shown(value)}"


def schedule_problem(schedule: Any) -> str | None:
    """What is wrong with an SB3 (or RL Zoo) schedule object a pickle built, or ``None``: its
    numbers are finite real numbers, and a ``FloatSchedule`` wraps a schedule, never a class
    (its call would construct one) nor another global of the allowlist (``bytearray``)."""
    state, name = vars(schedule), global_name(schedule)
    for part in _NUMBERS.get(name, ()):
        problem = _number_problem(state[part]) if part in state else "is missing"
        if problem:
            return f"`{part}` {problem}, where the schedule keeps a finite number"
    if name == _FLOAT:
        inner = state.get("value_schedule")
        inner_name = global_name(inner)
        if isinstance(inner, type) or (
            inner_name not in _SCHEDULES
            and (
                not callable(inner)
                or isinstance(inner, types.BuiltinFunctionType)
                or inner_name in default_allowlist()
                or inner_name.partition(".")[0] in _LIBRARIES
            )
        ):
            return f"`value_schedule` is {shown(inner)}, where SB3 keeps a schedule"
    return None


SCHEDULE_CHECKS = dict.fromkeys((_CONSTANT, _LINEAR, _FLOAT, _ZOO), schedule_problem)
