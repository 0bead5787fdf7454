"""A saved optimizer state's per-parameter tensors, checked against the parameters they go with
before torch's optimizer takes them: its ``load_state_dict`` checks none of their shapes, and
its fused kernels read and write each as if it had its parameter's elements."""

from __future__ import annotations

import math
from typing import Any

from ..exceptions import ParameterMismatchError

__all__ = ["check_optimizer_state"]

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
