"""Optional dependencies (fsspec for URLs, tqdm for progress bars): import them, or say
which extra to install."""

from __future__ import annotations

import importlib
from typing import Any

from .exceptions import MissingDependencyError

__all__ = ["MissingDependencyError", "require"]


def require(module: str, *, package: str | None = None, extra: str, feature: str) -> Any:
    """Import ``module`` for ``feature``, or raise :class:`MissingDependencyError` naming the
    pip extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        name = package or module.split(".")[0]
        raise MissingDependencyError(
            f"{feature} needs `{name}`, which is not installed ({err}).",
            hint=f"Install it with `pip install zipsave[{extra}]` (or `pip install {name}`).",
        ) from err
