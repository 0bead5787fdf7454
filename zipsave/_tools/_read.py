"""Random access: one tensor (``member/key``) or one ``data`` key read alone; only its bytes are
read, and they are checked."""

from __future__ import annotations

import difflib
from typing import Any

import torch

from .. import _format, _tools  # _tools: the signature check (`trust=`) and the registry, when used
from .._archive import ArchiveSource, Limits, MemberView
from .._calls import keyword_options
from .._codec import Decoder
from .._tensors import (
    PthMeta,
    RefusedRef,
    SparseRef,
    TensorRef,
    check_tensor,
    dotted,
    get_device,
    load_member,
    lookup,
    read_array_once,
    read_record,
    record_table,
    torch_dtype,
    walk_leaves,
)
from .._tensors._invariants import refuse_refused
from .._tensors._tree import check_views
from .._trust import TrustPolicy
from ..exceptions import ArchiveFormatError, DecodeError, UnsafeGlobalError, ZipsaveError, nesting_as_error
from ._inspect import data_folders, pth_meta
from ._known import involve_handlers, known_values

__all__ = ["read"]

_PIECE = 1 << 20


@keyword_options("zipsave.read", order=("device",))
@nesting_as_error
def read(
    path: Any,
    name: str,
    *,
    device: Any = "cpu",
    allow_pickle: bool = False,
    trusted: Any = (),
    limits: Limits | None = None,
    storage_options: dict[str, Any] | None = None,
    mmap: bool = False,
    trust: Any = None,
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
    addresses :func:`inspect` lists (:attr:`~zipsave.TensorInfo.name`,
    :attr:`~zipsave.DataEntry.name`) always work. A state dict given as a value of an app
    state (``{"model": model.state_dict()}``) is read whole by its key (``model``), as when
    it was a ``data`` key.

    Only the bytes of the tensor's storage record are read (plus the member's small
    ``data.pkl``); a ``data`` key decodes from the JSON member and, if it refers to one,
    its own ``arrays/<id>.npy``. The zip directory entry is checked against
    ``manifest.json``, and the bytes read are checked: a tensor's storage record (and
    ``data.pkl``) against the per-tensor CRC-32 of ``manifest.json``, or, in an archive
    without per-tensor checksums (written before zipsave 0.2, or by SB3), the whole
    ``.pth`` member against its CRC-32, which reads the member once. A mismatch raises
    :class:`~zipsave.IntegrityError` naming the tensor.

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), URL, or readable binary file object (not closed).
    name
        What to read, as above.
    device
        Where the tensor goes (default ``"cpu"``; ``"auto"`` picks CUDA when available).
    allow_pickle, trusted
        The trust policy for a pickled ``data`` key; see :doc:`security`.
    limits
        Safety limits (:class:`~zipsave.Limits`).
    storage_options
        Options for the ``fsspec`` filesystem of a URL (credentials, endpoint).
    mmap
        Back the tensor by the archive's own pages (a private, copy-on-write map of a local
        file) instead of copying it; checked the same way, once, when read. See
        :ref:`mmap-loads` for what a later save or a truncation of the file does.
    trust
        A :class:`~zipsave.Trust`: check the archive's signature before reading (the ``sign``
        extra). A signature covers the whole archive, so every member is hashed first; see
        :doc:`signing`.

    Returns
    -------
    torch.Tensor or object
        The tensor, or the decoded value.

    Raises
    ------
    ArchiveFormatError
        ``name`` addresses nothing in the archive (the message names the nearest addresses, if
        any, and lists what it holds).
    UnsafeGlobalError
        The ``data`` key needs a global the trust policy refuses.
    IntegrityError
        The member holding the tensor (or the ``data`` key's array) does not match its checksum.
    SignatureError
        With ``trust``: the signature is missing, unknown, or does not match.

    Examples
    --------
    >>> w = zipsave.read("algo.zip", "policy/0.weight")  # doctest: +SKIP
    >>> lr = zipsave.read("algo.zip", "learning_rate")  # doctest: +SKIP
    """
    if not isinstance(name, str) or not name.strip("/"):
        raise TypeError(f"name must be a non-empty string such as 'policy/0.weight', got {name!r}.")
    name = name.strip("/")
    policy = TrustPolicy.make(allow_pickle=allow_pickle, trusted=trusted)
    target = get_device(device, mmap=mmap)
    with ArchiveSource(path, limits=limits, storage_options=storage_options) as src:
        if trust is not None:
            _tools.check_source(src, trust)
        whole = _format.state_dict_member(name)
        if whole in src.reader.state_dict_values and whole in src.reader:
            return load_member(src.reader, whole, device=target, mmap=mmap)[0]
        for prefix, is_tensor in _candidates(src.reader.names()):
            if prefix and not name.startswith(prefix + "/"):
                continue
            rest = name[len(prefix) + 1 :] if prefix else name
            if is_tensor:
                member = prefix + _format.PTH_SUFFIX
                with src.reader.open_view(member) as view:
                    meta = pth_meta(src, member, view)
                    found = _find_ref(src, member, meta, rest)
                    if found is not None:
                        return _read_value(src, member, view, meta, found, target, mmap)
            else:
                member = _format.join(prefix, _format.DATA)
                raw = src.read_json(member)
                if isinstance(raw, dict) and rest in raw:
                    involve_handlers(src, prefix)  # their reviewed names, as a load of the folder has them
                    try:
                        return _decode_key(src, policy, target, member, rest, raw[rest])
                    except UnsafeGlobalError:
                        known = known_values(src, policy, prefix)  # SB3's schedule closures, as load_archive
                        if rest in known:
                            return known[rest]
                        raise
        near = _near(src, name)
        raise ArchiveFormatError(
            f"`{name}` names no tensor and no `data` key.",
            archive=src.name,
            hint=(f"Did you mean {' or '.join(f'`{a}`' for a in near)}? " if near else "")
            + f"It holds {_what_it_holds(src)}; `zipsave inspect` lists every address.",
        )


def _candidates(names: list[str]) -> list[tuple[str, bool]]:
    """(prefix, is .pth member) pairs, longest prefix first, members before data."""
    found = [(n[: -len(_format.PTH_SUFFIX)], True) for n in names if n.endswith(_format.PTH_SUFFIX)]
    found += [(folder, False) for folder in data_folders(names)]
    return sorted(found, key=lambda item: (-len(item[0]), not item[1]))


def _read_value(
    src: ArchiveSource,
    member: str,
    view: MemberView,
    meta: PthMeta,
    found: tuple[tuple, Any],
    device: torch.device,
    mmap: bool,
) -> torch.Tensor:
    """The tensor at ``found`` (path, reference), checked as a whole load checks it."""
    path, ref = found
    try:
        refuse_refused({dotted(path): ref} if isinstance(ref, RefusedRef) else None)
        check_views(meta.tree, {key: length for key, (_, length) in meta.records.items()})  # as a load checks
        if isinstance(ref, SparseRef):  # assembled and validated with its parts, as a load does
            tree, _ = load_member(src.reader, member, device=device)
            return lookup(tree, path)
        tensor = _read_tensor(src, member, view, meta, ref, device, dotted(path), mmap)
        check_tensor(tensor, key=dotted(path))
    except ZipsaveError as err:
        err.archive, err.member = err.archive or src.name, err.member or member
        err.args = (err._compose(),)
        raise
    return tensor


def _find_ref(src: ArchiveSource, member: str, meta: PthMeta, rest: str) -> tuple[tuple, Any] | None:
    leaves = walk_leaves(meta.tree, (TensorRef, SparseRef, RefusedRef))
    matches = [(path, ref) for path, ref in leaves if rest in ("/".join(map(str, path)), dotted(path))]
    if len(matches) > 1:
        raise ArchiveFormatError(
            f"`{rest}` matches several tensors: {sorted(dotted(p) for p, _ in matches)}.",
            archive=src.name,
            member=member,
        )
    return matches[0] if matches else None


def _read_tensor(
    src: ArchiveSource,
    member: str,
    view: MemberView,
    meta: PthMeta,
    ref: TensorRef,
    device: torch.device,
    key: str,
    mmap: bool = False,
) -> torch.Tensor:
    src.reader.check_recorded(member)
    if ref.storage.key not in meta.records:
        raise ArchiveFormatError(
            f"`data.pkl` names storage record `{ref.storage.key}`, which is missing.", archive=src.name, member=member
        )
    start, length = meta.records[ref.storage.key]
    itemsize, dtype = ref.dtype.itemsize, torch_dtype(ref.dtype)
    if ref.numel == 0:
        tensor = torch.empty(ref.size, dtype=dtype)
    else:
        extent = 1 + sum((n - 1) * s for n, s in zip(ref.size, ref.stride))
        first, nbytes = ref.offset * itemsize, extent * itemsize
        if first + nbytes > length:
            raise ArchiveFormatError(
                f"storage record `{ref.storage.key}` holds {length} bytes, fewer than its tensor needs.",
                archive=src.name,
                member=member,
            )
        try:
            buf = read_record(
                view,
                meta,
                ref.storage.key,
                table=record_table(src.reader.expected(member)),
                member_crc=src.reader.info(member).CRC,
                tensors=f"`{key}`",
                mmap=mmap,
            )
        except ZipsaveError as err:
            err.archive, err.member = src.name, member
            err.args = (err._compose(),)
            raise
        offset = ref.offset
        if not mmap and nbytes < length:  # the whole record was read to check it; keep the span
            buf, offset = buf[first : first + nbytes].clone(), 0
        tensor = torch.empty(0, dtype=dtype).set_(buf.untyped_storage(), offset, ref.size, ref.stride)
    if device.type != "cpu":
        tensor = tensor.to(device)
    if ref.parameter:
        return torch.nn.Parameter(tensor, requires_grad=ref.requires_grad)
    return tensor.requires_grad_(ref.requires_grad) if ref.requires_grad else tensor


def _decode_key(
    src: ArchiveSource, policy: TrustPolicy, device: torch.device, member: str, key: str, value: Any
) -> Any:
    decoder = Decoder(
        policy,
        load_array=lambda name: read_array_once(src, name),
        device=device,
        max_depth=src.limits.max_json_depth,
        limits=src.limits,
        archive=src.name,
        member=member,
    )
    try:
        return decoder.decode_entry(key, value)
    except ZipsaveError as err:
        err.archive, err.member, err.key = err.archive or src.name, err.member or member, err.key or key
        err.args = (err._compose(),)
        raise
    except Exception as err:  # a space or class constructor rejecting its saved arguments
        raise DecodeError(
            f"could not be decoded ({type(err).__name__}: {err}).", archive=src.name, member=member, key=key
        ) from err


def _what_it_holds(src: ArchiveSource) -> str:
    names = src.reader.names()
    members = sorted(f"`{n[: -len(_format.PTH_SUFFIX)]}/...`" for n in names if n.endswith(_format.PTH_SUFFIX))
    folders = [f"`{f}`" if f else "the top-level folder" for f in data_folders(names)]
    data = f"`data` keys in {', '.join(folders)}" if folders else "no `data`"
    tensors = f"tensor members {', '.join(members)}" if members else "no tensor members"
    return f"{tensors} and {data}"


def _near(src: ArchiveSource, name: str) -> list[str]:
    """Addresses that ``name`` may have meant: the same key without its member
    (``action_net.weight``), dotted (``policy.action_net.weight``), a whole member's tensors
    (``policy``, ``policy.pth``), or misspelt."""
    addresses: list[str] = []
    for prefix, is_tensor in _candidates(src.reader.names()):
        try:
            if is_tensor:
                member = prefix + _format.PTH_SUFFIX
                with src.reader.open_view(member) as view:
                    leaves = walk_leaves(pth_meta(src, member, view).tree, (TensorRef, SparseRef, RefusedRef))
                addresses += [f"{prefix}/{dotted(path)}" for path, _ in leaves]
            else:
                raw = src.read_json(_format.join(prefix, _format.DATA))
                addresses += [f"{prefix}/{key}" if prefix else key for key in raw] if isinstance(raw, dict) else []
        except ZipsaveError:
            continue  # a damaged member suggests nothing; the error names the address asked for
    member = name.removesuffix(_format.PTH_SUFFIX) + "/"  # a whole member: some of its tensors
    same = [a for a in addresses if a.rpartition("/")[2] == name or a.replace("/", ".") == name or a.startswith(member)]
    return (same or difflib.get_close_matches(name, addresses, n=3, cutoff=0.8))[:3]
