"""The glob rules of ``exclude``/``include`` patterns: which names a pattern covers, and the
patterns addressed to a component folder."""

from __future__ import annotations

import fnmatch
from typing import Iterable

__all__ = ["flat", "matches", "nested"]


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
