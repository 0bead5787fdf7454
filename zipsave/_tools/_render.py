"""The text, notebook (HTML) and JSON forms of what ``zipsave.inspect`` reports (the records
themselves are in ``_records``), every name from an archive made visible."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._printable import visible, visible_html

if TYPE_CHECKING:
    from ._records import ArchiveInfo, DataEntry

__all__ = ["format_shape", "info_dict", "info_html", "info_text", "shorten"]

_PREVIEW = 60


def info_dict(info: ArchiveInfo) -> dict[str, Any]:
    """A JSON-ready dict (what ``zipsave inspect --json`` prints)."""
    out = dataclasses.asdict(info)
    for entry, record in zip(info.data, out["data"]):
        record.update(name=entry.name, needs_pickle=entry.needs_pickle, trusted=entry.trusted)
    for tensor, record in zip(info.tensors, out["tensors"]):
        record["name"] = tensor.name
    return out


# -- text ------------------------------------------------------------------------------------
def info_text(info: ArchiveInfo) -> str:
    lines = [_headline(info)]
    if info.manifest_digest:
        lines.append(f"manifest sha256: {info.manifest_digest}")
    if info.signature:
        lines.append(f"signature: {info.signature}")
    if info.system_info:
        lines.append("")
        lines.append("saved with")
        lines += [f"  {visible(key)}: {visible(value)}" for key, value in info.system_info.items()]
    lines += ["", "members"]
    width = max((len(_size(m.size)) for m in info.members), default=1)
    lines += [f"  {_size(m.size):>{width}}  {m.compression:<8}  {visible(m.name)}" for m in info.members]
    if len(info.components) > 1 or (info.components and info.components[0].cls):
        lines += ["", "components"]
        for comp in info.components:
            depth = comp.name.count("/") + 1 if comp.name else 0
            label = visible(comp.name) or "(top level)"
            lines.append(f"  {'  ' * depth}{label}" + (f"  [{visible(comp.cls)}]" if comp.cls else ""))
    if info.data:
        pickled = len(info.pickled)
        lines += ["", f"data ({len(info.data)} keys, {pickled} need{'s' if pickled == 1 else ''} pickle)"]
        rows = [(visible(e.name), visible(shorten(e.type, 40)), e.form, visible(_entry_detail(e))) for e in info.data]
        lines += _columns(rows)
    if info.tensors:
        total = sum(t.nbytes for t in info.tensors)
        lines += ["", f"tensors ({len(info.tensors)}, {_size(total)})"]
        rows = [(visible(t.name), visible(t.dtype), format_shape(t.shape), _size(t.nbytes)) for t in info.tensors]
        lines += _columns(rows)
    if info.verified is not None:
        lines += [
            "",
            "verified: every member and tensor record matches its checksum"
            if info.verified
            else "verification FAILED: see the notes",
        ]
    if info.notes:
        lines += ["", "notes"]
        lines += [f"  - {visible(note)}" for note in info.notes]
    return "\n".join(lines)


def _headline(info: ArchiveInfo) -> str:
    if info.layout == "zipsave":
        kind = f"zipsave archive (format {info.format_version}, zipsave {visible(info.zipsave_version)})"
    elif info.layout == "sb3":
        kind = f"Stable-Baselines3 archive (SB3 {visible(info.sb3_version)})"
    elif _torch_save_file(info):
        kind = "a torch.save file, not a model archive"
    else:
        kind = "zip archive (no version member)"
    return f"{visible(info.archive)}: {kind}, {len(info.members)} members, {_size(info.total_size)}"


def _torch_save_file(info: ArchiveInfo) -> bool:
    """Whether the archive is what ``torch.save`` writes (one ``<name>/data.pkl``, no ``data``),
    as a load of it says (``_core._folders``)."""
    names = [m.name for m in info.members]
    return "data" not in names and any(n == "data.pkl" or n.endswith("/data.pkl") for n in names)


# -- HTML ------------------------------------------------------------------------------------
def info_html(info: ArchiveInfo) -> str:
    esc = visible_html
    parts = [f"<div class='zipsave-archive-info'><p><b>{esc(_headline(info))}</b>"]
    if info.manifest_digest:
        parts.append(f"<br><small>manifest sha256 <code>{esc(info.manifest_digest)}</code></small>")
    if info.signature:
        parts.append(f"<br><small>signature: {esc(info.signature)}</small>")
    parts.append("</p>")
    if info.notes:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in info.notes) + "</ul>")
    table = _html_table
    if info.data:
        data = [(e.name, e.type, e.form, e.summary, _imports(e)) for e in info.data]
        parts.append(table(f"data ({len(info.data)} keys)", ("key", "type", "form", "value", "imports"), data))
    if info.tensors:
        tensors = [(t.name, t.dtype, format_shape(t.shape), _size(t.nbytes)) for t in info.tensors]
        parts.append(table(f"tensors ({len(info.tensors)})", ("name", "dtype", "shape", "size"), tensors))
    if len(info.components) > 1:
        components = [(c.name or "(top level)", c.cls or "") for c in info.components]
        parts.append(table("components", ("folder", "class"), components))
    members = [(m.name, _size(m.size), m.compression, (m.sha256 or "")[:16]) for m in info.members]
    parts.append(table(f"members ({len(info.members)})", ("name", "size", "compression", "sha256"), members))
    if info.system_info:
        parts.append(_html_table("saved with", ("", ""), list(info.system_info.items())))
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
    if entry.rebuilt:  # its pickle's imports are in the JSON form; a load never runs them
        return f"{entry.summary}; a load rebuilds it without unpickling"
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
