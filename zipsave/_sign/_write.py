"""Writing signatures: the detached ``ARCHIVE.sig`` (``model_signing sign`` on the file), and the
embedded ``zipsave.sig`` member, signed over every other member as ``model_signing sign`` signs
the archive's members extracted into a folder."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from .. import _format
from .._archive import ArchiveReader, ArchiveWriter, MemberInfo, atomic_output, open_source
from .._calls import keyword_options
from ..exceptions import ArchiveFormatError
from . import _ms
from ._settings import Signer, as_signer

__all__ = ["embedded_signature", "sign", "sign_detached"]

_SMALL = 1 << 20


def embedded_signature(members: Iterable[MemberInfo], signer: Signer, model_name: str) -> bytes:
    """The ``zipsave.sig`` bundle for ``members`` (each with its SHA-256, as an
    :class:`~zipsave._archive.ArchiveWriter` with ``sha256=True`` records them)."""
    digests = []
    for m in members:
        if m.sha256 is None:
            raise ValueError(f"member `{m.name}` was written without a SHA-256; sign with ArchiveWriter(sha256=True)")
        if m.name != _format.SIGNATURE:
            digests.append((m.name, m.sha256))
    return _ms.sign_manifest(_ms.manifest_of(model_name, digests, [_format.SIGNATURE]), signer)


def sign_detached(path: str, signer: Signer, signature: str | None = None) -> str:
    """Write ``path``'s detached signature (``path + ".sig"`` by default); return its path."""
    out = signature or path + _format.SIGNATURE_SUFFIX
    _ms.sign_file(path, signer, out)
    return out


def _embed(path: str, signer: Signer) -> str:
    """Rewrite the archive at ``path`` with a (new) ``zipsave.sig``, atomically."""
    with open_source(path) as (fp, name):
        reader = ArchiveReader(fp, archive=name)
        try:
            with atomic_output(name) as out:
                writer = ArchiveWriter(out, sha256=True)
                for member in reader.names():
                    if member == _format.SIGNATURE:
                        continue
                    if reader.info(member).file_size <= _SMALL:
                        writer.write_bytes(member, reader.read(member, verify=False))
                        continue
                    with writer.open_member(member) as f:
                        for chunk in reader.iter_chunks(member):
                            f.write(chunk)
                writer.write_bytes(
                    _format.SIGNATURE, embedded_signature(writer.members, signer, os.path.basename(name))
                )
                writer.close()
        finally:
            reader.close()
    return name


@keyword_options("zipsave.sign", order=("signature",))
def sign(
    path: Any,
    signer: Signer | Any = None,
    *,
    signature: Any = None,
    embed: bool | None = None,
    private_key: Any = None,
    password: str | None = None,
    signing_certificate: Any = None,
    certificate_chain: Iterable[Any] = (),
) -> str:
    """Sign an archive in the OpenSSF model-signing format (the ``sign`` extra).

    The detached signature (the default) is the bundle ``model_signing sign key ARCHIVE`` writes,
    and ``model_signing verify`` accepts it. The embedded one is a ``zipsave.sig`` member
    signed over every other member (``model_signing verify`` accepts it for the archive's members
    extracted into a folder).

    Parameters
    ----------
    path
        The archive (a local path; ``.zip`` is tried too).
    signer
        A :class:`~zipsave.Signer`, or the path of a PEM private key; or give ``private_key=``
        and the other options below instead.
    signature
        Where to write the detached signature (default: ``ARCHIVE.sig``).
    embed
        Write the signature into the archive as ``zipsave.sig`` (rewriting it atomically)
        instead; ``None`` takes the signer's ``embed`` when a :class:`Signer` is given, else
        ``False``.
    private_key, password, signing_certificate, certificate_chain
        As :class:`~zipsave.Signer`'s, when ``signer`` is not given.

    Returns
    -------
    str
        The path written: the signature file, or the archive itself when embedded.

    Raises
    ------
    MissingDependencyError
        The ``sign`` extra is not installed.
    ArchiveFormatError
        ``path`` is not a readable zip archive.

    Examples
    --------
    >>> zipsave.sign("ppo.zip", "ci.pem")  # doctest: +SKIP
    'ppo.zip.sig'
    """
    if signer is None:
        signer = Signer(
            private_key=private_key,
            password=password,
            signing_certificate=signing_certificate,
            certificate_chain=certificate_chain,
        )
        embed = bool(embed)
    elif embed is None:
        embed = signer.embed if isinstance(signer, Signer) else False
    signer = as_signer(signer)
    assert signer is not None
    if hasattr(path, "read") or hasattr(path, "write"):
        raise TypeError("zipsave.sign signs a local archive file; it takes a path, not a file object.")
    local = os.fspath(path)
    if not os.path.isfile(local) and os.path.isfile(local + ".zip"):
        local += ".zip"
    if not os.path.isfile(local):
        raise ArchiveFormatError("does not exist (nothing to sign).", archive=local)
    if embed:
        if signature is not None:
            raise ValueError("signature= names a detached signature; it cannot be combined with embed=True.")
        return _embed(local, signer)
    return sign_detached(local, signer, os.fspath(signature) if signature is not None else None)
