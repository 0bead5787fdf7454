"""A saved optimizer or learning-rate scheduler state, checked against the live object before
torch's ``load_state_dict`` takes it, which checks nothing: an optimizer's per-parameter tensors
against their parameters (its fused kernels read and write each as if it had its parameter's
elements) and its hyper-parameters against the kinds its groups hold; a scheduler's names
against what its own ``state_dict`` writes (it sets any name it is given as an attribute)."""

from __future__ import annotations

import math
import types
from typing import Any

from ..exceptions import ParameterMismatchError

__all__ = ["check_optimizer_state", "check_scheduler_state"]

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
    index = 0
    for group in groups:
        for pid in group.get("params", ()) if isinstance(group, dict) else ():
            try:
                position[pid] = index
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


def _number(value: Any) -> bool:
    """A real number an optimizer computes with: an int or float (not a bool, not NaN), or a
    tensor (or the reader's reference to one) of one element."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == value
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
        return None if _number(saved) else "a number (not NaN)"
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


def check_scheduler_state(scheduler: Any, saved: Any, path: str = "") -> None:
    """Refuse a saved learning-rate scheduler state that names what is not the scheduler's
    state: torch's ``load_state_dict`` sets every name it is given as an attribute, so
    ``optimizer`` replaced the optimizer the scheduler steps and ``get_lr`` or ``step`` shadowed
    its methods (the first ``step`` raised). A name its own ``state_dict`` writes must hold
    the kind of value it holds (a flag, a whole number, a number, a name, a list of as many
    values); chained schedulers' states are checked each against its scheduler, and the saved
    state of a ``LambdaLR``'s callable objects against theirs. Names the live scheduler lacks
    (an older torch's ``verbose``) are plain values and load."""
    if not isinstance(saved, dict):
        raise ParameterMismatchError(f"holds a {type(saved).__name__} for a scheduler's state, expected a dict.")
    live = scheduler.state_dict()
    cls = type(scheduler)
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
        if key not in live:
            continue
        problem = _scheduler_kind_problem(live[key], value)
        if problem is not None:
            raise ParameterMismatchError(f"`{where}` is not {problem}, as {cls.__name__} keeps it.", key=where)
    children = saved.get("_schedulers")
    own = getattr(scheduler, "_schedulers", None)
    if isinstance(children, list) and isinstance(own, list):
        for index, (child, child_state) in enumerate(zip(own, children)):
            check_scheduler_state(child, child_state, f"{path}_schedulers.{index}.")
    _check_lambdas(scheduler, saved.get("lr_lambdas"), path)


def _scheduler_kind_problem(live: Any, saved: Any) -> str | None:
    if isinstance(live, bool):
        return None if isinstance(saved, bool) else "a flag (True or False)"
    if isinstance(live, (int, float)) or _shape(live) is not None:  # its settings may be either
        return None if _number(saved) or isinstance(saved, float) else "a number"
    if isinstance(live, str):
        return None if isinstance(saved, str) else "a name"
    if isinstance(live, (list, tuple)):
        return None if isinstance(saved, (list, tuple)) and len(saved) == len(live) else f"a list of {len(live)}"
    return None


def _check_lambdas(scheduler: Any, saved: Any, path: str) -> None:
    """``LambdaLR``'s (``MultiplicativeLR``'s) saved ``lr_lambdas``: None for a function, the
    attributes of a callable object; torch updates each live callable's ``__dict__`` with them."""
    own = getattr(scheduler, "lr_lambdas", None)
    if saved is None or not isinstance(own, list):
        return
    for index, (fn, state) in enumerate(zip(own, saved)):
        if state is None:
            continue
        names = {} if isinstance(fn, types.FunctionType) else getattr(fn, "__dict__", {})
        unknown = sorted(str(k) for k in state if k not in names) if isinstance(state, dict) else ["(not a dict)"]
        if unknown:
            raise ParameterMismatchError(
                f"`{path}lr_lambdas.{index}` sets {unknown[:_NAMED]}, which its callable does not hold.",
                key=f"{path}lr_lambdas.{index}",
            )
