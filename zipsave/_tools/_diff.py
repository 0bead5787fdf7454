"""Compare two archives (``zipsave diff``): ``data`` keys by value, tensors by value, with the
largest absolute difference of each changed tensor.

``data`` is first compared as stored: a native form instead of its pickled twin (pickle bytes
differ between runs for equal values), an ``arrays/<id>.npy`` member by its size and CRC-32.
Keys stored differently are then decoded under the default trust policy (nothing outside the
allowlist is imported, nothing is unpickled freely) and compared by value: equal values
(one model saved by SB3 and by zipsave) are "same value, stored differently", not changes.
Tensors are read with zipsave's own loader (``torch.load`` only with ``weights_only=True``).
"""

from __future__ import annotations

import base64
import dataclasses
import math
import pickletools
import random
import re
import types
from typing import Any

import numpy as np
import orjson
import torch

from .. import _format
from .._archive import ArchiveSource, involve_handlers
from .._codec import NATIVE_KEY, SERIALIZED_KEY, TYPE_KEY, Decoder
from .._tensors import load_member, read_array_member
from .._trust import TrustPolicy
from ..exceptions import ArchiveFormatError, nesting_as_error
from ._inspect import data_folders, stored_type

__all__ = ["ArchiveDiff", "Change", "diff"]

_CHUNK = 1 << 22  # elements compared at once, to bound the float64 temporaries


@dataclasses.dataclass(frozen=True)
class Change:
    """One changed entry: a ``data`` key, a tensor or a plain state-dict value.

    ``old``/``new`` describe the value on each side (text); ``max_abs_diff`` is set for
    tensors of the same shape.
    """

    name: str
    old: str
    new: str
    max_abs_diff: float | None = None


@dataclasses.dataclass(frozen=True)
class ArchiveDiff:
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

    @property
    def identical(self) -> bool:
        return not (
            self.data_changed or self.data_added or self.data_removed
            or self.tensors_changed or self.tensors_added or self.tensors_removed
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
        lines = [f"--- {self.a}", f"+++ {self.b}"]
        for change in self.data_changed:
            lines.append(f"~ data    {change.name}: {change.old} -> {change.new}")
        lines += [f"+ data    {name}" for name in self.data_added]
        lines += [f"- data    {name}" for name in self.data_removed]
        lines += [f"= data    {name}: same value, stored differently" for name in self.data_stored_differently]
        for change in self.tensors_changed:
            if change.max_abs_diff is not None:
                detail = f"max |a-b| = {change.max_abs_diff:.6g}"
                if change.old != change.new:
                    detail = f"{change.old} -> {change.new}, {detail}"
            else:
                detail = f"{change.old} -> {change.new}"
            lines.append(f"~ tensor  {change.name}: {detail}")
        lines += [f"+ tensor  {name}" for name in self.tensors_added]
        lines += [f"- tensor  {name}" for name in self.tensors_removed]
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
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


@nesting_as_error
def diff(a: Any, b: Any, *, limits: Any = None, decode: bool = True) -> ArchiveDiff:
    """Compare archive ``a`` with archive ``b``.

    Parameters
    ----------
    a, b
        The archives (paths, URLs or file objects).
    limits
        Safety limits (:class:`~zipsave.Limits`).
    decode
        Decode ``data`` keys whose stored forms differ (safely, under the default allowlist) and
        report equal values as ``data_stored_differently`` rather than as changes. ``False``
        compares the stored forms only (byte-level).

    Returns
    -------
    ArchiveDiff
    """
    with ArchiveSource(a, limits=limits) as left, ArchiveSource(b, limits=limits) as right:
        notes: list[str] = []
        old_data, new_data = _data(left, notes), _data(right, notes)
        changed: list[Change] = []
        stored_differently: list[str] = []
        for key in old_data:
            if key not in new_data or _comparable(left, old_data[key]) == _comparable(right, new_data[key]):
                continue
            decoded = _decoded_pair(left, right, key, old_data[key], new_data[key]) if decode else None
            if decoded is not None and same_value(*decoded):
                stored_differently.append(key)
            elif decoded is None and decode and _same_pickles(old_data[key], new_data[key]):
                stored_differently.append(key)
            else:
                old_text, new_text = _describe(old_data[key]), _describe(new_data[key])
                if decoded is not None:  # a tag (`<float>` for NaN, `<fractions.Fraction>`) names only the type
                    if _is_tagged(old_data[key]):
                        old_text = _describe_decoded(decoded[0], old_text)
                    if _is_tagged(new_data[key]):
                        new_text = _describe_decoded(decoded[1], new_text)
                changed.append(Change(key, old_text, new_text))
        data_added = tuple(k for k in new_data if k not in old_data)
        data_removed = tuple(k for k in old_data if k not in new_data)

        members = [n for n in left.reader.names() if n.endswith(_format.PTH_SUFFIX)]
        members += [n for n in right.reader.names() if n.endswith(_format.PTH_SUFFIX) and n not in left.reader]
        tensor_changes: list[Change] = []
        added: list[str] = []
        removed: list[str] = []
        same = 0
        for member in members:
            stem = member[: -len(_format.PTH_SUFFIX)]
            old = _leaves(left, member)
            new = _leaves(right, member)
            for key, value in old.items():
                name = f"{stem}/{key}"
                if key not in new:
                    removed.append(name)
                    continue
                change = _compare(name, value, new[key])
                if change is None:
                    same += isinstance(value, torch.Tensor)
                else:
                    tensor_changes.append(change)
            added += [f"{stem}/{key}" for key in new if key not in old]
    return ArchiveDiff(
        left.name, right.name, tuple(changed), data_added, data_removed,
        tuple(tensor_changes), tuple(added), tuple(removed), same, tuple(stored_differently), tuple(notes),
    )


def _decoded(src: ArchiveSource, key: str, value: Any) -> Any:
    folder, _, name = key.rpartition("/")
    involve_handlers(src, folder)  # their reviewed names, as a load of the folder has them
    decoder = Decoder(
        TrustPolicy(),
        load_array=lambda member: read_array_member(src.reader, member),
        device=torch.device("cpu"),
        max_depth=src.limits.max_json_depth,
        limits=src.limits,
        archive=src.name,
        member=_format.join(folder, _format.DATA),
    )
    return decoder.decode_entry(name, value)


def _decoded_pair(left: ArchiveSource, right: ArchiveSource, key: str, old: Any, new: Any) -> tuple[Any, Any] | None:
    """Both stored forms decoded (safely); ``None`` when either cannot be."""
    try:
        return _decoded(left, key, old), _decoded(right, key, new)
    except Exception:  # noqa: BLE001 - undecodable here means "cannot tell": reported as a change
        return None


#: A class tracker id: cloudpickle gives every class it stores by value a random one (uuid4 hex).
_TRACKER_ID = re.compile(r"[0-9a-f]{32}")


def _same_pickles(old: Any, new: Any) -> bool:
    """Two values that cannot be decoded safely, pickled the same way: the same opcodes and
    arguments once cloudpickle's random class tracker ids are set aside (two saves of one class
    defined in a script differ only there). The human-readable extras SB3 writes beside a pickle
    (reprs with memory addresses) are not compared; nothing is unpickled."""
    try:
        return _normalised(old) == _normalised(new)
    except Exception:  # noqa: BLE001 - not a readable pickle on one side: cannot tell
        return False


def _normalised(value: Any) -> Any:
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    if not isinstance(value, dict):
        return value
    if NATIVE_KEY in value:
        return {NATIVE_KEY: _normalised(value[NATIVE_KEY])}
    if isinstance(value.get(SERIALIZED_KEY), str):
        return _opcodes(base64.b64decode(value[SERIALIZED_KEY], validate=True))
    return {k: _normalised(v) for k, v in value.items()}


def _opcodes(payload: bytes) -> list[tuple[str, Any]]:
    out = []
    for opcode, arg, _ in pickletools.genops(payload):
        if opcode.name == "FRAME":
            continue  # a frame's length follows from what it holds
        if isinstance(arg, str) and _TRACKER_ID.fullmatch(arg):
            arg = "<class tracker id>"
        out.append((opcode.name, arg))
    return out


def _describe_decoded(value: Any, fallback: str) -> str:
    """A decoded value's repr when it is short and says more than its type.

    Arrays and tensors keep their type: numpy's summarised repr (``[0., 0., ..., 0.]``) hides the
    change, and its length differs between numpy 1 and 2, so the line would too.
    """
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return fallback
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a repr may raise anything
        return fallback
    return fallback if len(text) > 60 or " object at 0x" in text or "..." in text else text


def _rng_state(value: Any) -> Any:
    """The state of a random generator (they compare by identity, or not at all), else ``None``."""
    if isinstance(value, torch.Generator):
        return value.get_state()
    if isinstance(value, random.Random):
        return value.getstate()
    if isinstance(value, np.random.Generator):
        return value.bit_generator.state
    if isinstance(value, np.random.RandomState):
        return value.get_state(legacy=False)
    return None


def same_value(a: Any, b: Any, depth: int = 0) -> bool:
    """Equal in type and value, all the way down (classes and functions by identity)."""
    if depth > 50 or type(a) is not type(b):
        return False
    if isinstance(a, (type, types.FunctionType, types.BuiltinFunctionType)) or a is None:
        return a is b
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y, depth + 1) for x, y in zip(a, b))
    state = _rng_state(a)
    if state is not None:
        return same_value(state, _rng_state(b), depth + 1)
    try:
        equal = a == b
        if isinstance(equal, np.bool_):  # e.g. gymnasium 0.29's spaces compare numpy integers
            equal = bool(equal)
        if isinstance(equal, bool) and (equal or type(a).__eq__ is not object.__eq__):
            return equal
    except Exception:  # noqa: BLE001 - a type whose == fails is compared by its state
        pass
    state_a, state_b = getattr(a, "__dict__", None), getattr(b, "__dict__", None)
    return isinstance(state_a, dict) and isinstance(state_b, dict) and same_value(state_a, state_b, depth + 1)


def _data(src: ArchiveSource, notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for folder in data_folders(src.reader.names()):
        member = _format.join(folder, _format.DATA)
        # A hand-edited `data` (a hyper-parameter changed in an editor) is what diff is for:
        # compare it as it is now and say so, as load does.
        raw = src.read_json(member, on_edited=lambda err: notes.append(f"{err} It was edited after saving."))
        if not isinstance(raw, dict):
            raise ArchiveFormatError(f"must hold a JSON object, found {type(raw).__name__}.", archive=src.name, member=member)
        out.update((_format.join(folder, key), value) for key, value in raw.items())
    return out


def _comparable(src: ArchiveSource, value: Any) -> Any:
    """The stored value with pickles dropped where a native form exists and array members
    replaced by their size and CRC-32."""
    if isinstance(value, list):
        return [_comparable(src, v) for v in value]
    if not isinstance(value, dict):
        return value
    if NATIVE_KEY in value:
        return {NATIVE_KEY: _comparable(src, value[NATIVE_KEY])}
    out = {k: _comparable(src, v) for k, v in value.items()}
    member = value.get("member")
    if value.get("kind") == "ndarray" and isinstance(member, str):
        out["member"] = _member_digest(src, member)
    return out


def _member_digest(src: ArchiveSource, member: str) -> str:
    """Size and CRC-32 from the zip directory: no read, and the CRC is checked on load."""
    if member not in src.reader:
        return f"missing member {member}"
    info = src.reader.info(member)
    return f"{info.file_size}:{info.CRC:08x}"


def _is_tagged(value: Any) -> bool:
    return isinstance(value, dict) and TYPE_KEY in value


def _describe(value: Any) -> str:
    if _is_tagged(value):
        return f"<{stored_type(value)}>"
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _leaves(src: ArchiveSource, member: str) -> dict[str, Any]:
    if member not in src.reader:
        return {}
    tree, _ = load_member(src.reader, member, device=torch.device("cpu"))
    out: dict[str, Any] = {}

    def walk(node: Any, path: tuple) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + (k,))
        elif isinstance(node, (list, tuple)) and not isinstance(node, torch.Size):
            for i, v in enumerate(node):
                walk(v, path + (i,))
        else:
            out[".".join(map(str, path))] = node

    walk(tree, ())
    return out


def _spec(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def _compare(name: str, old: Any, new: Any) -> Change | None:
    if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
        if old.shape != new.shape:
            return Change(name, _spec(old), _spec(new))
        if old.dtype == new.dtype and torch.equal(old, new):
            return None
        biggest = max_abs_diff(old, new)
        if biggest == 0.0 and old.dtype == new.dtype:
            return None  # equal but for NaNs in the same places
        return Change(name, _spec(old), _spec(new), biggest)
    if isinstance(old, torch.Tensor) or isinstance(new, torch.Tensor):
        return Change(name, _value_text(old), _value_text(new))
    if type(old) is type(new) and (old == new or (isinstance(old, float) and math.isnan(old) and math.isnan(new))):
        return None
    return Change(name, _value_text(old), _value_text(new))


def _value_text(value: Any) -> str:
    text = _spec(value) if isinstance(value, torch.Tensor) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest ``|a - b|`` over two same-shape tensors, in float64 (complex: modulus);
    NaN where only one side is NaN, and places where both are NaN count as equal."""
    wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64
    flat_a, flat_b = a.detach().reshape(-1), b.detach().reshape(-1)
    biggest = 0.0
    for start in range(0, flat_a.numel(), _CHUNK):
        x = flat_a[start : start + _CHUNK].to(wide)
        y = flat_b[start : start + _CHUNK].to(wide)
        gap = (x - y).abs()
        both_nan = torch.isnan(x) & torch.isnan(y)
        gap = gap.masked_fill(both_nan, 0.0)
        if torch.isnan(gap).any():
            return math.nan
        biggest = max(biggest, float(gap.max()))
    return biggest
