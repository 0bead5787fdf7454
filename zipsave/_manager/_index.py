"""The index of a checkpoint directory (``zipsave-checkpoints.json``): which checkpoints are
complete, with their step, time, metrics and size; and which of them a retention policy keeps."""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import re
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from ..exceptions import CheckpointDirectoryError, EncodeError, ZipsaveWarning, caller_stacklevel

__all__ = [
    "FORMAT",
    "INDEX_NAME",
    "VERSION",
    "Checkpoint",
    "best_metric_problem",
    "best_of",
    "checkpoint_name",
    "decode_index",
    "format_metric",
    "format_size",
    "encode_index",
    "is_checkpoint_name",
    "is_temporary",
    "plain_metrics",
    "to_keep",
]

INDEX_NAME = "zipsave-checkpoints.json"
FORMAT = "zipsave-checkpoints"
VERSION = 1
_NAME = re.compile(r"^step-\d{10,}\.zip$")
_LATEST = 253402300800.0  # 10000-01-01 UTC: past it, time.gmtime fails or strftime cannot show the year
_DAMAGED_INDEX = (
    "zipsave replaces the index atomically, so it was edited or damaged on disk. Each "
    "`step-<step>.zip` is a whole archive that `zipsave.load` reads; to go on in this directory, "
    "move them aside and remove the index."
)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint of a :class:`~zipsave.CheckpointManager`.

    Attributes
    ----------
    step
        The training step it was saved at.
    time
        When ``save`` was called (seconds since the epoch, UTC).
    metrics
        The metrics passed to ``save`` (numbers and strings).
    size
        The archive's size in bytes.
    path
        The archive's path or URL; pass it to :func:`zipsave.load` or :func:`zipsave.restore`.
    """

    step: int
    time: float
    metrics: Mapping[str, Any]
    size: int
    path: str

    @property
    def name(self) -> str:
        """The archive's file name inside the directory."""
        return checkpoint_name(self.step)

    def __str__(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.time))
        metrics = " ".join(f"{k}={format_metric(v)}" for k, v in self.metrics.items())
        return f"step {self.step}  {when}  {format_size(self.size)}  {metrics}".rstrip()


def format_metric(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def format_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def checkpoint_name(step: int) -> str:
    return f"step-{step:010d}.zip"


def is_checkpoint_name(name: str) -> bool:
    return bool(_NAME.match(name))


def is_temporary(name: str) -> bool:
    """A temporary file of an interrupted archive or index write (``.<name>.<random>.zipsave-tmp``)."""
    return name.startswith(".") and name.endswith(".zipsave-tmp")


def _size(value: Any) -> int:
    """How many elements a numpy value or a tensor holds (-1: not known)."""
    numel = getattr(value, "numel", None)
    if callable(numel):
        return int(numel())
    size = getattr(value, "size", 1)
    return size if isinstance(size, int) else -1


def plain_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """Metrics as JSON values: numbers (numpy scalars, arrays and tensors of one element too),
    strings and booleans."""
    out: dict[str, Any] = {}
    for key, value in (metrics or {}).items():
        if not isinstance(key, str):
            raise EncodeError(f"metric names must be strings, found {key!r}.")
        if hasattr(value, "item") and callable(value.item) and _size(value) == 1:
            # numpy scalars, tensors, and the one-element arrays gymnasium's episode statistics
            # hold (`info["episode"]["r"]`, shape (1,))
            value = value.item()
        if isinstance(value, bool) or value is None or isinstance(value, str):
            out[key] = value
        elif isinstance(value, numbers.Integral):
            out[key] = int(value)
        elif isinstance(value, numbers.Real):
            out[key] = float(value)
        else:
            shape = f" of shape {tuple(value.shape)}" if hasattr(value, "shape") else ""
            raise EncodeError(
                f"metric `{key}` is a {type(value).__name__}{shape}; expected a number, string or bool.",
                key=key,
                hint="Pass one number, e.g. `float(values.mean())`." if shape else None,
            )
    return out


def encode_index(checkpoints: Iterable[Checkpoint]) -> bytes:
    entries = [
        {"step": c.step, "file": c.name, "time": c.time, "size": c.size, "metrics": dict(c.metrics)}
        for c in sorted(checkpoints, key=lambda c: c.step)
    ]
    return (json.dumps({"format": FORMAT, "version": VERSION, "checkpoints": entries}, indent=1) + "\n").encode()


def decode_index(raw: bytes, *, location: str, target: Any) -> list[Checkpoint]:
    """The checkpoints an index lists, oldest step first; ``target(name)`` makes each path."""
    where = f"checkpoint directory `{location}`: index `{INDEX_NAME}`"
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as err:  # RecursionError: arrays nested 100 000 deep
        what = "nested too deeply to read" if isinstance(err, RecursionError) else f"not JSON ({err})"
        raise CheckpointDirectoryError(f"{where} is {what}.", hint=_DAMAGED_INDEX) from err
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointDirectoryError(f'{where} is not a zipsave checkpoint index (no `"format": "{FORMAT}"`).')
    if doc.get("version") != VERSION:
        raise CheckpointDirectoryError(
            f"{where} has version {doc.get('version')!r}; this zipsave reads version {VERSION}.",
            hint="Upgrade zipsave.",
        )
    entries = doc.get("checkpoints") or []
    if not isinstance(entries, list):
        raise CheckpointDirectoryError(
            f"{where}: `checkpoints` is {_kind(entries)}, not an array.", hint=_DAMAGED_INDEX
        )
    out = []
    for i, entry in enumerate(entries):
        # said in the index's own terms (JSON's), by the step where it is readable
        step = entry.get("step") if isinstance(entry, dict) else None
        which = (
            f"the entry of step {step}"
            if type(step) is int and 0 <= step < 1 << 63
            else f"entry {i + 1} of `checkpoints`"
        )
        try:
            if not isinstance(entry, dict):
                raise ValueError(f"is {_kind(entry)}, where each entry is an object")
            missing = [f"`{k}`" for k in ("step", "file", "time", "size", "metrics") if k not in entry]
            if missing:
                raise ValueError(f"has no {', '.join(missing)}")
            if type(step) is not int or not 0 <= step < 1 << 63 or entry["file"] != checkpoint_name(step):
                raise ValueError(f"has step {_short(step)} and file {_short(entry['file'])}, which do not match")
            out.append(
                Checkpoint(
                    step, _time(entry["time"]), _metrics(entry["metrics"]), _count(entry["size"]), target(entry["file"])
                )
            )
        except (TypeError, ValueError, OverflowError) as err:
            raise CheckpointDirectoryError(f"{where}: {which} {err}.", hint=_DAMAGED_INDEX) from err
    return sorted(out, key=lambda c: c.step)


def _kind(value: Any) -> str:
    """A JSON value's kind, as the index's reader sees it."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    kinds = ((dict, "an object"), (list, "an array"), (str, "a string"), ((int, float), "a number"))
    return next((word for types, word in kinds if isinstance(value, types)), type(value).__name__)


def _time(value: Any) -> float:
    """A save time, checked to be one ``time.gmtime`` can show (1e308 and NaN cannot)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"has a `time` that is {_kind(value)}, not a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or not 0 <= seconds < _LATEST:
        raise ValueError(f"has a `time` of {_short(value)} seconds, not a time between 1970 and 9999")
    return seconds


def _count(value: Any) -> int:
    if type(value) is not int or not 0 <= value < 1 << 63:  # a file's size: what os.stat can say
        raise ValueError(f"has a `size` of {_short(value)}, not a count of bytes")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value)  # as the index spells it
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def _metrics(value: Any) -> dict[str, Any]:
    """The metrics of one entry: names to numbers, strings, booleans or null (what
    :func:`plain_metrics` writes), so nothing deeper is ever shown."""
    if not isinstance(value, dict):
        raise TypeError(f"has `metrics` that are {_kind(value)}, not an object of names to values")
    for key, item in value.items():
        if item is not None and not isinstance(item, (str, int, float)):  # bool is an int
            raise TypeError(
                f"has a metric {_short(key)} that is {_kind(item)}, not a number, a string, true, false or null"
            )
    return dict(value)


def best_of(checkpoints: Iterable[Checkpoint], metric: str, mode: str, count: int = 1) -> list[Checkpoint]:
    """The ``count`` best checkpoints by ``metric`` (ties: the newer wins); those without the
    metric, or with NaN, are never best."""
    scored = [c for c in checkpoints if _rankable(c.metrics.get(metric)) and not math.isnan(c.metrics[metric])]
    sign = -1.0 if mode == "max" else 1.0
    return sorted(scored, key=lambda c: (sign * c.metrics[metric], -c.step))[:count]


def _rankable(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def best_metric_problem(
    keep_best: tuple[str, str, int], recorded: Mapping[str, Any], checkpoints: Iterable[Checkpoint]
) -> str | None:
    """Why the ``keep_best`` metric can never rank these checkpoints (a misspelt name, a number
    passed as a string), or ``None``. No metrics at all (nothing measured yet), ``None`` and
    NaN are fine, as is a metric some listed checkpoint already has."""
    metric = keep_best[0]
    if not recorded or any(_rankable(c.metrics.get(metric)) for c in checkpoints):
        return None
    if metric not in recorded:
        found = ", ".join(f"`{k}`" for k in sorted(recorded))
        return f"has no metric `{metric}` (it has {found})"
    value = recorded[metric]
    if value is None or _rankable(value):
        return None
    return f"has `{metric}` = {value!r}, a {type(value).__name__}, where a number is needed"


def to_keep(
    checkpoints: list[Checkpoint], *, keep_last: int | None, keep_best: tuple[str, str, int] | None
) -> list[Checkpoint]:
    """The checkpoints a policy keeps: every one when ``keep_last`` is ``None``; else the
    ``keep_last`` newest (the newest one always) and the ``keep_best`` best."""
    ordered = sorted(checkpoints, key=lambda c: c.step)
    if keep_last is None:
        return ordered
    kept = {c.step for c in ordered[-max(keep_last or 0, 1) :]}
    if keep_best is not None:
        kept |= {c.step for c in best_of(ordered, *keep_best)}
    return [c for c in ordered if c.step in kept]


def warn_best_metric(
    directory: Any,
    keep_best: tuple[str, str, int],
    step: int,
    recorded: Mapping[str, Any],
    checkpoints: Iterable[Checkpoint],
) -> bool:
    """Warn when the checkpoint of ``step`` cannot be ranked by ``keep_best``; whether it warned."""
    problem = best_metric_problem(keep_best, recorded, checkpoints)
    if problem:
        warnings.warn(
            f"CheckpointManager of `{directory}`: keep_best ranks checkpoints by `{keep_best[0]}`, "
            f"but the checkpoint of step {step} {problem}; a checkpoint without a number there is never "
            "kept as best, and keep_last alone decides what is deleted.",
            ZipsaveWarning,
            stacklevel=caller_stacklevel(),
        )
    return bool(problem)
