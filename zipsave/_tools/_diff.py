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
import json
import math
import pickletools
import re
from typing import Any

import numpy as np
import orjson
import torch

from .. import _format
from .._archive import ArchiveSource
from .._codec import NATIVE_KEY, SERIALIZED_KEY, TYPE_KEY, Decoder
from .._invariants import flat_bytes
from .._tensors import load_member, read_array_once
from .._trust import TrustPolicy
from ..exceptions import ArchiveFormatError, nesting_as_error, reading
from ._diff_records import ArchiveDiff, Change
from ._inspect import data_folders, stored_type
from ._known import described_values, involve_handlers
from ._shown import sparse_parts
from ._values import rng_change, same_value

__all__ = ["ArchiveDiff", "Change", "diff"]

_CHUNK = 1 << 22  # elements compared at once, to bound the float64 temporaries


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
        # The error boundary names the archive a failure came from (each side read alone), or
        # both where a comparison of their values failed; ArchiveSource's would name only `b`.
        both = f"{left.name}` and `{right.name}"
        with reading(left.name):
            old_data = _data(left, notes)
        with reading(right.name):
            new_data = _data(right, notes)
        said = _said(left), _said(right)  # what an integration says a value is (SB3's schedules)
        changed: list[Change] = []
        stored_differently: list[str] = []
        for key in old_data:
            if key not in new_data:
                continue
            with reading(both, key=key):
                found = _data_change(left, right, key, old_data[key], new_data[key], decode, said)
            if found == "stored differently":
                stored_differently.append(key)
            elif found is not None:
                changed.append(found)
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
            with reading(left.name, member=member):
                old = _leaves(left, member)
            with reading(right.name, member=member):
                new = _leaves(right, member)
            for key, value in old.items():
                name = f"{stem}/{key}"
                if key not in new:
                    removed.append(name)
                    continue
                with reading(both, member=member, key=key):
                    change = _compare(name, value, new[key])
                if change is None:
                    same += isinstance(value, torch.Tensor)
                else:
                    tensor_changes.append(change)
            added += [f"{stem}/{key}" for key in new if key not in old]
    return ArchiveDiff(
        left.name,
        right.name,
        tuple(changed),
        data_added,
        data_removed,
        tuple(tensor_changes),
        tuple(added),
        tuple(removed),
        same,
        tuple(stored_differently),
        tuple(notes),
    )


def _data_change(
    left: ArchiveSource, right: ArchiveSource, key: str, old: Any, new: Any, decode: bool, said: Any
) -> Any:
    """How ``data`` key ``key`` differs: ``None`` (stored alike), ``"stored differently"`` (same
    value) or a :class:`Change`. ``said``: each side's ``{key: words}`` for the values a load
    rebuilds without unpickling (SB3's schedules), which name them instead of ``<function>``."""
    if _comparable(left, old) == _comparable(right, new):
        return None
    old_said, new_said = said[0].get(key), said[1].get(key)
    if old_said is not None and old_said == new_said:
        return "stored differently"  # one schedule, pickled by another Python or SB3
    decoded = _decoded_pair(left, right, key, old, new) if decode else None
    if decoded is not None and same_value(*decoded):
        rng = rng_change(*decoded)  # equal spaces whose generators differ: not the same value
        return "stored differently" if rng is None else Change(key, *rng)
    if decoded is None and decode and _same_pickles(old, new):
        return "stored differently"
    old_text, new_text = _describe(old), _describe(new)
    if decoded is not None:  # a tag (`<float>` for NaN, `<fractions.Fraction>`) names only the type
        if _is_tagged(old):
            old_text = _describe_decoded(decoded[0], old_text)
        if _is_tagged(new):
            new_text = _describe_decoded(decoded[1], new_text)
    return Change(key, old_said or old_text, new_said or new_text)


def _said(src: ArchiveSource) -> dict[str, str]:
    """``{key: words}`` (keys as :func:`_data` joins them) for the ``data`` values a registered
    integration recognises without decoding them."""
    out: dict[str, str] = {}
    for folder in data_folders(src.reader.names()):
        out.update((_format.join(folder, key), text) for key, text in described_values(src, folder).items())
    return out


def _decoded(src: ArchiveSource, key: str, value: Any) -> Any:
    folder, _, name = key.rpartition("/")
    involve_handlers(src, folder)  # their reviewed names, as a load of the folder has them
    decoder = Decoder(
        TrustPolicy(),
        load_array=lambda member: read_array_once(src, member),
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


def _data(src: ArchiveSource, notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for folder in data_folders(src.reader.names()):
        member = _format.join(folder, _format.DATA)
        # A hand-edited `data` (a hyper-parameter changed in an editor) is what diff is for:
        # compare it as it is now and say so, as load does.
        raw = src.read_json(member, on_edited=lambda err: notes.append(f"{err} It was edited after saving."))
        if not isinstance(raw, dict):
            raise ArchiveFormatError(
                f"must hold a JSON object, found {type(raw).__name__}.", archive=src.name, member=member
            )
        out.update((_format.join(folder, key), value) for key, value in raw.items())
    return out


def _comparable(src: ArchiveSource, value: Any) -> Any:
    """The stored value with pickles dropped where a native form exists, array members
    replaced by their size and CRC-32, and a NaN by a marker equal to itself (Python's json,
    and so SB3, writes NaN; an archive holding one is identical to itself)."""
    if isinstance(value, float) and value != value:
        return _NAN
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


#: A stored NaN, as compared: no JSON value is a tuple.
_NAN = ("NaN",)


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
        if "null" in text and value is not None and not _finite(value):  # orjson wrote NaN as null
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _finite(value: Any) -> bool:
    """Does the JSON value hold no NaN or infinity?"""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


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
    layout = "" if t.layout == torch.strided else f" {str(t.layout).removeprefix('torch.')}"
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}{layout}"


def _sparse_parts(t: torch.Tensor) -> list[torch.Tensor]:
    """A sparse tensor's dense parts (:func:`sparse_parts`), a COO tensor's coalesced where
    torch can sum its dtype (not ``bits8``, ``float8``, ``uint16``...), never its dense form."""
    if t.layout == torch.sparse_coo and not t.is_coalesced():
        try:
            t = t.coalesce()
        except (NotImplementedError, RuntimeError):
            pass  # compared as stored
    return list(sparse_parts(t).values())


def _compare_sparse(name: str, old: torch.Tensor, new: torch.Tensor) -> Change | None:
    *old_index, old_values = _sparse_parts(old)
    *new_index, new_values = _sparse_parts(new)
    same_places = all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(old_index, new_index))
    if not same_places or old_values.shape != new_values.shape:
        return Change(name, _spec(old), _spec(new))  # other places hold values: no one gap to name
    change = _compare(name, old_values, new_values)
    return None if change is None else Change(name, _spec(old), _spec(new), change.max_abs_diff)


def _compare(name: str, old: Any, new: Any) -> Change | None:
    if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
        if old.shape != new.shape or old.layout != new.layout:
            return Change(name, _spec(old), _spec(new))
        if old.layout != torch.strided:
            return _compare_sparse(name, old, new)
        try:
            if old.dtype == new.dtype and torch.equal(old, new):
                return None
            biggest: float | None = max_abs_diff(old, new)
        except (NotImplementedError, RuntimeError):  # a dtype torch stores but cannot compare (bits8, complex32)
            if old.dtype == new.dtype and _bytes(old) == _bytes(new):
                return None
            biggest = None
        if biggest == 0.0 and old.dtype == new.dtype:
            return None  # equal but for NaNs in the same places
        return Change(name, _spec(old), _spec(new), biggest)
    if isinstance(old, torch.Tensor) or isinstance(new, torch.Tensor):
        return Change(name, _value_text(old), _value_text(new))
    if type(old) is type(new) and (old == new or (isinstance(old, float) and math.isnan(old) and math.isnan(new))):
        return None
    return Change(name, _value_text(old), _value_text(new))


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(flat_bytes(t.detach().contiguous()).numpy()) if t.numel() else b""


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
