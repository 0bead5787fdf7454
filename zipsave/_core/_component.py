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
        cls = type(self)
        args, kwargs = self.__dict__.get("_zipsave_init_args", ((), {}))
        try:
            bound = inspect.signature(cls.__init__).bind(self, *args, **kwargs)
        except TypeError:
            bound = None
        recorded: dict[str, Any] = {}
        if bound is not None:
            for name, value in list(bound.arguments.items())[1:]:
                kind = inspect.signature(cls.__init__).parameters[name].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    recorded.update(value)
                elif kind is not inspect.Parameter.VAR_POSITIONAL:
                    recorded[name] = value
        else:
            recorded = dict(kwargs)
        return {"class": f"{cls.__module__}:{cls.__qualname__}", "args": recorded}
