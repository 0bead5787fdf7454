"""A saved optimizer or learning-rate scheduler state, checked against the live object before
torch's ``load_state_dict`` takes it, which checks nothing: an optimizer's per-parameter tensors
against their parameters (its fused kernels read and write each as if it had its parameter's
elements) and its hyper-parameters against the kinds its groups hold; a scheduler's names
against what its own ``state_dict`` writes (it sets any name it is given as an attribute)."""

from __future__ import annotations

import inspect
import math
import types
import warnings
from collections import Counter
from typing import Any, Callable

import torch
from torch.optim.lr_scheduler import LRScheduler

from ..exceptions import ParameterMismatchError

__all__ = ["check_optimizer_state", "check_scheduler_state", "load_stateful"]

#: The per-parameter state each of torch's optimizers keeps in its parameter's shape (what its
#: step creates with ``zeros_like(param)``), by class name in ``torch.optim``.
_PARAM_SHAPED: dict[str, tuple[str, ...]] = {
    "Adam": ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
    "AdamW": ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
    "Adamax": ("exp_avg", "exp_inf"),
    "NAdam": ("exp_avg", "exp_avg_sq"),
    "RAdam": ("exp_avg", "exp_avg_sq"),
    "SparseAdam": ("exp_avg", "exp_avg_sq"),
    "SGD": ("momentum_buffer",),
    "RMSprop": ("square_avg", "momentum_buffer", "grad_avg"),
    "Adagrad": ("sum",),
    "Adadelta": ("square_avg", "acc_delta"),
    "ASGD": ("ax",),
    "Rprop": ("prev", "step_size"),
}
#: What they keep as one number (a 0-d tensor; a Python number in older torch).
_SCALARS = ("step", "mu_product", "eta", "mu")
#: The most problems one message names.
_NAMED = 5


def _param_shaped(optimizer: Any) -> tuple[str, ...]:
    """The state keys ``optimizer`` keeps in its parameters' shapes: those of the first of
    torch's optimizer classes among its bases (``AdamW``, or a subclass of ``Adam``); none for
    another optimizer, whose state is its own."""
    for cls in type(optimizer).__mro__:
        if cls.__module__.startswith("torch.optim.") and cls.__name__ in _PARAM_SHAPED:
            return _PARAM_SHAPED[cls.__name__]
    return ()


def _shape(value: Any) -> tuple[int, ...] | None:
    """A saved tensor's shape (a tensor reference of the reader, or a tensor); else ``None``."""
    shape = getattr(value, "shape", None)
    return tuple(shape) if isinstance(shape, tuple) and all(type(n) is int for n in shape) else None


def check_optimizer_state(optimizer: Any, tree: Any) -> None:
    """Refuse a saved state (``tree``, its tensors unread) whose tensors for a parameter are
    not what ``optimizer`` keeps for it: a parameter-shaped entry (Adam's ``exp_avg``) of
    another shape, or a ``step`` of other than one element. A fresh optimizer (never stepped)
    holds no state to compare with; its first step then failed (``RuntimeError``), or with
    ``fused=True`` wrote past the saved tensor (a segfault). The saved state's parameter ids
    go with the optimizer's parameters in order, as in ``load_state_dict``."""
    shaped = _param_shaped(optimizer)
    state = tree.get("state") if isinstance(tree, dict) else None
    groups = tree.get("param_groups") if isinstance(tree, dict) else None
    if not shaped or not isinstance(state, dict) or not isinstance(groups, list):
        return  # another optimizer's, or a state torch's load_state_dict refuses itself
    params = [p for group in optimizer.param_groups for p in group["params"]]
    position: dict[Any, int] = {}  # torch's id map: each saved id, its place (the last, if repeated)
    group_of: dict[Any, int] = {}
    index = 0
    for number, group in enumerate(groups):
        for pid in group.get("params", ()) if isinstance(group, dict) else ():
            try:
                position[pid], group_of[pid] = index, number
            except TypeError:  # unhashable: torch's own map refuses the state
                pass
            index += 1
    problems = []
    for pid, entry in state.items():
        at = position.get(pid)
        if at is None or at >= len(params) or not isinstance(entry, dict):
            continue  # torch keeps what it cannot place under its id, unused
        wanted = tuple(params[at].shape)
        for name, value in entry.items():
            shape = _shape(value)
            if shape is None:
                continue
            if name in shaped and shape != wanted:
                problems.append((f"state.{pid}.{name}", f"saved shape {shape}, the parameter's {wanted}"))
            elif name in _SCALARS and math.prod(shape) != 1:
                problems.append((f"state.{pid}.{name}", f"saved shape {shape}, one number expected"))
    if problems:
        listed = "; ".join(f"`{key}`: {what}" for key, what in problems[:_NAMED])
        more = f"; and {len(problems) - _NAMED} more" if len(problems) > _NAMED else ""
        raise ParameterMismatchError(
            f"{len(problems)} saved optimizer state tensor(s) do not fit their parameters: {listed}{more}.",
            key=problems[0][0],
            hint=f"{type(optimizer).__name__} keeps them so; build the model with the architecture it was saved "
            "with, or leave the optimizer's state out with `exclude=`.",
        )
    _check_groups(optimizer, groups)
    kept = _check_combinations(optimizer, groups)
    for pid, entry in state.items():
        needed = kept.get(group_of.get(pid, -1), frozenset())
        missing = sorted(needed - set(entry)) if isinstance(entry, dict) and entry else []
        if missing:  # its step reads them: KeyError
            raise ParameterMismatchError(
                f"`state.{pid}` holds no {missing}, which {type(optimizer).__name__} keeps for a parameter with "
                "the saved settings.",
                key=f"state.{pid}",
            )


def _number(value: Any) -> bool:
    """A real number an optimizer computes with: an int or float (not a bool, NaN or inf), or a
    tensor (or the reader's reference to one) of one element."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return isinstance(value, int) or math.isfinite(value)
    shape = _shape(value)
    return shape is not None and math.prod(shape) == 1


def _kind_problem(live: Any, saved: Any) -> str | None:
    """Why ``saved`` cannot stand where ``live`` stands in a parameter group, or ``None``:
    a flag stays a flag, a number a number, a pair (``betas``) a pair of numbers; where the
    optimizer holds ``None`` (``foreach``, ``fused``, LBFGS's ``line_search_fn``), a flag or
    a name. torch's constructors refuse NaN, so it never writes one."""
    if isinstance(live, bool):
        return None if isinstance(saved, bool) else "a flag (True or False)"
    if live is None:
        return None if saved is None or isinstance(saved, (bool, str)) else "None, a flag or a name"
    if _number(live) or isinstance(live, (int, float)):
        return None if _number(saved) else "a finite number"
    if isinstance(live, (tuple, list)) and all(_number(v) for v in live):
        fits = isinstance(saved, (tuple, list)) and len(saved) == len(live) and all(_number(v) for v in saved)
        return None if fits else f"{len(live)} numbers"
    if isinstance(live, str):
        return None if isinstance(saved, str) else "a name"
    return None


def _check_groups(optimizer: Any, groups: list) -> None:
    """Each saved parameter group's hyper-parameters are of the kinds the optimizer's group
    holds (torch's ``load_state_dict`` puts the saved ones in its place): ``lr`` of 1000
    elements, ``betas`` of one number or NaN loaded, and the first step raised or made every
    weight NaN. Keys the optimizer's group has not are torch's to keep."""
    problems = []
    for index, (live, saved) in enumerate(zip(optimizer.param_groups, groups)):
        if not isinstance(saved, dict):
            continue
        for key, value in saved.items():
            if key in ("params", "param_names") or key not in live:
                continue
            wanted = _kind_problem(live[key], value)
            if wanted is not None:
                problems.append((f"param_groups.{index}.{key}", wanted))
    if problems:
        listed = "; ".join(f"`{key}` is not {what}" for key, what in problems[:_NAMED])
        more = f"; and {len(problems) - _NAMED} more" if len(problems) > _NAMED else ""
        raise ParameterMismatchError(
            f"{len(problems)} saved optimizer setting(s) are not of the kinds {type(optimizer).__name__} holds: "
            f"{listed}{more}.",
            key=problems[0][0],
            hint="torch writes none such; leave the optimizer's state out with `exclude=` to keep its own settings.",
        )


_PLAIN = (bool, int, float, str, type(None))


def _plain(value: Any) -> bool:
    return isinstance(value, _PLAIN) or (isinstance(value, (tuple, list)) and all(isinstance(v, _PLAIN) for v in value))


def _check_combinations(optimizer: Any, groups: list) -> dict[int, frozenset]:
    """torch's own verdict on each saved group's settings, before its ``load_state_dict`` puts
    them in place: the first of torch's optimizer classes among the optimizer's bases is built
    with them over a one-element stand-in of the group's first parameter and stepped once.
    Combinations its constructor refuses (``foreach`` with ``fused``, ``fused`` with
    ``differentiable``, a negative ``lr`` or ``eps``, ``betas`` past 1) or its step refuses
    (``capturable`` for parameters on the CPU: an AssertionError at the first step) are refused
    where the live group's own settings are taken. Returns, by group, the state keys that step
    keeps (each of which a saved parameter's state must hold: its step reads them)."""
    base = next(
        (c for c in type(optimizer).__mro__ if c.__module__.startswith("torch.optim.") and c.__name__ in _PARAM_SHAPED),
        None,
    )
    if base is None:
        return {}
    accepted = [n for n in inspect.signature(base).parameters if n != "params"]
    kept: dict[int, frozenset] = {}
    for index, (live, saved) in enumerate(zip(optimizer.param_groups, groups)):
        like = live["params"][0] if live["params"] else None
        if not isinstance(saved, dict) or like is None or like.device.type == "meta" or not like.is_floating_point():
            continue
        own = {n: live[n] for n in accepted if n in live}
        given = {n: saved[n] for n in own if n in saved and _plain(saved[n])}
        refused, keys = _trial(base, {**own, **given}, like)
        if refused is not None and _trial(base, own, like)[0] is None:
            raise ParameterMismatchError(
                f"`param_groups.{index}` sets {sorted(k for k in given if given[k] != own[k])} to what torch's "
                f"{base.__name__} refuses ({refused}).",
                key=f"param_groups.{index}",
                hint="torch writes no such settings; leave the optimizer's state out with `exclude=` to keep its own.",
            )
        kept[index] = frozenset() if base.__name__ == "SGD" else keys  # SGD makes a missing momentum buffer
    return kept


def _trial(base: type, settings: dict, like: Any) -> tuple[str | None, frozenset]:
    """``base`` built with ``settings`` over a one-element stand-in of ``like`` and stepped
    once: what torch raised (``None`` if nothing), and the state keys it kept."""
    stand_in = torch.zeros(1, dtype=like.dtype, device=like.device, requires_grad=like.requires_grad)
    if not like.is_leaf:  # a differentiable optimizer's parameters (a leaf refuses its in-place step)
        stand_in = stand_in.clone()
    stand_in.grad = torch.zeros(1, dtype=like.dtype, device=like.device)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = base([stand_in], **settings)
            trial.step()
    except Exception as err:  # torch's verdict, of any kind (AssertionError for capturable)
        return f"{type(err).__name__}: {err}", frozenset()
    return None, frozenset(trial.state[stand_in])


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
    if isinstance(live, (int, float)) or _shape(live) is not None:  # its settings may be either
        if not (_number(saved) or isinstance(saved, float)):
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
