"""What ``EnvState`` sets in live environments, checked against what they hold before anything
is set: the attributes of a layer keep their kinds, a statistics object (gymnasium's
``RunningMeanStd``) is given only the attributes it has, each of its shape and kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..exceptions import ParameterMismatchError

__all__ = ["check_env_entry"]


def _kind(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype}, shape {value.shape}"
    return f"a {type(value).__name__}"


def _number(value: Any) -> bool:
    """A number, or a 0-d numeric array (statistics turn one into the other as they update)."""
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and value.dtype.kind in "iufc"
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _misfit(live: Any, saved: Any, *, shape: bool) -> str | None:
    """Why ``saved`` cannot replace ``live``, or ``None``: an array stays an array of numbers
    of its kind (of its shape, with ``shape``), never of Python objects; a flag a flag; a
    number a number; a text a text. ``None`` on either side (an environment not reset yet)
    and other values are the environment's to hold."""
    if isinstance(saved, np.ndarray) and saved.dtype.hasobject:
        return "an array of Python objects, which EnvState never stores"
    if live is None or saved is None or (_number(live) and _number(saved)):
        return None
    if isinstance(live, np.ndarray):
        fits = isinstance(saved, np.ndarray) and saved.dtype.kind == live.dtype.kind
        if fits and (not shape or saved.shape == live.shape):
            return None
        return f"{_kind(saved)} where it holds {_kind(live)}"
    if isinstance(live, (bool, np.bool_)):
        return None if isinstance(saved, (bool, np.bool_)) else f"{_kind(saved)} where it holds a flag"
    if _number(live):
        return f"{_kind(saved)} where it holds a number"
    if isinstance(live, str):
        return None if isinstance(saved, str) else f"{_kind(saved)} where it holds a text"
    return None


def _converted(live_of: Callable[[Any], Any], value: Any, where: str) -> Any:
    try:
        return live_of(value)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise ParameterMismatchError(
            f"the saved environment state's `{where}` cannot be rebuilt ({type(err).__name__}: {err}).", key=where
        ) from err


def check_env_entry(layer: Any, entry: dict[str, Any], name: str, live_of: Callable[[Any], Any]) -> None:
    """Refuse, before any layer is changed, what ``entry`` (one layer's saved state) would set
    in ``layer`` that does not fit it; ``live_of`` rebuilds a stored value. The first step
    failed on such values (a method of ``RunningMeanStd`` replaced by a number, statistics of
    seven numbers for four observations, an ``_elapsed_steps`` of text, arrays of objects)."""
    problems: list[tuple[str, str]] = []
    for key, value in (entry.get("attrs") or {}).items():
        where = f"{name}.{key}"
        problem = _misfit(vars(layer).get(key), _converted(live_of, value, where), shape=False)
        if problem is not None:
            problems.append((where, problem))
    for key, saved_attrs in (entry.get("objects") or {}).items():
        held = vars(vars(layer)[key])
        if not isinstance(saved_attrs, dict):
            problems.append((f"{name}.{key}", f"{_kind(saved_attrs)} where its attributes should be"))
            continue
        for attr, value in saved_attrs.items():
            where = f"{name}.{key}.{attr}"
            if attr not in held:
                problems.append((where, f"a name the {type(vars(layer)[key]).__name__} there does not hold"))
                continue
            problem = _misfit(held[attr], _converted(live_of, value, where), shape=True)
            if problem is not None:
                problems.append((where, problem))
    if problems:
        listed = "; ".join(f"`{where}`: {what}" for where, what in problems[:5])
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise ParameterMismatchError(
            f"the saved environment state does not fit these environments: {listed}{more}.",
            key=problems[0][0],
            hint="Build the environments as the saved run did (same wrappers, same arguments); EnvState writes "
            "none such.",
        )
