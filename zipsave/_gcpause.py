"""The cyclic garbage collector paused for the length of a public call.

A first call in a fresh process imports zipsave's modules, and their allocations set off the
collector's passes over what ``import torch`` left in its young generations: 2-3 ms of a first
load here, whichever call happens to allocate next pays them. Paused, those passes wait for the
caller's next allocation after the call, as they do after ``torch.load``, and come fewer (one
pass over what the call allocated instead of one every 700 allocations). A load's own garbage is
bounded by its limits, so nothing piles up for long.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["collector_paused", "pause", "resume"]

_F = TypeVar("_F", bound=Callable[..., Any])

_lock = threading.Lock()
_depth = 0  # calls in progress, in every thread
_resume = False  # whether the collector ran when the outermost call began


def pause() -> None:
    """Pause automatic collection until the matching :func:`resume` (pauses nest, in every
    thread: the last :func:`resume` starts the collector again if it ran at the first
    :func:`pause`). An explicit ``gc.collect()`` still collects. Call :func:`resume` in a
    ``finally``; nothing may allocate between the two calls and the return to the caller that
    the call does not need, or the collection it sets off is the call's again."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1


def resume() -> None:
    """End one :func:`pause`."""
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0 and _resume:
            gc.enable()


def collector_paused(func: _F) -> _F:
    """Decorate a public call to run with the collector paused (:func:`pause`)."""

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        pause()
        try:
            return func(*args, **kwargs)
        finally:
            resume()

    return call  # type: ignore[return-value]
