"""Comparing a value read from an archive with the model's own: ``==`` on an archive's value may
raise (``Decimal('sNaN') == 1`` raises ``InvalidOperation``) or answer with an array."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["same"]


def same(saved: Any, current: Any) -> bool:
    """Whether ``saved == current`` says plainly yes; a comparison that raises or answers with
    anything but a bool is a difference."""
    try:
        equal = saved == current
    except Exception:  # noqa: BLE001 - any failure to compare: the values differ
        return False
    return bool(equal) if isinstance(equal, (bool, np.bool_)) else False
