"""A saved learning-rate scheduler state (or another stateful object's), checked against the
live object before its ``load_state_dict`` takes it, which sets any name it is given as an
attribute: the names against what the scheduler's own ``state_dict`` writes, the values against
the kinds and ranges its ``step`` computes with."""

from __future__ import annotations

import math
import types
from collections import Counter
from typing import Any, Callable

from torch.optim.lr_scheduler import LRScheduler

from ..exceptions import ParameterMismatchError
from ._optim_state import real_number, shape_of

__all__ = ["check_scheduler_state", "load_stateful"]

#: The most problems one message names.
_NAMED = 5
#: ReduceLROnPlateau's ``best`` and ``mode_worse`` start at infinity; no other number a torch
#: scheduler keeps is infinite, and none is NaN.
_INFINITE = frozenset({"best", "mode_worse"})
_ABOVE_0 = (lambda v: v > 0, "above 0")
_LR = (lambda v: v >= 0, "0 or more (a learning rate)")
#: The ranges torch's schedulers compute in, by name: what their ``step`` divides by (``0``: a
#: ZeroDivisionError), multiplies a learning rate by (below 0: a negative rate, which torch's
#: optimizers refuse), or takes as a fraction (as their constructors check).
_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    **dict.fromkeys(("step_size", "T_max", "T_0", "T_i", "total_steps", "total_size"), _ABOVE_0),
    "T_mult": (lambda v: v >= 1, "1 or more"),
    "step_ratio": (lambda v: 0 < v <= 1, "above 0 and at most 1"),
    "start_factor": (lambda v: 0 < v <= 1, "above 0 and at most 1"),
    **dict.fromkeys(("factor", "end_factor"), (lambda v: 0 <= v <= 1, "between 0 and 1")),
    "gamma": (lambda v: v >= 0, "0 or more"),
    **dict.fromkeys(("base_lrs", "_last_lr", "min_lrs", "max_lrs", "eta_min", "default_min_lr"), _LR),
}
_PHASE = frozenset({"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"})
#: The names torch's schedulers choose between (their ``step`` raises, or their
#: ``load_state_dict`` does, on another), by class and key.
_CHOICES: dict[tuple[str, str], frozenset] = {
    ("ReduceLROnPlateau", "mode"): frozenset({"min", "max"}),
    ("ReduceLROnPlateau", "threshold_mode"): frozenset({"rel", "abs"}),
    ("CyclicLR", "mode"): frozenset({"triangular", "triangular2", "exp_range"}),
    ("CyclicLR", "scale_mode"): frozenset({"cycle", "iterations"}),
    ("OneCycleLR", "_anneal_func_type"): frozenset({"cos", "linear"}),
    **{("OneCycleLR", k): _PHASE for k in ("start_lr", "end_lr", "start_momentum", "end_momentum")},
}


def _torch_scheduler(scheduler: Any) -> str:
    """The name of the first of torch's own scheduler classes among ``scheduler``'s bases
    (``""`` for one that only derives from the base class): the one whose ranges apply."""
    for cls in type(scheduler).__mro__:
        if cls.__module__ == "torch.optim.lr_scheduler" and cls.__name__ != "LRScheduler":
            return cls.__name__
    return ""


def check_scheduler_state(scheduler: Any, saved: Any, path: str = "") -> None:
    """Refuse a saved learning-rate scheduler state that names what is not the scheduler's
    state: torch's ``load_state_dict`` sets every name it is given as an attribute, so
    ``optimizer`` replaced the optimizer the scheduler steps and ``get_lr`` or ``step`` shadowed
    its methods (the first ``step`` raised). A name its own ``state_dict`` writes must hold
    the kind of value it holds (a flag, a number, a name, a list of as many values, each of
    its kind) within the range torch's schedulers compute in: no NaN, no infinity, no
    ``step_size`` of 0, no negative ``gamma``, no ``mode`` their constructors refuse (else the
    first ``step`` divided by zero or set a learning rate of NaN, or ``load_state_dict`` raised
    half-way). Chained schedulers' states are checked each against its scheduler, and the saved
    state of a ``LambdaLR``'s (``CyclicLR``'s) callable objects against theirs. Names the live
    scheduler lacks (an older torch's ``verbose``) are plain values and load."""
    if not isinstance(saved, dict):
        raise ParameterMismatchError(f"holds a {type(saved).__name__} for a scheduler's state, expected a dict.")
    live = scheduler.state_dict()
    cls = type(scheduler)
    torch_name = _torch_scheduler(scheduler)
    for key, value in saved.items():
        where = f"{path}{key}"
        if not isinstance(key, str) or key == "optimizer" or key.startswith("__"):
            raise ParameterMismatchError(f"`{where}` is no state a {cls.__name__} writes.", key=str(where))
        attribute = getattr(cls, key, None)
        if callable(attribute) or isinstance(attribute, property):
            raise ParameterMismatchError(
                f"`{where}` names {cls.__name__}'s method, not its state: loading it would replace the method.",
                key=where,
            )
        if key not in live or key in ("_schedulers", "lr_lambdas", "_scale_fn_custom"):
            continue
        problem = _value_problem(torch_name, key, live[key], value)
        if problem is None and key == "milestones":
            problem = _milestones_problem(value, saved.get("gamma", live.get("gamma")))
        if problem is not None:
            raise ParameterMismatchError(f"`{where}` is not {problem}, as {cls.__name__} keeps it.", key=where)
    children = saved.get("_schedulers")
    own = getattr(scheduler, "_schedulers", None)
    if isinstance(children, list) and isinstance(own, list):
        for index, (child, child_state) in enumerate(zip(own, children)):
            check_scheduler_state(child, child_state, f"{path}_schedulers.{index}.")
    _check_lambdas(scheduler, saved.get("lr_lambdas"), path)
    custom = getattr(scheduler, "_scale_fn_custom", None)
    if saved.get("_scale_fn_custom") is not None:
        _check_callable_state(custom, saved["_scale_fn_custom"], f"{path}_scale_fn_custom")


def _value_problem(torch_name: str, key: str, live: Any, saved: Any) -> str | None:
    """Why ``saved`` cannot stand where ``live`` stands under ``key`` in the state of one of
    ``torch_name``'s schedulers, or ``None``."""
    if isinstance(live, bool):
        return None if isinstance(saved, bool) else "a flag (True or False)"
    if isinstance(live, (int, float)) or shape_of(live) is not None:  # its settings may be either
        if not (real_number(saved) or isinstance(saved, float)):
            return "a number"
        number = float(saved) if isinstance(saved, (int, float)) or hasattr(saved, "item") else None
        if number is None:
            return None  # a tensor the reader has not read
        if number != number or (math.isinf(number) and key not in _INFINITE):
            return "a finite number"
        ranged = _RANGES.get(key) if torch_name else None
        return None if ranged is None or ranged[0](number) else f"a number {ranged[1]}"
    if isinstance(live, str):
        choices = _CHOICES.get((torch_name, key))
        if not isinstance(saved, str):
            return "a name"
        return None if choices is None or saved in choices else f"one of {sorted(choices)}"
    if isinstance(live, (list, tuple)):
        if not isinstance(saved, (list, tuple)) or len(saved) != len(live):
            return f"a list of {len(live)}"
        for index, (own, value) in enumerate(zip(live, saved)):
            problem = _value_problem(torch_name, key, own, value)
            if problem is not None:
                return f"a list of {len(live)} whose item {index} is {problem}"
    if isinstance(live, dict) and not isinstance(live, Counter):  # OneCycleLR's phases
        if not isinstance(saved, dict) or not set(live) <= set(saved):
            return f"a dict of {sorted(live)}"
        for name, own in live.items():
            problem = _value_problem(torch_name, name, own, saved[name])
            if problem is not None:
                return f"a dict whose `{name}` is {problem}"
    return None


def _milestones_problem(saved: Any, gamma: Any) -> str | None:
    """MultiStepLR's ``milestones``: a Counter of epochs (whole numbers) and how often each was
    given (1 or more); its ``step`` multiplies the rate by ``gamma`` to that power."""
    if not isinstance(saved, dict):
        return "a Counter of epochs"
    base = float(gamma) if isinstance(gamma, (int, float)) else 1.0
    for epoch, count in saved.items():
        if type(epoch) is not int or type(count) is not int or count < 1:
            return "a Counter of whole epochs, each counted 1 or more times"
        try:
            base**count
        except OverflowError:
            return f"a Counter whose counts keep gamma ({base}) to their power finite"
    return None


def _check_lambdas(scheduler: Any, saved: Any, path: str) -> None:
    """``LambdaLR``'s (``MultiplicativeLR``'s) saved ``lr_lambdas``: None for a function, the
    attributes of a callable object; torch updates each live callable's ``__dict__`` with them."""
    own = getattr(scheduler, "lr_lambdas", None)
    if saved is None or not isinstance(own, list):
        return
    for index, (fn, state) in enumerate(zip(own, saved)):
        if state is not None:
            _check_callable_state(fn, state, f"{path}lr_lambdas.{index}")


def _check_callable_state(fn: Any, state: Any, where: str) -> None:
    """The saved attributes of a scheduler's callable (a lambda's, ``CyclicLR``'s
    ``scale_fn``): names the live callable holds (none for a function or no callable), which
    torch's ``load_state_dict`` puts in its ``__dict__``."""
    names = {} if fn is None or isinstance(fn, types.FunctionType) else getattr(fn, "__dict__", {})
    unknown = sorted(str(k) for k in state if k not in names) if isinstance(state, dict) else ["(not a dict)"]
    if unknown:
        raise ParameterMismatchError(
            f"`{where}` sets {unknown[:_NAMED]}, which its callable does not hold.",
            key=where,
        )


def load_stateful(target: Any, tree: Any) -> None:
    """``target.load_state_dict(tree)`` for a stateful object other than a module or an
    optimizer: a scheduler's state checked first (:func:`check_scheduler_state`), and what the
    object's own ``load_state_dict`` raises on the saved state (torch's ``ReduceLROnPlateau``
    on an unknown ``mode``, ``CyclicLR`` without ``_scale_fn_custom``) a
    ``ParameterMismatchError``, whose caller names the member."""
    if isinstance(target, LRScheduler):
        check_scheduler_state(target, tree)
    try:
        target.load_state_dict(tree)
    except ParameterMismatchError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, RuntimeError) as err:
        raise ParameterMismatchError(f"{type(target).__name__} refused it ({type(err).__name__}: {err}).") from err
