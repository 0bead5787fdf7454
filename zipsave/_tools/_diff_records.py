"""What ``zipsave diff`` reports: a frozen record of what differs between two archives, with its
text form (every name from an archive made visible) and its JSON form."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._printable import visible
from .._record import Record, record

__all__ = ["ArchiveDiff", "Change"]

# Both are what `@dataclass(frozen=True)` makes of them, with `__init__`, `__repr__`, `__eq__`
# and `__hash__` written out (the decorator compiles those from source, about 0.5 ms a class of
# a first diff in a fresh process); each is still a frozen dataclass. Equality holds only within
# the exact class, on the fields in order; the hash is the hash of those fields.


@record(frozen=True, init=False, repr=False, eq=False)
class Change(Record):
    """One changed entry: a ``data`` key, a tensor or a plain state-dict value.

    ``old``/``new`` describe the value on each side (text); ``max_abs_diff`` is set for
    tensors of the same shape.
    """

    name: str
    old: str
    new: str
    max_abs_diff: float | None = None

    def __init__(self, name: str, old: str, new: str, max_abs_diff: float | None = None) -> None:
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "old", old)
        set_(self, "new", new)
        set_(self, "max_abs_diff", max_abs_diff)


@record(frozen=True, init=False, repr=False, eq=False)
class ArchiveDiff(Record):
    """What differs between archive ``a`` and archive ``b``."""

    a: str
    b: str
    data_changed: tuple[Change, ...]
    data_added: tuple[str, ...]
    data_removed: tuple[str, ...]
    tensors_changed: tuple[Change, ...]
    tensors_added: tuple[str, ...]
    tensors_removed: tuple[str, ...]
    tensors_same: int
    data_stored_differently: tuple[str, ...] = ()
    #: What was noticed on the way: a ``data`` member edited after saving (compared as it is now).
    notes: tuple[str, ...] = ()

    def __init__(
        self,
        a: str,
        b: str,
        data_changed: tuple[Change, ...],
        data_added: tuple[str, ...],
        data_removed: tuple[str, ...],
        tensors_changed: tuple[Change, ...],
        tensors_added: tuple[str, ...],
        tensors_removed: tuple[str, ...],
        tensors_same: int,
        data_stored_differently: tuple[str, ...] = (),
        notes: tuple[str, ...] = (),
    ) -> None:
        set_ = object.__setattr__
        set_(self, "a", a)
        set_(self, "b", b)
        set_(self, "data_changed", data_changed)
        set_(self, "data_added", data_added)
        set_(self, "data_removed", data_removed)
        set_(self, "tensors_changed", tensors_changed)
        set_(self, "tensors_added", tensors_added)
        set_(self, "tensors_removed", tensors_removed)
        set_(self, "tensors_same", tensors_same)
        set_(self, "data_stored_differently", data_stored_differently)
        set_(self, "notes", notes)

    @property
    def identical(self) -> bool:
        return not (
            self.data_changed
            or self.data_added
            or self.data_removed
            or self.tensors_changed
            or self.tensors_added
            or self.tensors_removed
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for change in out["data_changed"] + out["tensors_changed"]:
            value = change["max_abs_diff"]
            if value is not None and not math.isfinite(value):
                change["max_abs_diff"] = str(value)  # JSON has no NaN/Infinity
        out["identical"] = self.identical
        return out

    def __str__(self) -> str:
        v = visible
        lines = [f"--- {v(self.a)}", f"+++ {v(self.b)}"]
        for change in self.data_changed:
            lines.append(f"~ data    {v(change.name)}: {v(change.old)} -> {v(change.new)}")
        lines += [f"+ data    {v(name)}" for name in self.data_added]
        lines += [f"- data    {v(name)}" for name in self.data_removed]
        lines += [f"= data    {v(name)}: same value, stored differently" for name in self.data_stored_differently]
        for change in self.tensors_changed:
            if change.max_abs_diff is not None:
                detail = f"max |a-b| = {change.max_abs_diff:.6g}"
                if change.old != change.new:
                    detail = f"{v(change.old)} -> {v(change.new)}, {detail}"
            else:
                detail = f"{v(change.old)} -> {v(change.new)}"
            lines.append(f"~ tensor  {v(change.name)}: {detail}")
        lines += [f"+ tensor  {v(name)}" for name in self.tensors_added]
        lines += [f"- tensor  {v(name)}" for name in self.tensors_removed]
        if self.identical and self.data_stored_differently:
            lines.append(
                f"same values: {len(self.data_stored_differently)} data keys stored differently, "
                f"{self.tensors_same} equal tensors"
            )
        elif self.identical:
            lines.append(f"identical: same data and {self.tensors_same} equal tensors")
        else:
            data = len(self.data_changed) + len(self.data_added) + len(self.data_removed)
            tensors = len(self.tensors_changed) + len(self.tensors_added) + len(self.tensors_removed)
            lines.append(f"{data} data keys and {tensors} tensor entries differ; {self.tensors_same} tensors equal")
        lines += [f"  note: {v(note)}" for note in self.notes]
        return "\n".join(lines)
