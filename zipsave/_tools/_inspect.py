"""Look inside an archive without loading it: nothing is unpickled or ``torch.load``-ed; ``data``
is read as JSON, its pickles audited from their opcodes, and ``.pth`` members listed from their
``data.pkl`` by the metadata-only reader."""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import warnings
from typing import Any

import numpy as np

# On first use: the signature check (`trust=`), the byte check (`verify=True`), the pickle
# audit, stand-ins and default trust policy (an entry that names a global).
from .. import _format, _system_info, _tools, _trust
from .._archive import (
    ArchiveSource,
    Limits,
    MemberView,
    manifest_digest,
    parse_version,
)
from .._calls import keyword_options
from .._codec import NATIVE_KEY as _N
from .._codec import SERIALIZED_KEY as _S
from .._codec import TYPE_KEY as _T
from .._json import parse_json
from .._tensors import (
    Damaged,
    PthMeta,
    RefusedRef,
    SparseRef,
    TensorRef,
    Unsupported,
    dotted,
    read_pth_meta,
    walk_leaves,
)
from ..exceptions import (
    ArchiveFormatError,
    DecodeError,
    IntegrityError,
    ZipsaveError,
    as_zipsave_error,
    nesting_as_error,
)
from ._known import described_values, involve_handlers
from ._records import ArchiveInfo, ArchiveMember, ComponentInfo, DataEntry, TensorInfo
from ._render import format_shape, shorten

__all__ = ["data_folders", "inspect", "pth_meta", "stored_type"]

_CLASS_HINT = r"<class '(.+)'>"  # compiled (and cached by `re`) on first use
# Native kinds whose decoding imports a global by name (through the trust policy).
_REF_FIELDS = {"ref": "path", "enum": "class", "namedtuple": "class", "defaultdict": "factory"}


def _json_type(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def stored_type(value: Any) -> str:
    if isinstance(value, dict) and isinstance(value.get(_T), str):
        hint = value[_T]
        match = re.fullmatch(_CLASS_HINT, hint)
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
        return f"{kind} {dtype} {format_shape(tuple(shape)) if isinstance(shape, list) else shape}{where}"
    if kind == "space":
        return f"{body.get('space')} space"
    if kind in ("int", "float"):
        return shorten(str(body.get("value", body.get("hex"))))
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
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a deprecated alias ('a') is still only named here
                return np.dtype(descr).name
        except (TypeError, ValueError):  # a comma string numpy cannot parse ("2 i<") is a ValueError
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


def _global_trusted(name: str) -> bool:
    """Whether a load under the default policy (the allowlist, nothing more) admits ``name``."""
    module, _, qualname = name.rpartition(".")
    return name in _trust.SUBSTITUTED or (bool(module) and _trust.TrustPolicy().is_trusted(module, qualname))


def _describe_entry(component: str, key: str, value: Any, known: str | None = None) -> DataEntry:
    """``known``: what a registered integration says the value is, when a load rebuilds it
    without unpickling (SB3's schedule closures)."""
    pickles: list[str] = []
    refs: list[str] = []
    _scan(value, pickles, refs, False)
    names: set[str] = set(refs)
    for text in pickles:
        try:
            payload = base64.b64decode(text.encode("ascii"), validate=True) if isinstance(text, str) else b""
            names.update(_trust.pickle_globals(payload))
        except (binascii.Error, UnicodeEncodeError, DecodeError) as err:
            names.add(f"<unreadable pickle: {err}>")
    found = tuple(sorted(names))
    untrusted = tuple(g for g in found if not _global_trusted(g))
    if pickles:
        form = "pickle"
    elif isinstance(value, dict) and _N in value:
        form = "native"
    else:
        form = "json"
    if known is not None:
        summary = known
    elif isinstance(value, dict) and _N in value:
        summary = _native_summary(value[_N])
    elif isinstance(value, dict) and _S in value:
        summary = f"pickle, {len(value[_S]) * 3 // 4} bytes" if isinstance(value[_S], str) else "pickle"
    else:
        compact = _json_text(value)
        summary = shorten(compact if compact is not None else repr(value))
    return DataEntry(component, key, stored_type(value), form, summary, found, untrusted, known is not None)


def _json_text(value: Any) -> str | None:
    """``value`` as compact JSON, ``None`` where JSON cannot say it: a NaN or an infinity
    anywhere in it (SB3 archives hold them; its repr says them), which orjson wrote as
    ``null``. Python's json, which torch imported: orjson took 3-5 ms of a first inspect to
    import (its time zones)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


# -- inspect -----------------------------------------------------------------------------------
@keyword_options("zipsave.inspect")
@nesting_as_error
def inspect(
    path: Any,
    *,
    limits: Limits | None = None,
    storage_options: dict[str, Any] | None = None,
    verify: bool = False,
    trust: Any = None,
) -> ArchiveInfo:
    """Describe an archive without loading it: nothing is unpickled or ``torch.load``-ed.

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), URL, or readable binary file object (not closed).
    limits
        Safety limits (:class:`~zipsave.Limits`); the defaults suit any sane archive.
    storage_options
        Options for the ``fsspec`` filesystem of a URL (credentials, endpoint).
    verify
        Also read every byte and check it: each member against its CRC-32, and each tensor
        record of a ``.pth`` member against its own CRC-32 in ``manifest.json`` (archives
        without per-tensor checksums: the whole member). Sets ``ArchiveInfo.verified`` and
        adds one note per problem, naming the member and the tensor. Without it,
        ``verified`` is ``None``, or ``False`` when listing found a ``.pth`` member damaged
        (its note says so and points to ``zipsave verify``).
    trust
        A :class:`~zipsave.Trust`: check the archive's signature first (the ``sign`` extra)
        and name the signer in ``ArchiveInfo.signature``; see :doc:`signing`.

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
    SignatureError
        With ``trust``: the signature is missing, unknown, or does not match.

    Examples
    --------
    >>> info = zipsave.inspect("algo.zip")  # doctest: +SKIP
    >>> [t.name for t in info.tensors][:2]  # doctest: +SKIP
    ['policy/0.weight', 'policy/0.bias']
    """
    with ArchiveSource(path, limits=limits, storage_options=storage_options, check_version=False) as src:
        reader = src.reader
        signature = _signature(src, trust)
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
            zipsave_version, format_version = parse_version(_read_text(src, _format.VERSION, notes))
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
        for folder in data_folders(reader.names()):
            components.append(ComponentInfo(folder, _component_class(src, folder, notes)))
            member = _format.join(folder, _format.DATA)
            raw = _read_json(src, member, notes, check_digest=True)
            if isinstance(raw, dict):
                involve_handlers(src, folder)  # judged by their reviewed names, as a load of the folder is
                known = described_values(src, folder)  # e.g. SB3's schedules, which a load rebuilds
                data += [_describe_entry(folder, key, value, known.get(key)) for key, value in raw.items()]
            elif raw is not None:
                notes.append(f"`{member}`: holds a JSON {type(raw).__name__}, expected an object")

        tensors: list[TensorInfo] = []
        damaged: list[str] = []
        for name in reader.names():
            if name.endswith(_format.PTH_SUFFIX):
                tensors += _list_tensors(src, name, notes, damaged)
        verified = False if damaged else None  # damage seen while listing: known not intact
        if verify:
            problems = _tools.check_archive(src)
            notes += problems
            verified = not problems and not damaged
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
        verified=verified,
        signature=signature,
    )


def _signature(src: ArchiveSource, trust: Any) -> str | None:
    """The signature sentence of :attr:`ArchiveInfo.signature` (checked only with ``trust``)."""
    if trust is not None:
        checked = _tools.check_source(src, trust)
        return str(checked) if checked is not None else None
    if _format.SIGNATURE in src.reader:
        return f"embedded `{_format.SIGNATURE}`, not checked (inspect with trust= or run `zipsave verify` to check it)"
    beside = src.local_path + _format.SIGNATURE_SUFFIX if src.local_path else None
    if beside and os.path.isfile(beside):
        return f"detached `{beside}`, not checked (inspect with trust= or run `zipsave verify` to check it)"
    return None


def data_folders(names: list[str]) -> list[str]:
    """Every folder holding its own ``data`` member, the top level first."""
    suffix = "/" + _format.DATA
    found = [n[: -len(suffix)] for n in names if n.endswith(suffix)]
    return ([""] if _format.DATA in names else []) + sorted(found)


def _read_text(src: ArchiveSource, member: str, notes: list[str]) -> str:
    try:
        return src.reader.read(member, limit=1 << 20, verify=False).decode("utf-8", "replace")
    except ZipsaveError as err:
        notes.append(f"`{member}`: {err.detail}")
        return ""


def _read_json(src: ArchiveSource, member: str, notes: list[str], *, check_digest: bool = False) -> Any:
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
        return parse_json(raw, max_depth=src.limits.max_json_depth, limits=src.limits)
    except ZipsaveError as err:
        notes.append(f"`{member}`: {err.detail}")
        return None


def _component_class(src: ArchiveSource, folder: str, notes: list[str]) -> str | None:
    member = _format.join(folder, _format.INIT)
    if member not in src.reader:
        return None
    record = _read_json(src, member, notes)
    cls = record.get("class") if isinstance(record, dict) else None
    return cls if isinstance(cls, str) else None


def pth_meta(src: ArchiveSource, member: str, view: MemberView) -> PthMeta:
    try:
        return read_pth_meta(view, src.limits)
    except Damaged as err:
        import shlex  # a command to paste: the path quoted for the shell (only on this error)

        raise IntegrityError(
            f"is damaged ({err}): its bytes are not the torch file that was saved.",
            archive=src.name,
            member=member,
            hint=f"Run `zipsave verify {shlex.quote(src.name)}` to check every byte of the archive against its "
            "checksums.",
        ) from None
    except Unsupported as err:
        raise ArchiveFormatError(
            f"cannot be listed without `torch.load` ({err}).",
            archive=src.name,
            member=member,
            hint="`zipsave.load_archive` reads it with `weights_only=True`.",
        ) from None
    except ZipsaveError as err:  # a refusal of the pickle or its tree: named here
        as_zipsave_error(err, src.name, member=member)
        raise


def _list_tensors(src: ArchiveSource, member: str, notes: list[str], damaged: list[str]) -> list[TensorInfo]:
    try:
        with src.reader.open_view(member) as view:
            tree = pth_meta(src, member, view).tree
        out = []
        for path, ref in walk_leaves(tree, (TensorRef, SparseRef, RefusedRef)):
            if isinstance(ref, RefusedRef):  # what a load refuses is said, not listed as a tensor
                notes.append(f"`{member}`: `{dotted(path)}` is {ref.what}; loading it is refused.")
                continue
            nbytes = ref.nbytes if isinstance(ref, TensorRef) else sum(part.nbytes for part in ref.parts)
            out.append(TensorInfo(member, dotted(path), str(ref.dtype).removeprefix("torch."), ref.shape, nbytes))
        return out
    except ZipsaveError as err:
        notes.append(
            f"`{member}`: {err.detail}" + (f" {err.hint}" if isinstance(err, IntegrityError) and err.hint else "")
        )
        if isinstance(err, IntegrityError):
            damaged.append(member)
        return []
