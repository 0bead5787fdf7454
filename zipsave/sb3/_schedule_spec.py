"""What a recognised schedule closure is, as inert data (a spec), and the two things made of it:
the installed library's schedule object (for a load) and its description in words (for
``zipsave inspect`` and ``zipsave diff``, which import neither SB3 nor torch)."""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["NotASchedule", "Spec", "buildable", "built", "installed_schedule", "spec_text"]

#: ``("constant", val)``, ``("linear", start, end, end_fraction)``, ``("zoo", initial_value)``
#: (the RL Zoo's linear schedule, from ``initial_value`` down to 0) or ``("float", inner)``
#: (``FloatSchedule``, or ``get_schedule_fn``'s wrapper, around another spec).
Spec = tuple


class NotASchedule(Exception):
    """The pickle is not one of SB3's schedule closures (or not only one)."""


def built(spec: Spec) -> Any:
    """The installed SB3's (or RL Zoo's) schedule object for ``spec``.

    Raises
    ------
    NotASchedule
        An RL Zoo schedule without rl-zoo3 installed.
    """
    from stable_baselines3.common import utils

    kind = spec[0]
    if kind == "constant":
        return utils.ConstantSchedule(spec[1]) if hasattr(utils, "ConstantSchedule") else utils.constant_fn(spec[1])
    if kind == "linear":
        return utils.LinearSchedule(*spec[1:]) if hasattr(utils, "LinearSchedule") else utils.get_linear_fn(*spec[1:])
    if kind == "zoo":
        schedule = installed_schedule(spec[1])
        if schedule is None:
            raise NotASchedule("the RL Zoo's `linear_schedule` is rebuilt only with rl-zoo3 installed")
        return schedule
    inner = built(spec[1])
    return utils.FloatSchedule(inner) if hasattr(utils, "FloatSchedule") else utils.get_schedule_fn(inner)


def buildable(spec: Spec) -> bool:
    """Whether :func:`built` can build ``spec`` here (the RL Zoo's needs rl-zoo3), asked without
    importing anything."""
    if spec[0] == "float":
        return buildable(spec[1])
    return spec[0] != "zoo" or importlib.util.find_spec("rl_zoo3") is not None


def installed_schedule(value: float) -> Any:
    """The installed Zoo's own linear schedule of ``value``: ``SimpleLinearSchedule`` (rl-zoo3
    >= 2.7), else the installed ``linear_schedule`` (the same closure the archive holds, built
    by the installed code, not the archive's); ``None`` without rl-zoo3."""
    try:
        from rl_zoo3 import utils
    except ImportError:
        return None
    simple = getattr(utils, "SimpleLinearSchedule", None)
    if simple is not None:
        return simple(value)
    closure = getattr(utils, "linear_schedule", None)
    return closure(value) if closure is not None else None


def _figure(value: float) -> str:
    """A number as a person writes it: ``0``, ``1``, ``0.0003``, ``1e-05``."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def spec_text(spec: Spec) -> str:
    """``spec`` in words: ``constant 0.0003``, ``linear 0.001 to 0``, ``linear 1 to 0.05 over the
    first 10% of training``; SB3's ``FloatSchedule`` wrapper only casts to float: not named."""
    kind = spec[0]
    if kind == "constant":
        return f"constant {_figure(spec[1])}"
    if kind == "linear":
        start, end, end_fraction = spec[1:]
        tail = "" if end_fraction == 1 else f" over the first {_figure(round(end_fraction * 100, 6))}% of training"
        return f"linear {_figure(start)} to {_figure(end)}{tail}"
    if kind == "zoo":
        return f"linear {_figure(spec[1])} to 0 (RL Zoo)"
    return spec_text(spec[1])
