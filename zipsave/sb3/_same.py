"""Telling an archive's values apart: comparing one with the model's own (``==`` on an archive's
value may raise, ``Decimal('sNaN') == 1`` raises ``InvalidOperation``, or answer with an array),
and naming what one is by its import path (SB3's checks of pickled noises and schedules)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["global_name", "same"]


def same(saved: Any, current: Any) -> bool:
    """Whether ``saved == current`` says plainly yes; a comparison that raises or answers with
    anything but a bool is a difference."""
    try:
        equal = saved == current
    except Exception:  # noqa: BLE001 - any failure to compare: the values differ
        return False
    return bool(equal) if isinstance(equal, (bool, np.bool_)) else False


def global_name(obj: Any) -> str:
    """``module.qualname`` of a class or a function, else of the object's class: the name the
    allowlists give it. (Pass ``type(value)`` to name an instance that is callable itself.)"""
    owner = obj if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(owner, '__module__', '')}.{getattr(owner, '__qualname__', '')}"
