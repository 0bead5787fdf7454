"""The glob rules of ``exclude``/``include`` patterns: the option as a list of patterns, which
names a pattern covers, and the patterns addressed to a component folder."""

from __future__ import annotations

import fnmatch
from typing import Any, Iterable

from ..exceptions import UsageError

__all__ = ["flat", "matches", "nested", "pattern_list"]


def pattern_list(patterns: Any, option: str) -> list[str]:
    """``exclude=``/``include=`` as a verb was given them, as a list: one name or pattern may be
    given as a string (``list("*.optimizer")`` would be eleven one-letter patterns, ``*`` among
    them).

    Raises
    ------
    UsageError
        Neither a string nor an iterable of strings (a ``TypeError``).
    """
    if patterns is None:
        return []
    if isinstance(patterns, str):
        return [patterns]
    wanted = f"{option} must be a name or glob pattern, or a list of them, such as ['policy.optimizer', 'lr_*']"
    try:
        out = list(patterns)
    except TypeError:
        raise UsageError(f"{wanted}; found {patterns!r} ({type(patterns).__name__}).") from None
    for p in out:
        if not isinstance(p, str):
            raise UsageError(f"{wanted}; found {p!r} ({type(p).__name__}) among them.")
    return out


def matches(name: str, patterns: Iterable[str]) -> bool:
    """``name`` matches a glob of ``patterns``, or lies below one: ``nets`` covers ``nets.pi``
    and ``agents`` covers ``agents/0``."""
    return any(
        fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, p + ".*") or fnmatch.fnmatchcase(name, p + "/*")
        for p in patterns
    )


def nested(patterns: Iterable[str] | None, prefix: str) -> list[str]:
    """Exclude/include patterns addressed to a component: ``"learner/opt"`` -> ``"opt"``.

    A pattern that starts with ``*`` (``"*.optimizer"``) applies at every depth, as
    fnmatch's ``*`` also matches ``/``.
    """
    out = []
    for p in patterns or ():
        if p.startswith(prefix + "/"):
            out.append(p[len(prefix) + 1 :])
        elif p.startswith("*"):
            out.append(p)
    return out


def flat(patterns: list[str]) -> list[str]:
    return [p for p in patterns if "/" not in p]
