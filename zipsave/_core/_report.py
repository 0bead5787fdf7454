"""What a load skipped or found suspicious, for the caller and for a notebook."""

from __future__ import annotations

import dataclasses
from typing import Any

from .._printable import visible, visible_html
from .._record import Record
from ..exceptions import SkippedEntry

__all__ = ["LoadReport"]


class _Factory:
    """The default of a field built by its ``default_factory`` (shown as dataclass shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY: Any = _Factory()


@dataclasses.dataclass(init=False, repr=False, eq=False)
class LoadReport(Record):
    """What a load skipped or found suspicious. Pass one as ``report=`` to collect it;
    a loaded :class:`~zipsave.Saveable` also keeps it as ``model.zipsave_report``.

    ``archive`` names the archive; ``skipped`` holds a :class:`~zipsave.SkippedEntry` for each
    entry or member left out (``ok`` is true when there is none); ``notes`` holds what loaded
    but deserves a look, one sentence each (a hand-edited ``data`` member, an episode of a
    replay buffer that the load truncated); ``signature`` is the
    :class:`~zipsave.SignatureInfo` of the signature a load with ``trust=`` checked (who signed),
    ``None`` otherwise."""

    archive: str | None = None
    skipped: list[SkippedEntry] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    signature: Any = None

    # What `@dataclass` generates, written out: the decorator compiles them from source at
    # import, a cost of every first load in a fresh process; it still makes this a dataclass
    # (`fields()`, `replace()`, `asdict()`). Not frozen: a load appends to the lists.
    def __init__(
        self,
        archive: str | None = None,
        skipped: list[SkippedEntry] = _FACTORY,
        notes: list[str] = _FACTORY,
        signature: Any = None,
    ) -> None:
        self.archive = archive
        self.skipped = [] if skipped is _FACTORY else skipped
        self.notes = [] if notes is _FACTORY else notes
        self.signature = signature

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    @property
    def ok(self) -> bool:
        return not self.skipped

    def __str__(self) -> str:
        if not self.skipped and not self.notes:
            return f"LoadReport({self.archive!r}): everything loaded"
        lines = [f"LoadReport({self.archive!r}): {len(self.skipped)} skipped"]
        lines += [f"  - skipped {entry}" for entry in self.skipped]  # SkippedEntry is visible already
        lines += [f"  - note: {visible(note)}" for note in self.notes]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's text display
        printer.text(str(self))

    def _repr_html_(self) -> str:

        cell = "<td style='text-align:left'>{}</td>"
        rows = "".join(
            "<tr>"
            + "".join(cell.format(visible_html(v)) for v in (e.member, e.key or "", e.type_hint or "", e.cause))
            + "</tr>"
            for e in self.skipped
        )
        notes = "".join(f"<li>{visible_html(n)}</li>" for n in self.notes)
        status = f"{len(self.skipped)} skipped" if self.skipped else "everything loaded"
        head = visible_html(f"{self.archive}: {status}")
        header = "".join(f"<th style='text-align:left'>{h}</th>" for h in ("member", "key", "type", "cause"))
        table = f"<table><tr>{header}</tr>{rows}</table>" if rows else ""
        return f"<div><b>{head}</b>{table}{f'<ul>{notes}</ul>' if notes else ''}</div>"
