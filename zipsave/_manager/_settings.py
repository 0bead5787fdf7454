"""Checking what a ``CheckpointManager`` is given: its retention and schedule settings, and
the steps it is asked to save at."""

from __future__ import annotations

import operator
from typing import Any

from .._sign import Trust, as_signer

__all__ = ["as_step", "check_count", "check_keep_best", "check_signing"]


def check_count(name: str, value: Any, *, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer or None, got {value!r}.")


def as_step(step: Any) -> int:
    """``step`` as a Python int: numpy integers and 0-d integer tensors are steps too (SB3 and
    training loops hand those over), floats and bools are not."""
    try:
        value = operator.index(step)
    except TypeError:
        value = None
    if isinstance(step, bool) or value is None or value < 0:
        raise ValueError(f"`step` must be a non-negative integer, got {step!r}.")
    return value


def check_keep_best(keep_best: Any) -> tuple[str, str, int] | None:
    if keep_best is None:
        return None
    if isinstance(keep_best, str):  # "loss" kept the largest losses: retention deleted the best checkpoints
        raise ValueError(
            f'`keep_best={keep_best!r}` does not say which value is best: pass `keep_best=({keep_best!r}, "min")` '
            f'to keep the smallest (a loss), or `({keep_best!r}, "max")` to keep the largest (a reward).'
        )
    if not isinstance(keep_best, (tuple, list)):  # `keep_best=1`, as `keep_last=1`: no metric to rank by
        raise ValueError(
            f'`keep_best` must be (metric, "max" or "min") or (metric, mode, count), got {keep_best!r}: it keeps '
            'the checkpoints with the best value of a metric that `save(..., metrics={"reward": r})` records, '
            'e.g. `keep_best=("reward", "max", 1)`.'
        )
    items = tuple(keep_best)
    if len(items) == 2:
        items = (*items, 1)
    if len(items) != 3 or not isinstance(items[0], str) or items[1] not in ("max", "min"):
        raise ValueError(f'`keep_best` must be (metric, "max" or "min") or (metric, mode, count), got {keep_best!r}.')
    check_count("keep_best count", items[2], allow_none=False)
    return items[0], items[1], items[2]


def check_signing(sign: Any, trust: Any) -> tuple[Any, Any]:
    """``(Signer or None, Trust or None)`` of a manager. Its checkpoints carry embedded signatures:
    a detached ``.sig`` would outlive the checkpoint retention deletes."""
    if sign is None and trust is None:
        return None, None
    signer = as_signer(sign)
    if signer is not None and not signer.embed:
        raise ValueError("a CheckpointManager signs its checkpoints with embedded signatures: use Signer(embed=True).")
    if trust is not None and not isinstance(trust, Trust):
        raise TypeError(f"`trust` must be a zipsave.Trust or None, got {type(trust).__name__}.")
    return signer, trust
