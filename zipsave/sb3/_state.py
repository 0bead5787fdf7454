"""The state of ``zipsave.sb3.install()``: its options, and SB3's own methods it replaced."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ORIGINALS", "Options", "current_options", "original", "set_options"]


@dataclasses.dataclass(frozen=True)
class Options:
    """The load rules every SB3 load follows while zipsave is installed."""

    allow_pickle: bool = False
    trusted: tuple[str, ...] = ()
    strict: bool = False
    #: The :class:`~zipsave.Limits` of every load (``None``: the defaults).
    limits: Any = None
    trust: Any = None  # a zipsave.Trust: every archive's signature is checked first


#: (class, attribute) -> SB3's own object, for each class attribute install() replaced.
ORIGINALS: dict[tuple[type, str], Any] = {}

_options: Options | None = None


def current_options() -> Options | None:
    """The options of the running installation; ``None`` when zipsave is not installed."""
    return _options


def set_options(options: Options | None) -> None:
    """Record the installation's options (``None``: uninstalled)."""
    global _options
    _options = options


def original(owner: type, attr: str) -> Any:
    """SB3's own ``owner.attr`` as it was before install()."""
    return ORIGINALS[(owner, attr)]
