"""What ``@dataclass(frozen=True)`` compiles from source at import for a record (its ``repr``,
``==`` and ``hash``), written once. A record decorated ``@dataclass(init=False, repr=False,
eq=False)`` lists its fields in ``__match_args__`` (the decorator sets it) and inherits them from
:class:`Record`; only its ``__init__`` is its own. A first call in a fresh process builds a
dozen such records, and compiling their methods cost it milliseconds."""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["Record"]


class Record:
    """``repr`` (``Name(field=value, ...)``, qualified name, recursion guarded), ``==`` (the
    same class, fields in order, else ``NotImplemented``) and ``hash`` (of the fields), as the
    dataclass decorator generates them."""

    __slots__ = ()
    __match_args__: tuple[str, ...]

    def field_values(self) -> tuple[Any, ...]:
        """The fields in order, as the generated ``__eq__`` and ``__hash__`` compare them."""
        return tuple(getattr(self, name) for name in self.__match_args__)

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{self.__class__.__qualname__}({fields})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self.field_values() == other.field_values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.field_values())
