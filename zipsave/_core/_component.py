"""``Component``: the base the core recognises as a savable unit of its own (a folder in the
archive, built from its recorded constructor arguments); ``zipsave.Saveable`` extends it with
the user-facing methods."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["Component"]


class Component:
    """Records its constructor arguments, so the core can rebuild it from ``init.json``."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__new__(cls)
        # Recorded here rather than in __init__ so subclasses need not call super().__init__.
        # Dicts and lists are copied: a constructor that pops from its `policy_kwargs` would
        # otherwise leave them recorded empty, and a load would build with the defaults.
        obj.__dict__["_zipsave_init_args"] = (
            tuple(_as_called(a) for a in args),
            {k: _as_called(v) for k, v in kwargs.items()},
        )
        return obj

    def _zipsave_init_record(self) -> dict[str, Any]:
        """``{"class", "args"}``, plus ``"positional"`` when the constructor took values that
        only go in by position (positional-only parameters, ``*args``): ``[[name, value]]`` in
        call order, the name ``"*<param>"`` for the values of ``*<param>``."""
        cls = type(self)
        args, kwargs = self.__dict__.get("_zipsave_init_args", ((), {}))
        try:
            params = inspect.signature(cls.__init__).parameters
            bound = inspect.signature(cls.__init__).bind(self, *args, **kwargs)
        except (TypeError, ValueError):
            bound = None
        recorded: dict[str, Any] = {}
        positional: list[tuple[str, Any]] = []
        if bound is not None:
            for name, value in list(bound.arguments.items())[1:]:
                kind = params[name].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    recorded.update(value)
                elif kind is inspect.Parameter.VAR_POSITIONAL:
                    positional += [(f"*{name}", item) for item in value]
                elif kind is inspect.Parameter.POSITIONAL_ONLY:
                    positional.append((name, value))
                else:
                    recorded[name] = value
        else:
            recorded = dict(kwargs)
            positional = [("*args", item) for item in args]
        record: dict[str, Any] = {"class": f"{cls.__module__}:{cls.__qualname__}", "args": recorded}
        if positional:
            record["positional"] = positional
        return record


def _as_called(value: Any, depth: int = 0) -> Any:
    """A copy of the plain dicts and lists in a constructor argument (their items themselves
    are not copied), so what the constructor does to them later does not change the record."""
    if depth > 8:
        return value
    if type(value) is dict:
        return {k: _as_called(v, depth + 1) for k, v in value.items()}
    if type(value) is list:
        return [_as_called(v, depth + 1) for v in value]
    return value
