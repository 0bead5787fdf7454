"""A saved optimizer state, checked against the live optimizer before torch's ``load_state_dict``
takes it, which checks nothing: its per-parameter tensors against their parameters (its fused
kernels read and write each as if it had its parameter's elements), its hyper-parameters against
the kinds its groups hold and against what torch's own constructor and step take."""

from __future__ import annotations

import inspect
import math
import warnings
from typing import Any

import torch

from ..exceptions import ParameterMismatchError

__all__ = ["check_number", "check_optimizer_numbers", "check_optimizer_state", "real_number", "shape_of"]

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
#: torch's verdicts on settings already tried (:func:`_trial`), by class, settings and stand-in;
#: emptied when full. Only plain settings are kept, so no caller's tensor is held here.
_VERDICTS: dict[tuple, tuple[str | None, frozenset]] = {}
_MAX_VERDICTS = 256
#: The settings each class's constructor takes, read from its signature once.
_ACCEPTED: dict[type, list[str]] = {}


def _param_shaped(optimizer: Any) -> tuple[str, ...]:
    """The state keys ``optimizer`` keeps in its parameters' shapes: those of the first of
    torch's optimizer classes among its bases (``AdamW``, or a subclass of ``Adam``); none for
    another optimizer, whose state is its own."""
    for cls in type(optimizer).__mro__:
        if cls.__module__.startswith("torch.optim.") and cls.__name__ in _PARAM_SHAPED:
            return _PARAM_SHAPED[cls.__name__]
    return ()


def shape_of(value: Any) -> tuple[int, ...] | None:
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
            problem = _entry_problem(name, value, shaped, wanted) if name in shaped or name in _SCALARS else None
            if problem is not None:
                problems.append((f"state.{pid}.{name}", problem))
    if problems:
        listed = "; ".join(f"`{key}`: {what}" for key, what in problems[:_NAMED])
        more = f"; and {len(problems) - _NAMED} more" if len(problems) > _NAMED else ""
        raise ParameterMismatchError(
            f"{len(problems)} saved optimizer state value(s) do not fit their parameters: {listed}{more}.",
            key=problems[0][0],
            hint=f"{type(optimizer).__name__} keeps them so; build the model with the architecture it was saved "
            "with, or leave the optimizer's state out with `exclude=`.",
        )
    _check_groups(optimizer, groups)
    check_optimizer_numbers(tree)  # those read already (a state dict in data, SB3's shims)
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


def _entry_problem(name: str, value: Any, shaped: tuple[str, ...], wanted: tuple[int, ...]) -> str | None:
    """Why the step of an optimizer that keeps ``name`` for a parameter of shape ``wanted``
    cannot compute with (or write into) ``value``, or ``None``."""
    if name == "momentum_buffer" and value is None:
        return None  # SGD without momentum
    if name in _SCALARS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return check_number(name, value)  # an older torch's Python number
    shape = shape_of(value)
    if shape is None:
        return f"a {type(value).__name__} where it keeps a tensor"
    if name in shaped and shape != wanted:
        return f"saved shape {shape}, the parameter's {wanted}"
    if name in _SCALARS and math.prod(shape) != 1:
        return f"saved shape {shape}, one number expected"
    if name in _SCALARS and (value.dtype.is_complex or str(value.dtype) == "torch.bool"):
        return f"a {value.dtype} tensor where it keeps a real number"
    layout = getattr(value, "layout", None)
    stride = value.stride() if layout is not None and str(layout) == "torch.strided" else getattr(value, "stride", None)
    if layout is not None and str(layout) != "torch.strided" or not isinstance(stride, tuple):
        return f"a {layout} tensor where it keeps a dense one"
    expected = 1  # a dense tensor, no two elements in one place: its step writes it as one run of memory
    for step, size in sorted((step, size) for size, step in zip(shape, stride) if size != 1):
        if step != expected and 0 not in shape:
            return f"a view (size {shape}, stride {stride}) whose elements share memory or leave gaps"
        expected *= size
    return None


def check_number(name: str, value: Any) -> str | None:
    """Why an optimizer's per-parameter number (a ``step``, NAdam's ``mu_product``, ASGD's
    ``eta``) read as ``value`` is no number its step computes with, or ``None``: NaN or inf
    made every weight NaN, a ``step`` below 0 divided by zero in Adam's bias correction."""
    number = float(value)
    if not math.isfinite(number):
        return f"{number}, not a finite number"
    return f"{number}: a step is 0 or more" if name == "step" and number < 0 else None


def check_optimizer_numbers(tree: Any, archive: Any = None, member: str | None = None) -> None:
    """Refuse a read optimizer state whose per-parameter numbers (:func:`check_number`) its
    step cannot compute with: what :func:`check_optimizer_state` could not see in the tensors
    before they were read."""
    state = tree.get("state") if isinstance(tree, dict) else None
    for pid, entry in state.items() if isinstance(state, dict) else ():
        for name, value in entry.items() if isinstance(entry, dict) else ():
            if name in _SCALARS and hasattr(value, "item") and value.numel() == 1 and not value.dtype.is_complex:
                problem = check_number(name, value)
                if problem is not None:
                    where = f"state.{pid}.{name}"
                    raise ParameterMismatchError(f"`{where}` is {problem}.", archive=archive, member=member, key=where)


def real_number(value: Any) -> bool:
    """A real number an optimizer computes with: an int or float (not a bool, NaN or inf), or a
    tensor (or the reader's reference to one) of one element."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        try:
            return math.isfinite(value)
        except OverflowError:  # an int past float's range (lr=10**400): torch's step cannot compute with it
            return False
    shape = shape_of(value)
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
    if real_number(live) or isinstance(live, (int, float)):
        return None if real_number(saved) else "a finite number"
    if isinstance(live, (tuple, list)) and all(real_number(v) for v in live):
        fits = isinstance(saved, (tuple, list)) and len(saved) == len(live) and all(real_number(v) for v in saved)
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
    accepted = _accepted(base)
    kept: dict[int, frozenset] = {}
    for index, (live, saved) in enumerate(zip(optimizer.param_groups, groups)):
        like = live["params"][0] if live["params"] else None
        if not isinstance(saved, dict) or like is None or like.device.type == "meta" or not like.is_floating_point():
            continue
        own = {n: live[n] for n in accepted if n in live}
        # `lr` is what a schedule changes at every update, and SB3's linear schedule ends a hair
        # below 0 (-1.4e-12 in published RL Zoo agents): torch's step computes with what its
        # constructor refuses. Its kind and finiteness are checked above (`_check_groups`).
        given = {n: saved[n] for n in own if n in saved and n != "lr" and _plain(saved[n])}
        refused, keys = _trial(base, {**own, **given}, like)
        if refused is not None and _trial(base, own, like)[0] is None:
            raise ParameterMismatchError(
                f"`param_groups.{index}` sets {sorted(k for k in given if given[k] != own[k])} to what torch's "
                f"{base.__name__} refuses ({refused}).",
                key=f"param_groups.{index}",
                hint=(
                    "torch here takes no such settings for parameters on this device (an archive saved on another "
                    "device, or not by torch); leave the optimizer's state out with `exclude=` to keep its own."
                ),
            )
        kept[index] = frozenset() if base.__name__ == "SGD" else keys  # SGD makes a missing momentum buffer
    return kept


def _accepted(base: type) -> list[str]:
    """The settings ``base``'s constructor takes (its signature read once per class)."""
    if base not in _ACCEPTED:
        _ACCEPTED[base] = [n for n in inspect.signature(base).parameters if n != "params"]
    return _ACCEPTED[base]


def _trial(base: type, settings: dict, like: Any) -> tuple[str | None, frozenset]:
    """``base`` built with ``settings`` over a one-element stand-in of ``like`` and stepped
    once: what torch raised (``None`` if nothing), and the state keys it kept. The step is the
    class's own, without the hooks ``Optimizer`` wraps it in: no step hook a caller registered
    runs for the stand-in, and a first call does not pay for torch's profiler annotations. The
    verdict on plain settings is kept for the next restore."""
    plain = all(_plain(v) for v in settings.values())
    given = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in settings.items()))
    key = (base, given, like.dtype, like.device, like.requires_grad, like.is_leaf)
    if plain and key in _VERDICTS:
        return _VERDICTS[key]
    stand_in = torch.zeros(1, dtype=like.dtype, device=like.device, requires_grad=like.requires_grad)
    if not like.is_leaf:  # a differentiable optimizer's parameters (a leaf refuses its in-place step)
        stand_in = stand_in.clone()
    stand_in.grad = torch.zeros(1, dtype=like.dtype, device=like.device)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = base([stand_in], **settings)
            step = getattr(type(trial).step, "__wrapped__", None)  # `Optimizer.profile_hook_step`'s
            if step is not None:
                step(trial)
            else:
                trial.step()
        verdict: tuple[str | None, frozenset] = (None, frozenset(trial.state[stand_in]))
    except Exception as err:  # torch's verdict, of any kind (AssertionError for capturable)
        verdict = (f"{type(err).__name__}: {err}", frozenset())
    if plain:
        if len(_VERDICTS) >= _MAX_VERDICTS:
            _VERDICTS.clear()
        _VERDICTS[key] = verdict
    return verdict
