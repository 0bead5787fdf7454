"""Look inside an archive without loading it (:func:`inspect`), and read one tensor or one
``data`` key alone (:func:`read`).

Nothing here unpickles or calls ``torch.load``: ``data`` is read as JSON and its pickles are
audited from their opcodes; ``.pth`` members are listed from their ``data.pkl`` by the
metadata-only reader of :mod:`zipsave._torch_io`, and :func:`read` fetches the bytes of one
storage record.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import html
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import torch

from . import _format, _system_info
from ._archive import Limits, MemberView, manifest_digest
from ._codec import parse_json
from ._persist import _Source
from ._torch_io import PthMeta, TensorRef, _Unsupported, _walk_refs, read_pth_meta
from ._unpickle import TrustPolicy, pickle_globals
from .exceptions import ArchiveFormatError, DecodeError, ZipsaveError

__all__ = ["ArchiveInfo", "ArchiveMember", "ComponentInfo", "DataEntry", "TensorInfo", "inspect", "read"]

_T, _S, _N = _format.TYPE_KEY, _format.SERIALIZED_KEY, _format.NATIVE_KEY
_CLASS_HINT = re.compile(r"<class '(.+)'>")
_PREVIEW = 60
# Native kinds whose decoding imports a global by name (through the trust policy).
_REF_FIELDS = {"ref": "path", "enum": "class", "namedtuple": "class", "defaultdict": "factory"}


# -- records -----------------------------------------------------------------------------------
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
        if self.system_info:
            lines.append("")
            lines.append("saved with")
            lines += [f"  {key}: {value}" for key, value in self.system_info.items()]
        lines += ["", "members"]
        width = max((len(_size(m.size)) for m in self.members), default=1)
        lines += [f"  {_size(m.size):>{width}}  {m.compression:<8}  {m.name}" for m in self.members]
        if len(self.components) > 1 or (self.components and self.components[0].cls):
            lines += ["", "components"]
            for comp in self.components:
                depth = comp.name.count("/") + 1 if comp.name else 0
                label = comp.name or "(top level)"
                lines.append(f"  {'  ' * depth}{label}" + (f"  [{comp.cls}]" if comp.cls else ""))
        if self.data:
            pickled = len(self.pickled)
            lines += ["", f"data ({len(self.data)} keys, {pickled} need{'s' if pickled == 1 else ''} pickle)"]
            rows = [(e.name, _short(e.type, 40), e.form, _entry_detail(e)) for e in self.data]
            lines += _columns(rows)
        if self.tensors:
            total = sum(t.nbytes for t in self.tensors)
            lines += ["", f"tensors ({len(self.tensors)}, {_size(total)})"]
            rows = [(t.name, t.dtype, _shape(t.shape), _size(t.nbytes)) for t in self.tensors]
            lines += _columns(rows)
        if self.notes:
            lines += ["", "notes"]
            lines += [f"  - {note}" for note in self.notes]
        return "\n".join(lines)

    __repr__ = __str__

    def _headline(self) -> str:
        if self.layout == "zipsave":
            kind = f"zipsave archive (format {self.format_version}, zipsave {self.zipsave_version})"
        elif self.layout == "sb3":
            kind = f"Stable-Baselines3 archive (SB3 {self.sb3_version})"
        else:
            kind = "zip archive (no version member)"
        return f"{self.archive}: {kind}, {len(self.members)} members, {_size(self.total_size)}"

    # -- HTML ------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        esc = html.escape
        parts = [f"<div class='zipsave-archive-info'><p><b>{esc(self._headline())}</b>"]
        if self.manifest_digest:
            parts.append(f"<br><small>manifest sha256 <code>{esc(self.manifest_digest)}</code></small>")
        parts.append("</p>")
        if self.notes:
            parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in self.notes) + "</ul>")
        table = _html_table
        if self.data:
            data = [(e.name, e.type, e.form, e.summary, _imports(e)) for e in self.data]
            parts.append(table(f"data ({len(self.data)} keys)", ("key", "type", "form", "value", "imports"), data))
        if self.tensors:
            tensors = [(t.name, t.dtype, _shape(t.shape), _size(t.nbytes)) for t in self.tensors]
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


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _short(text: str, limit: int = _PREVIEW) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _imports(entry: DataEntry) -> str:
    return ", ".join(g + (" (untrusted)" if g in entry.untrusted else "") for g in entry.globals)


def _entry_detail(entry: DataEntry) -> str:
    return f"{entry.summary}; imports {_imports(entry)}" if entry.globals else entry.summary


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]


def _html_table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    esc = html.escape
    cells = "".join(
        "<tr>" + "".join(f"<td style='text-align:left'>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    header = "" if not any(head) else "<tr>" + "".join(f"<th style='text-align:left'>{esc(h)}</th>" for h in head) + "</tr>"
    return f"<details open><summary><b>{esc(title)}</b></summary><table>{header}{cells}</table></details>"


# -- describing data values --------------------------------------------------------------------
def _json_type(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _type_hint(value: Any) -> str:
    if isinstance(value, dict) and isinstance(value.get(_T), str):
        hint = value[_T]
        match = _CLASS_HINT.fullmatch(hint)
        return match.group(1) if match else hint
    return _json_type(value)


def _native_summary(body: Any) -> str:
    if not isinstance(body, dict):
        return "native"
    kind = body.get("kind")
    if kind in ("ndarray", "tensor"):
        dtype = _dtype_name(body.get("dtype"))
        shape = body.get("shape")
        where = f" in `{body['member']}`" if isinstance(body.get("member"), str) else ""
        return f"{kind} {dtype} {_shape(tuple(shape)) if isinstance(shape, list) else shape}{where}"
    if kind == "space":
        return f"{body.get('space')} space"
    if kind in ("int", "float"):
        return _short(str(body.get("value", body.get("hex"))))
    if kind in _REF_FIELDS and kind != "defaultdict":
        ref = body.get(_REF_FIELDS[kind])
        name = f".{body['name']}" if kind == "enum" and isinstance(body.get("name"), str) else ""
        return f"{kind} {ref}{name}"
    if kind == "path":
        return f"path {body.get('value')}"
    for field in ("items", "value"):
        if isinstance(body.get(field), (list, dict)):
            return f"{kind} of {len(body[field])}"
    return str(kind)


def _dtype_name(descr: Any) -> Any:
    """``"<f4"`` -> ``"float32"``; anything numpy does not read plainly stays as it is."""
    if isinstance(descr, str):
        try:
            return np.dtype(descr).name
        except TypeError:
            pass
    return descr


def _scan(value: Any, pickles: list[str], refs: list[str], native: bool) -> None:
    """Collect what decoding ``value`` would unpickle or import, as the decoder walks it:
    a native form wins over its ``":serialized:"`` twin at every level."""
    if isinstance(value, list):
        for item in value:
            _scan(item, pickles, refs, native)
        return
    if not isinstance(value, dict):
        return
    if _N in value:
        _scan(value[_N], pickles, refs, True)
        return
    if _S in value:
        pickles.append(value[_S])
        return
    if native and value.get("kind") in _REF_FIELDS:
        ref = value.get(_REF_FIELDS[value["kind"]])
        if isinstance(ref, str):
            refs.append(ref.replace(":", "."))
    for item in value.values():
        _scan(item, pickles, refs, native)


def _global_trusted(policy: TrustPolicy, name: str) -> bool:
    module, _, qualname = name.rpartition(".")
    return bool(module) and policy.is_trusted(module, qualname)


def _describe_entry(component: str, key: str, value: Any, policy: TrustPolicy) -> DataEntry:
    pickles: list[str] = []
    refs: list[str] = []
    _scan(value, pickles, refs, False)
    names: set[str] = set(refs)
    for text in pickles:
        try:
            payload = base64.b64decode(text.encode("ascii"), validate=True) if isinstance(text, str) else b""
            names.update(pickle_globals(payload))
        except (binascii.Error, UnicodeEncodeError, DecodeError) as err:
            names.add(f"<unreadable pickle: {err}>")
    found = tuple(sorted(names))
    untrusted = tuple(g for g in found if not _global_trusted(policy, g))
    if pickles:
        form = "pickle"
    elif isinstance(value, dict) and _N in value:
        form = "native"
    else:
        form = "json"
    if isinstance(value, dict) and _N in value:
        summary = _native_summary(value[_N])
    elif isinstance(value, dict) and _S in value:
        summary = f"pickle, {len(value[_S]) * 3 // 4} bytes" if isinstance(value[_S], str) else "pickle"
    else:
        summary = _short(orjson.dumps(value).decode() if _json_dumpable(value) else repr(value))
    return DataEntry(component, key, _type_hint(value), form, summary, found, untrusted)


def _json_dumpable(value: Any) -> bool:
    try:
        orjson.dumps(value)
    except TypeError:  # NaN/Infinity from SB3 archives parse to floats orjson writes as null
        return False
    return not (isinstance(value, float) and not math.isfinite(value))


# -- inspect -----------------------------------------------------------------------------------
def inspect(path: Any, *, limits: Limits | None = None, storage_options: dict[str, Any] | None = None) -> ArchiveInfo:
    """Describe an archive without loading it: nothing is unpickled or ``torch.load``-ed.

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), URL, or readable binary file object (not closed).
    limits
        Safety limits (:class:`~zipsave.Limits`); the defaults suit any sane archive.
    storage_options
        Options for the ``fsspec`` filesystem of a URL (credentials, endpoint).

    Returns
    -------
    ArchiveInfo
        Members, versions, saved system info, every ``data`` key with its type and whether it
        needs pickle (and which globals it would import), every tensor with dtype and shape,
        and the component tree.

    Raises
    ------
    ArchiveFormatError
        The file is not a readable zip archive, or breaks a safety limit.

    Examples
    --------
    >>> info = zipsave.inspect("algo.zip")  # doctest: +SKIP
    >>> [t.name for t in info.tensors][:2]  # doctest: +SKIP
    ['policy/0.weight', 'policy/0.bias']
    """
    policy = TrustPolicy()
    with _Source(path, policy=policy, device="cpu", limits=limits, verify=False, storage_options=storage_options) as src:
        reader = src.reader
        notes: list[str] = []
        if reader.manifest_error:
            notes.append(reader.manifest_error)
        members = []
        for name in reader.names():
            info = reader.info(name)
            entry = reader.expected(name) or {}
            members.append(
                ArchiveMember(
                    name,
                    info.file_size,
                    info.compress_size,
                    "stored" if info.compress_type == 0 else "deflated",
                    entry.get("sha256") if isinstance(entry.get("sha256"), str) else None,
                )
            )
            try:
                reader.check_recorded(name)
            except ZipsaveError as err:
                notes.append(f"`{name}`: {err.detail}")

        zipsave_version = format_version = sb3_version = None
        if _format.VERSION in reader:
            zipsave_version, format_version = _parse_version(_read_text(src, _format.VERSION, notes))
        if _format.SB3_VERSION in reader:
            sb3_version = _read_text(src, _format.SB3_VERSION, notes).strip() or None
        layout = "zipsave" if _format.VERSION in reader else "sb3" if sb3_version else "unknown"
        if format_version is not None and format_version > _format.FORMAT_VERSION:
            notes.append(
                f"format version {format_version} is newer than this zipsave reads ({_format.FORMAT_VERSION}); "
                "upgrade zipsave to load it."
            )
        system_info = {}
        if _format.SYSTEM_INFO in reader:
            system_info = _system_info.parse_system_info(_read_text(src, _format.SYSTEM_INFO, notes))
        digest = None
        if _format.MANIFEST in reader:
            digest = manifest_digest(reader.read(_format.MANIFEST, limit=src.limits.max_json_bytes, verify=False))

        components = []
        data: list[DataEntry] = []
        for folder in _folders(reader.names()):
            components.append(ComponentInfo(folder, _component_class(src, folder, notes)))
            member = _format.join(folder, _format.DATA)
            raw = _read_json(src, member, notes, check_digest=True)
            if isinstance(raw, dict):
                data += [_describe_entry(folder, key, value, policy) for key, value in raw.items()]
            elif raw is not None:
                notes.append(f"`{member}`: holds a JSON {type(raw).__name__}, expected an object")

        tensors: list[TensorInfo] = []
        for name in reader.names():
            if name.endswith(_format.PTH_SUFFIX):
                tensors += _list_tensors(src, name, notes)
    return ArchiveInfo(
        archive=src.name,
        layout=layout,
        zipsave_version=zipsave_version,
        format_version=format_version,
        sb3_version=sb3_version,
        system_info=system_info,
        members=tuple(members),
        components=tuple(components),
        data=tuple(data),
        tensors=tuple(tensors),
        manifest_digest=digest,
        notes=tuple(notes),
    )


def _folders(names: list[str]) -> list[str]:
    """Every folder holding its own ``data`` member, the top level first."""
    suffix = "/" + _format.DATA
    found = [n[: -len(suffix)] for n in names if n.endswith(suffix)]
    return ([""] if _format.DATA in names else []) + sorted(found)


def _read_text(src: _Source, member: str, notes: list[str]) -> str:
    try:
        return src.reader.read(member, limit=1 << 20, verify=False).decode("utf-8", "replace")
    except ZipsaveError as err:
        notes.append(f"`{member}`: {err.detail}")
        return ""


def _read_json(src: _Source, member: str, notes: list[str], *, check_digest: bool = False) -> Any:
    try:
        raw = src.reader.read(member, limit=src.limits.max_json_bytes, verify=False)
    except ZipsaveError as err:
        notes.append(f"`{member}`: {err.detail}")
        return None
    if check_digest:
        try:
            src.reader.check_digest(member, raw)
        except ZipsaveError as err:
            notes.append(f"`{member}`: {err.detail} It was edited after saving.")
    try:
        return parse_json(raw, max_depth=src.limits.max_json_depth)
    except ZipsaveError as err:
        notes.append(f"`{member}`: {err.detail}")
        return None


def _parse_version(text: str) -> tuple[str | None, int | None]:
    version = fmt = None
    for line in text.splitlines():
        word, _, value = line.strip().partition(" ")
        if word == "zipsave":
            version = value.strip() or None
        elif word == "format" and value.strip().isdigit():
            fmt = int(value)
    return version, fmt


def _component_class(src: _Source, folder: str, notes: list[str]) -> str | None:
    member = _format.join(folder, _format.INIT)
    if member not in src.reader:
        return None
    record = _read_json(src, member, notes)
    cls = record.get("class") if isinstance(record, dict) else None
    return cls if isinstance(cls, str) else None


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def _pth_meta(src: _Source, member: str, view: MemberView) -> PthMeta:
    try:
        return read_pth_meta(view)
    except _Unsupported as err:
        raise ArchiveFormatError(
            f"cannot be listed without `torch.load` ({err}).",
            archive=src.name,
            member=member,
            hint="`zipsave.load_archive` reads it with `weights_only=True`.",
        ) from None


def _list_tensors(src: _Source, member: str, notes: list[str]) -> list[TensorInfo]:
    try:
        with src.reader.open_view(member) as view:
            tree = _pth_meta(src, member, view).tree
        return [
            TensorInfo(member, _dotted(path), str(ref.dtype).removeprefix("torch."), ref.shape, ref.nbytes)
            for path, ref in _walk_refs(tree)
        ]
    except ZipsaveError as err:
        notes.append(f"`{member}`: {err.detail}")
        return []


# -- read --------------------------------------------------------------------------------------
def read(
    path: Any,
    name: str,
    *,
    device: Any = "cpu",
    allow_pickle: bool = False,
    trusted: Any = (),
    limits: Limits | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """Read one tensor, or one ``data`` key, without reading the rest of the archive.

    **Addressing.** ``name`` is ``<prefix>/<rest>``, where ``<prefix>`` is a ``.pth``
    member without its suffix (``policy``, ``policy.optimizer``, ``learner/policy``) or a
    component folder, and ``<rest>`` names a tensor inside that member (its state-dict key,
    or for nested objects its path with parts joined by ``/`` or ``.``:
    ``policy.optimizer/state/0/exp_avg`` = ``policy.optimizer/state.0.exp_avg``) or a key of
    that folder's ``data``. A name without a matching prefix is a key of the top-level
    ``data`` (``learning_rate``). Prefixes are tried longest first, a ``.pth`` member before
    a ``data`` member of the same folder, and the first that holds ``<rest>`` wins. The
    addresses :func:`inspect` lists (:attr:`~zipsave._inspect.TensorInfo.name`,
    :attr:`~zipsave._inspect.DataEntry.name`) always work.

    Only the bytes of the tensor's storage record are read (plus the member's small
    ``data.pkl``); a ``data`` key decodes from the JSON member and, if it refers to one,
    its own ``arrays/<id>.npy``. The zip directory entry is checked against
    ``manifest.json``; the bytes are not hashed (``zipsave verify`` does that).

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), URL, or readable binary file object (not closed).
    name
        What to read, as above.
    device
        Where the tensor goes (``"auto"`` picks CUDA when available).
    allow_pickle, trusted
        The trust policy for a pickled ``data`` key; see :doc:`security`.
    limits
        Safety limits (:class:`~zipsave.Limits`).
    storage_options
        Options for the ``fsspec`` filesystem of a URL (credentials, endpoint).

    Returns
    -------
    torch.Tensor or object
        The tensor, or the decoded value.

    Raises
    ------
    ArchiveFormatError
        ``name`` addresses nothing in the archive (the message lists what it holds).
    UnsafeGlobalError
        The ``data`` key needs a global the trust policy refuses.

    Examples
    --------
    >>> w = zipsave.read("algo.zip", "policy/0.weight")  # doctest: +SKIP
    >>> lr = zipsave.read("algo.zip", "learning_rate")  # doctest: +SKIP
    """
    if not isinstance(name, str) or not name.strip("/"):
        raise TypeError(f"name must be a non-empty string such as 'policy/0.weight', got {name!r}.")
    name = name.strip("/")
    policy = TrustPolicy.make(allow_pickle=allow_pickle, trusted=trusted)
    with _Source(path, policy=policy, device=device, limits=limits, storage_options=storage_options) as src:
        for prefix, is_tensor in _candidates(src.reader.names()):
            if prefix and not name.startswith(prefix + "/"):
                continue
            rest = name[len(prefix) + 1 :] if prefix else name
            if is_tensor:
                member = prefix + _format.PTH_SUFFIX
                with src.reader.open_view(member) as view:
                    meta = _pth_meta(src, member, view)
                    found = _find_ref(src, member, meta, rest)
                    if found is not None:
                        return _read_tensor(src, member, view, meta, found)
            else:
                member = _format.join(prefix, _format.DATA)
                raw = src.read_json(member)
                if isinstance(raw, dict) and rest in raw:
                    return _decode_key(src, member, rest, raw[rest])
        raise ArchiveFormatError(
            f"`{name}` names no tensor and no `data` key.",
            archive=src.name,
            hint=f"It holds {_what_it_holds(src)}; `zipsave inspect` lists every address.",
        )


def _candidates(names: list[str]) -> list[tuple[str, bool]]:
    """(prefix, is .pth member) pairs, longest prefix first, members before data."""
    found = [(n[: -len(_format.PTH_SUFFIX)], True) for n in names if n.endswith(_format.PTH_SUFFIX)]
    found += [(folder, False) for folder in _folders(names)]
    return sorted(found, key=lambda item: (-len(item[0]), not item[1]))


def _find_ref(src: _Source, member: str, meta: PthMeta, rest: str) -> TensorRef | None:
    matches = [(path, ref) for path, ref in _walk_refs(meta.tree) if rest in ("/".join(map(str, path)), _dotted(path))]
    if len(matches) > 1:
        raise ArchiveFormatError(
            f"`{rest}` matches several tensors: {sorted(_dotted(p) for p, _ in matches)}.",
            archive=src.name,
            member=member,
        )
    return matches[0][1] if matches else None


def _read_tensor(src: _Source, member: str, view: MemberView, meta: PthMeta, ref: TensorRef) -> torch.Tensor:
    src.reader.check_recorded(member)
    if ref.storage.key not in meta.records:
        raise ArchiveFormatError(
            f"`data.pkl` names storage record `{ref.storage.key}`, which is missing.", archive=src.name, member=member
        )
    start, length = meta.records[ref.storage.key]
    itemsize = ref.dtype.itemsize
    if ref.numel == 0:
        tensor = torch.empty(ref.size, dtype=ref.dtype)
    else:
        extent = 1 + sum((n - 1) * s for n, s in zip(ref.size, ref.stride))
        first, nbytes = ref.offset * itemsize, extent * itemsize
        if first + nbytes > length:
            raise ArchiveFormatError(
                f"storage record `{ref.storage.key}` holds {length} bytes, fewer than its tensor needs.",
                archive=src.name,
                member=member,
            )
        buf = torch.empty(nbytes, dtype=torch.uint8)
        if view.read_at(start + first, buf.numpy()) != nbytes:
            raise ArchiveFormatError("ends inside a tensor record (truncated).", archive=src.name, member=member)
        tensor = torch.empty(0, dtype=ref.dtype).set_(buf.untyped_storage(), 0, ref.size, ref.stride)
    if src.device.type != "cpu":
        tensor = tensor.to(src.device)
    if ref.parameter:
        return torch.nn.Parameter(tensor, requires_grad=ref.requires_grad)
    return tensor.requires_grad_(ref.requires_grad) if ref.requires_grad else tensor


def _decode_key(src: _Source, member: str, key: str, value: Any) -> Any:
    try:
        return src.decoder(member).decode_entry(key, value)
    except ZipsaveError as err:
        err.archive, err.member, err.key = err.archive or src.name, err.member or member, err.key or key
        err.args = (err._compose(),)
        raise
    except Exception as err:  # a space or class constructor rejecting its saved arguments
        raise DecodeError(
            f"could not be decoded ({type(err).__name__}: {err}).", archive=src.name, member=member, key=key
        ) from err


def _what_it_holds(src: _Source) -> str:
    names = src.reader.names()
    members = sorted(f"`{n[: -len(_format.PTH_SUFFIX)]}/...`" for n in names if n.endswith(_format.PTH_SUFFIX))
    folders = [f or "(top level)" for f in _folders(names)]
    data = f"`data` in {', '.join(folders)}" if folders else "no `data`"
    return f"tensor members {', '.join(members) or 'none'} and {data}"
