"""What ``zipsave.inspect`` reports: frozen records of an archive's members, ``data`` keys, tensors
and components, with text and notebook (HTML) forms."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .. import _format
from .._printable import visible, visible_html

__all__ = [
    "ArchiveInfo",
    "ArchiveMember",
    "ComponentInfo",
    "DataEntry",
    "TensorInfo",
    "format_shape",
    "shorten",
]

_PREVIEW = 60


@dataclasses.dataclass(frozen=True)
class ArchiveMember:
    """One zip member.

    Attributes
    ----------
    name
        The member name, e.g. ``"policy.pth"`` or ``"learner/data"``.
    size
        Uncompressed size in bytes.
    compressed_size
        Size in the file.
    compression
        ``"stored"`` or ``"deflated"``.
    sha256
        The digest ``manifest.json`` records for it, or ``None``.
    """

    name: str
    size: int
    compressed_size: int
    compression: str
    sha256: str | None


@dataclasses.dataclass(frozen=True)
class DataEntry:
    """One key of a ``data`` member, described without decoding it.

    Attributes
    ----------
    component
        The component folder holding the ``data`` member (``""`` for the top level).
    key
        The key.
    type
        The saved ``":type:"`` hint without SB3's ``<class '...'>`` wrapping, or the JSON
        type (``"float"``, ``"list"``, ...) of a value stored as plain JSON.
    form
        ``"json"`` (stored as is), ``"native"`` (zipsave's pickle-free form) or ``"pickle"``
        (only ``":serialized:"``, or a native form holding a pickled part).
    summary
        A short, readable description of the value.
    globals
        Every global that decoding would import: from the pickle's opcodes (never executed)
        and from import paths in the native form.
    untrusted
        The subset of ``globals`` that the default :doc:`trust policy <security>` refuses.
    """

    component: str
    key: str
    type: str
    form: str
    summary: str
    globals: tuple[str, ...] = ()
    untrusted: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The address :func:`zipsave.read` accepts for this key."""
        return _format.join(self.component, self.key)

    @property
    def needs_pickle(self) -> bool:
        """True when loading it runs the (restricted) unpickler."""
        return self.form == "pickle"

    @property
    def trusted(self) -> bool:
        """True when the default policy admits every global it needs."""
        return not self.untrusted


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One tensor of a ``.pth`` member, from its metadata only.

    Attributes
    ----------
    member
        The ``.pth`` member, e.g. ``"policy.optimizer.pth"``.
    key
        Its path inside the saved object, parts joined with dots (``"0.weight"``,
        ``"state.0.exp_avg"``).
    dtype
        The torch dtype without the ``torch.`` prefix.
    shape
        The shape.
    nbytes
        Bytes of tensor data.
    """

    member: str
    key: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def name(self) -> str:
        """The address :func:`zipsave.read` accepts for this tensor (``"policy/0.weight"``)."""
        return f"{self.member[: -len(_format.PTH_SUFFIX)]}/{self.key}"


@dataclasses.dataclass(frozen=True)
class ComponentInfo:
    """A folder with its own ``data`` member: the top level (``""``) or a nested component.

    Attributes
    ----------
    name
        The folder, e.g. ``"learner/module"``; ``""`` for the top level.
    cls
        The class import path recorded in its ``init.json``, or ``None``.
    """

    name: str
    cls: str | None


@dataclasses.dataclass(frozen=True, repr=False)
class ArchiveInfo:
    """What :func:`inspect` found in an archive. Prints as text, renders as a table in Jupyter.

    Attributes
    ----------
    archive
        The archive's path (or the name of the file object).
    layout
        ``"zipsave"`` (has ``_zipsave_version``), ``"sb3"`` (has
        ``_stable_baselines3_version``) or ``"unknown"``.
    zipsave_version
        The package version in ``_zipsave_version`` (``None`` without one).
    format_version
        The archive format version in ``_zipsave_version``.
    sb3_version
        The version in ``_stable_baselines3_version``.
    system_info
        The saved ``system_info.txt``, parsed.
    members
        Every member in archive order.
    components
        Folders holding their own ``data`` (the top level first).
    data
        Every ``data`` key of every component.
    tensors
        Every tensor of every ``.pth`` member, in file order.
    manifest_digest
        SHA-256 of ``manifest.json``: one identifier for the whole saved state.
    notes
        Anything that could not be listed, and members whose zip directory entry disagrees
        with ``manifest.json``. Run ``zipsave verify`` for a full hash check.
    verified
        ``None`` unless inspected with ``verify=True``; then whether every member's bytes
        and every tensor record matched its checksum (problems are listed in ``notes``).
    signature
        The archive's signature in one sentence: who signed it, when inspected with
        ``trust=`` (see :doc:`signing`); else where a signature was found, not checked;
        ``None`` when it has none.
    """

    archive: str
    layout: str
    zipsave_version: str | None
    format_version: int | None
    sb3_version: str | None
    system_info: dict[str, str]
    members: tuple[ArchiveMember, ...]
    components: tuple[ComponentInfo, ...]
    data: tuple[DataEntry, ...]
    tensors: tuple[TensorInfo, ...]
    manifest_digest: str | None
    notes: tuple[str, ...]
    verified: bool | None = None
    signature: str | None = None

    @property
    def total_size(self) -> int:
        """Sum of the members' uncompressed sizes."""
        return sum(m.size for m in self.members)

    @property
    def pickled(self) -> tuple[DataEntry, ...]:
        """The ``data`` entries whose loading needs the unpickler."""
        return tuple(e for e in self.data if e.needs_pickle)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``zipsave inspect --json`` prints)."""
        out = dataclasses.asdict(self)
        for entry, record in zip(self.data, out["data"]):
            record.update(name=entry.name, needs_pickle=entry.needs_pickle, trusted=entry.trusted)
        for tensor, record in zip(self.tensors, out["tensors"]):
            record["name"] = tensor.name
        return out

    # -- text ------------------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [self._headline()]
        if self.manifest_digest:
            lines.append(f"manifest sha256: {self.manifest_digest}")
        if self.signature:
            lines.append(f"signature: {self.signature}")
        if self.system_info:
            lines.append("")
            lines.append("saved with")
            lines += [f"  {visible(key)}: {visible(value)}" for key, value in self.system_info.items()]
        lines += ["", "members"]
        width = max((len(_size(m.size)) for m in self.members), default=1)
        lines += [f"  {_size(m.size):>{width}}  {m.compression:<8}  {visible(m.name)}" for m in self.members]
        if len(self.components) > 1 or (self.components and self.components[0].cls):
            lines += ["", "components"]
            for comp in self.components:
                depth = comp.name.count("/") + 1 if comp.name else 0
                label = visible(comp.name) or "(top level)"
                lines.append(f"  {'  ' * depth}{label}" + (f"  [{visible(comp.cls)}]" if comp.cls else ""))
        if self.data:
            pickled = len(self.pickled)
            lines += ["", f"data ({len(self.data)} keys, {pickled} need{'s' if pickled == 1 else ''} pickle)"]
            rows = [
                (visible(e.name), visible(shorten(e.type, 40)), e.form, visible(_entry_detail(e))) for e in self.data
            ]
            lines += _columns(rows)
        if self.tensors:
            total = sum(t.nbytes for t in self.tensors)
            lines += ["", f"tensors ({len(self.tensors)}, {_size(total)})"]
            rows = [(visible(t.name), visible(t.dtype), format_shape(t.shape), _size(t.nbytes)) for t in self.tensors]
            lines += _columns(rows)
        if self.verified is not None:
            lines += [
                "",
                "verified: every member and tensor record matches its checksum"
                if self.verified
                else "verification FAILED: see the notes",
            ]
        if self.notes:
            lines += ["", "notes"]
            lines += [f"  - {visible(note)}" for note in self.notes]
        return "\n".join(lines)

    __repr__ = __str__

    def _headline(self) -> str:
        if self.layout == "zipsave":
            kind = f"zipsave archive (format {self.format_version}, zipsave {visible(self.zipsave_version)})"
        elif self.layout == "sb3":
            kind = f"Stable-Baselines3 archive (SB3 {visible(self.sb3_version)})"
        else:
            kind = "zip archive (no version member)"
        return f"{visible(self.archive)}: {kind}, {len(self.members)} members, {_size(self.total_size)}"

    # -- HTML ------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        esc = visible_html
        parts = [f"<div class='zipsave-archive-info'><p><b>{esc(self._headline())}</b>"]
        if self.manifest_digest:
            parts.append(f"<br><small>manifest sha256 <code>{esc(self.manifest_digest)}</code></small>")
        if self.signature:
            parts.append(f"<br><small>signature: {esc(self.signature)}</small>")
        parts.append("</p>")
        if self.notes:
            parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in self.notes) + "</ul>")
        table = _html_table
        if self.data:
            data = [(e.name, e.type, e.form, e.summary, _imports(e)) for e in self.data]
            parts.append(table(f"data ({len(self.data)} keys)", ("key", "type", "form", "value", "imports"), data))
        if self.tensors:
            tensors = [(t.name, t.dtype, format_shape(t.shape), _size(t.nbytes)) for t in self.tensors]
            parts.append(table(f"tensors ({len(self.tensors)})", ("name", "dtype", "shape", "size"), tensors))
        if len(self.components) > 1:
            components = [(c.name or "(top level)", c.cls or "") for c in self.components]
            parts.append(table("components", ("folder", "class"), components))
        members = [(m.name, _size(m.size), m.compression, (m.sha256 or "")[:16]) for m in self.members]
        parts.append(table(f"members ({len(self.members)})", ("name", "size", "compression", "sha256"), members))
        if self.system_info:
            parts.append(_html_table("saved with", ("", ""), list(self.system_info.items())))
        parts.append("</div>")
        return "".join(parts)


# -- formatting helpers ------------------------------------------------------------------------
def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


def format_shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def shorten(text: str, limit: int = _PREVIEW) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _imports(entry: DataEntry) -> str:
    return ", ".join(g + (" (untrusted)" if g in entry.untrusted else "") for g in entry.globals)


def _entry_detail(entry: DataEntry) -> str:
    return f"{entry.summary}; imports {_imports(entry)}" if entry.globals else entry.summary


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]


def _html_table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    esc = visible_html
    cells = "".join(
        "<tr>" + "".join(f"<td style='text-align:left'>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    header = (
        "" if not any(head) else "<tr>" + "".join(f"<th style='text-align:left'>{esc(h)}</th>" for h in head) + "</tr>"
    )
    return f"<details open><summary><b>{esc(title)}</b></summary><table>{header}{cells}</table></details>"


# -- describing data values --------------------------------------------------------------------
