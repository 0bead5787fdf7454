"""How a ``CheckpointManager`` shows itself: one line of text, and a table in notebooks."""

from __future__ import annotations

import time
from typing import Any

from .._printable import visible, visible_html
from ._index import Checkpoint, format_metric, format_size

__all__ = ["html", "table", "text"]


def _policy(manager: Any) -> str:
    parts = []
    for name in ("keep_last", "every_steps", "every_seconds"):
        value = getattr(manager, name)
        if value is not None:
            parts.append(f"{name}={value}")
    if manager.keep_best is not None:
        metric, mode, count = manager.keep_best
        parts.append(f"keep_best=({metric!r}, {mode!r}{', ' + str(count) if count != 1 else ''})")
    return ", ".join(parts)


def text(manager: Any) -> str:
    checkpoints = manager.list()
    latest = f", latest step {checkpoints[-1].step}" if checkpoints else ""
    policy = _policy(manager)
    return (
        f"<CheckpointManager {manager.directory!r}: {len(checkpoints)} checkpoint"
        f"{'s' if len(checkpoints) != 1 else ''}{latest}{'; ' + policy if policy else ''}>"
    )


def table(checkpoints: list[Checkpoint]) -> list[list[str]]:
    """Rows of step, time (UTC), size and metrics, with a header row; every cell visible
    (metric names and string values come from the index, a file anyone may write)."""
    metric_names: list[str] = []
    for c in checkpoints:
        metric_names += [k for k in c.metrics if k not in metric_names]
    rows = [["step", "time (UTC)", "size", *metric_names]]
    for c in checkpoints:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.time))
        values = [format_metric(c.metrics[k]) if k in c.metrics else "" for k in metric_names]
        rows.append([str(c.step), when, format_size(c.size), *values])
    return [[visible(cell) for cell in row] for row in rows]


def html(manager: Any) -> str:
    checkpoints = manager.list()
    best = None
    if manager.keep_best is not None:
        found = manager.best()
        best = found.step if found else None
    rows = table(checkpoints)
    marks = manager.keep_best is not None
    head = "".join(f"<th>{visible_html(h)}</th>" for h in rows[0]) + ("<th></th>" if marks else "")
    body = "".join(
        "<tr>"
        + "".join(f"<td>{visible_html(v)}</td>" for v in row)
        + (f"<td>{'best' if best == c.step else ''}</td>" if marks else "")
        + "</tr>"
        for c, row in zip(checkpoints, rows[1:])
    )
    policy = visible_html(_policy(manager))
    return (
        f"<div><b>CheckpointManager</b> <code>{visible_html(manager.directory)}</code>"
        f"{' (' + policy + ')' if policy else ''}<br>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )
