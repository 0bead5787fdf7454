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
        obj.__dict__["_zipsave_init_args"] = (args, kwargs)
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
