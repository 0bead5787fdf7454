"""Checking an archive's signature before anything of it is decoded: find the signature
(embedded ``zipsave.sig``, or ``ARCHIVE.sig``), verify it against the caller's :class:`Trust`, and
compare every member's SHA-256 (or the whole file's) with what it signed."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any

from .. import _format
from .._archive import ArchiveSource, Limits
from ..exceptions import SignatureError, StorageError, ZipsaveError
from . import _ms
from ._bundle import MAX_BUNDLE_BYTES, Bundle, parse_bundle, shown
from ._settings import Trust

__all__ = ["SignatureInfo", "check_source", "verify_signature"]

_CHUNK = 4 << 20


@dataclasses.dataclass(frozen=True)
class SignatureInfo:
    """A signature that held: who signed, how, where the signature was, and how many members
    (or, for a detached signature, the whole file) it covered."""

    signer: str
    kind: str
    location: str
    embedded: bool
    members: int

    def __str__(self) -> str:
        what = f"{self.members} member{'s' if self.members != 1 else ''}" if self.embedded else "the whole file"
        return f"signed by {self.signer}; signature {self.location} covers {what}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _error(
    reason: str, detail: str, source: ArchiveSource, where: str | None = None, hint: str | None = None
) -> SignatureError:
    return SignatureError(detail, reason=reason, archive=source.name, member=where, hint=hint)


def _read_signature(source: ArchiveSource, trust: Trust) -> tuple[bytes, str, bool] | None:
    """``(bytes, where, embedded)`` of the signature to check, or ``None`` when there is none."""
    if trust.signature is None and source.has(_format.SIGNATURE):
        info = source.reader.info(_format.SIGNATURE)
        if info.file_size > MAX_BUNDLE_BYTES:
            raise _error(
                "malformed",
                f"is {info.file_size} bytes, more than the {MAX_BUNDLE_BYTES} a signature may be.",
                source,
                _format.SIGNATURE,
            )
        return source.reader.read(_format.SIGNATURE, limit=MAX_BUNDLE_BYTES, verify=False), _format.SIGNATURE, True
    path = trust.signature
    if path is None and source.local_path is not None:
        path = source.local_path + _format.SIGNATURE_SUFFIX
        if not os.path.isfile(path):
            return None
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BUNDLE_BYTES + 1)
    except OSError as err:
        raise _error("no-signature", f"the signature `{path}` cannot be read ({err.strerror or err}).", source) from err
    return raw, path, False


#: A PEM key, certificate chain or trust configuration is a few kilobytes; more is not one.
_MAX_TRUST_FILE = 1 << 20


def _check_trust_files(trust: Trust) -> None:
    """Every file ``trust`` names (public keys, certificates, a trust configuration) can be read,
    and every public key is a PEM public key: checked before the archive's signature, so a
    mistyped ``--public_key`` is said as such, not as an unsigned archive or an unknown signer.

    Raises
    ------
    StorageError
        A file is missing or cannot be read (``errno`` is the cause's).
    ZipsaveError
        A public key file holds no PEM public key, or a file is too large to be one.
    """
    named = [("public key", "--public_key", "public_keys", p) for p in trust.public_keys]
    named += [("certificate", "--certificate_chain", "certificates", p) for p in trust.certificates]
    if trust.trust_config is not None:
        named.append(("trust configuration", "--trust_config", "trust_config", trust.trust_config))
    for what, option, field, path in named:
        hint = f"Check the path given to {option} (Trust({field}=...))."
        try:
            with open(path, "rb") as f:
                raw = f.read(_MAX_TRUST_FILE + 1)
        except OSError as err:
            found = (
                "does not exist." if isinstance(err, FileNotFoundError) else f"cannot be read ({err.strerror or err})."
            )
            raise StorageError(f"the trusted {what} `{path}` {found}", errno=err.errno, hint=hint) from err
        if len(raw) > _MAX_TRUST_FILE:
            raise ZipsaveError(
                f"the trusted {what} `{path}` is more than {_MAX_TRUST_FILE} bytes: not a PEM file.", hint=hint
            )
        if what == "public key" and not _ms.is_public_key(raw):
            raise ZipsaveError(
                f"the trusted public key `{path}` holds no PEM public key.",
                hint="Give the public half of the signing key, in PEM form (-----BEGIN PUBLIC KEY-----).",
            )


def check_source(source: ArchiveSource, trust: Trust) -> SignatureInfo | None:
    """Check the signature of the open archive ``source`` against ``trust``; nothing of it is
    decoded. Returns ``None`` for an unsigned archive when ``trust.required`` is false.

    Raises
    ------
    SignatureError
        No signature where one is required, an unknown signer, a member that does not match,
        a signature over another file, or a signature that cannot be read.
    """
    _check_trust_files(trust)
    found = _read_signature(source, trust)
    if found is None:
        if not trust.required:
            return None
        beside = f" nor `{source.local_path}{_format.SIGNATURE_SUFFIX}` beside it" if source.local_path else ""
        raise _error(
            "no-signature",
            f"is not signed: it has no `{_format.SIGNATURE}` member{beside}, and the trust setting requires one.",
            source,
            hint="Sign it with `zipsave sign`, or load it with `Trust(..., required=False)` to accept unsigned archives.",
        )
    raw, where, embedded = found
    bundle = parse_bundle(raw, archive=source.name, where=where)
    try:
        checked, why = _ms.verify_bundle(bundle, trust)
    except ZipsaveError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever a hostile bundle makes model_signing raise
        raise _error("invalid", f"the signature `{where}` cannot be checked: {err}.", source) from err
    if checked is None:
        reason, _, detail = why.partition(": ")
        raise _error(reason, f"the signature `{where}` is refused: {detail}", source)
    if embedded:
        members = _compare_members(source, bundle, checked, where)
    else:
        _compare_file(source, checked, where)
        members = len(source.names())
    return SignatureInfo(checked.signer, checked.kind, where, embedded, members)


def _check_serialization(source: ArchiveSource, checked: Any, where: str) -> None:
    method, hash_type = checked.serialization.get("method"), checked.serialization.get("hash_type")
    if method != "files" or hash_type != "sha256":
        raise _error(
            "invalid",
            f"the signature `{where}` hashes {method!r} with {hash_type!r}; zipsave checks "
            "signatures made per file with SHA-256 (model_signing's default).",
            source,
        )
    bad = sorted({alg for alg, _ in checked.resources.values() if alg != "sha256"})
    if bad:
        raise _error("invalid", f"the signature `{where}` uses the digests {bad}; zipsave checks SHA-256.", source)


def _compare_file(source: ArchiveSource, checked: Any, where: str) -> None:
    _check_serialization(source, checked, where)
    digest = hashlib.sha256()
    fp = source.file
    fp.seek(0)
    if hasattr(fp, "readinto"):
        buffer = memoryview(bytearray(_CHUNK))
        while n := fp.readinto(buffer):
            digest.update(buffer[:n])
    else:
        while chunk := fp.read(_CHUNK):
            digest.update(chunk)
    mine = digest.hexdigest()
    if set(checked.resources) != {"."}:
        raise _error(
            "other-file",
            f"the signature `{where}` covers `{shown(checked.model_name)}`, a folder of "
            f"{len(checked.resources)} files, not this archive file.",
            source,
        )
    theirs = checked.resources["."][1]
    if theirs == mine:
        return
    same_name = checked.model_name == os.path.basename(source.name)
    raise _error(
        "digest-mismatch" if same_name else "other-file",
        f"the signature `{where}` covers `{shown(checked.model_name)}` with SHA-256 {theirs}, but this file's SHA-256 is {mine}"
        + (": the archive changed after it was signed." if same_name else ": it is the signature of another file."),
        source,
    )


def _compare_members(source: ArchiveSource, bundle: Bundle, checked: Any, where: str) -> int:
    _check_serialization(source, checked, where)
    signed = {name: hex_ for name, (_, hex_) in checked.resources.items()}
    names = [
        n
        for n in source.names()
        if n != _format.SIGNATURE and not (n.endswith("/") and source.reader.info(n).file_size == 0)
    ]
    if set(signed) == {"."}:
        raise _error(
            "other-file",
            f"the signature `{where}` is a detached signature of the file "
            f"`{shown(checked.model_name)}`, not of this archive's members.",
            source,
        )
    added = sorted(set(names) - set(signed))
    missing = sorted(set(signed) - set(names))
    differ = []
    matched = 0
    buffer = memoryview(bytearray(_CHUNK))
    for name in names:
        if name not in signed:
            continue
        if _member_sha256(source, name, buffer) == signed[name]:
            matched += 1
        else:
            differ.append(name)
    if not (added or missing or differ):
        return len(names)
    parts = []
    if differ:
        parts.append(f"members whose bytes differ from what was signed: {_names(differ)}")
    if added:
        parts.append(f"members the signature does not cover (added or renamed): {_names(added)}")
    if missing:
        parts.append(f"signed members missing from the archive (removed or renamed): {_names(missing)}")
    other = matched == 0
    text = "; ".join(parts)
    if other:
        text += ". No member matches: it is the signature of another archive"
    raise _error(
        "other-file" if other else "digest-mismatch", f"the signature `{where}` does not match: {text}.", source
    )


def _member_sha256(source: ArchiveSource, name: str, buffer: memoryview) -> str:
    """The SHA-256 of a member's uncompressed bytes, read in place into ``buffer`` (a deflated
    member is inflated first, with the reader's limits)."""
    digest = hashlib.sha256()
    with source.reader.open_view(name) as view:
        done = 0
        while done < view.size:
            n = view.read_at(done, buffer[: min(len(buffer), view.size - done)])
            if n <= 0:
                raise _error("digest-mismatch", f"member `{name}` ends early (truncated).", source)
            digest.update(buffer[:n])
            done += n
    return digest.hexdigest()


def _names(names: list[str]) -> str:
    listed = ", ".join(f"`{shown(n)}`" for n in names[:10])
    return listed + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def verify_signature(
    path: Any, trust: Trust, *, limits: Limits | None = None, storage_options: dict[str, Any] | None = None
) -> SignatureInfo | None:
    """Check the signature of the archive at ``path`` against ``trust`` and every member against it.

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), URL, or readable binary file object (not closed).
    trust
        The accepted signers (:class:`~zipsave.Trust`); ``trust.signature`` names a detached
        signature, else the embedded one or ``ARCHIVE.sig`` is checked.
    limits
        Safety limits (:class:`~zipsave.Limits`).
    storage_options
        Options for the fsspec filesystem of a URL ``path``.

    Returns
    -------
    SignatureInfo or None
        Who signed, and where the signature was; ``None`` only for an unsigned archive under
        ``Trust(required=False)``.

    Raises
    ------
    SignatureError
        The signature is missing, unknown, or does not match the archive.

    Examples
    --------
    >>> zipsave.verify_signature("ppo.zip", zipsave.Trust(public_keys=["ci.pub"]))  # doctest: +SKIP
    SignatureInfo(signer='public key `ci.pub` (sha256:...)', ...)
    """
    with ArchiveSource(path, limits=limits, storage_options=storage_options, check_version=False) as source:
        return check_source(source, trust)
