"""The two small records of the ``sign`` extra: who signs (:class:`Signer`) and whom a load
trusts (:class:`Trust`). Building them imports nothing of ``model_signing``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Any

__all__ = ["Signer", "Trust", "as_signer"]


def _paths(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, os.PathLike)):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{field} must be a path or an iterable of paths, found {type(value).__name__}.") from None
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"{field} must hold paths (str or os.PathLike), found {type(item).__name__}.")
    return tuple(os.fspath(p) for p in items)


def _identities(value: Any) -> tuple[tuple[str, str], ...]:
    out = []
    for item in value or ():
        if isinstance(item, str) or not isinstance(item, Iterable):
            raise TypeError(
                "identities must hold (identity, identity_provider) pairs, e.g. "
                "[('ci@example.com', 'https://accounts.google.com')]."
            )
        pair = tuple(item)
        if len(pair) != 2 or not all(isinstance(s, str) and s for s in pair):
            raise TypeError(
                f"identities must hold (identity, identity_provider) pairs of non-empty strings, found {pair!r}."
            )
        out.append((pair[0], pair[1]))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Trust:
    """Which signers a load accepts, and whether an archive must be signed.

    Parameters
    ----------
    public_keys
        PEM public keys (paths) whose elliptic-curve signatures are accepted
        (``model_signing verify key --public_key``).
    certificates
        PEM certificates (paths) that anchor an accepted certificate chain
        (``model_signing verify certificate --certificate_chain``). Every certificate of the
        chain must also be valid now: an expired one is refused.
    identities
        ``(identity, identity_provider)`` pairs accepted from Sigstore keyless signatures
        (``model_signing verify sigstore --identity --identity_provider``). Checking one needs
        Sigstore's trust root: the network, or ``trust_config``.
    required
        Refuse an archive without a signature (the default). With ``False`` an unsigned archive
        loads as before, but a signature that is present must still hold.
    signature
        A detached signature to check, for one archive. By default the embedded
        ``zipsave.sig`` member is checked, else ``ARCHIVE.sig`` beside a local archive.
    use_staging
        Use Sigstore's staging instance (``--use_staging``).
    trust_config
        A Sigstore client trust configuration (``--trust_config``): a private Sigstore, or
        checking keyless signatures offline.

    Examples
    --------
    >>> trust = zipsave.Trust(public_keys=["ci.pub"])  # doctest: +SKIP
    >>> model = zipsave.load("ppo.zip", trust=trust)  # doctest: +SKIP
    """

    public_keys: Iterable[Any] = ()
    certificates: Iterable[Any] = ()
    identities: Iterable[tuple[str, str]] = ()
    required: bool = True
    signature: Any = None
    use_staging: bool = False
    trust_config: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "public_keys", _paths(self.public_keys, "public_keys"))
        object.__setattr__(self, "certificates", _paths(self.certificates, "certificates"))
        object.__setattr__(self, "identities", _identities(self.identities))
        if self.signature is not None:
            object.__setattr__(self, "signature", _paths(self.signature, "signature")[0])
        if self.trust_config is not None:
            object.__setattr__(self, "trust_config", _paths(self.trust_config, "trust_config")[0])
        if not (self.public_keys or self.certificates or self.identities):
            raise ValueError(
                "Trust accepts no signer: name public_keys=, certificates= or identities= "
                "(leave trust=None to load without checking signatures)."
            )


@dataclasses.dataclass(frozen=True)
class Signer:
    """How to sign an archive, as ``model_signing sign`` does.

    Parameters
    ----------
    private_key
        PEM elliptic-curve private key (P-256, P-384 or P-521), ``--private_key``.
    password
        The key's password, if it is encrypted (``--password``).
    signing_certificate
        PEM certificate of ``private_key``: sign with a certificate (``--signing_certificate``).
    certificate_chain
        PEM certificates from its issuer up to the root (``--certificate_chain``); needed with
        ``signing_certificate``.
    sigstore
        Sign keyless with Sigstore instead (needs the network and an OIDC identity).
    identity_token
        An OIDC token for Sigstore (``--identity_token``); else ambient credentials or a browser.
    use_staging
        Use Sigstore's staging instance (``--use_staging``).
    embed
        Where :func:`zipsave.save` and the checkpoint writers put the signature: inside the
        archive (``zipsave.sig``, the default) or beside it (``ARCHIVE.sig``).
    """

    private_key: Any = None
    password: str | None = dataclasses.field(default=None, repr=False)
    signing_certificate: Any = None
    certificate_chain: Iterable[Any] = ()
    sigstore: bool = False
    identity_token: str | None = dataclasses.field(default=None, repr=False)
    use_staging: bool = False
    embed: bool = True

    def __post_init__(self) -> None:
        key = _paths(self.private_key, "private_key")
        object.__setattr__(self, "private_key", key[0] if key else None)
        cert = _paths(self.signing_certificate, "signing_certificate")
        object.__setattr__(self, "signing_certificate", cert[0] if cert else None)
        object.__setattr__(self, "certificate_chain", _paths(self.certificate_chain, "certificate_chain"))
        if self.sigstore == (self.private_key is not None):
            raise ValueError("Signer needs a private_key= or sigstore=True (one of the two).")
        if self.signing_certificate is not None and self.private_key is None:
            raise ValueError("signing_certificate= needs the private_key= it certifies.")
        if self.signing_certificate is not None and not self.certificate_chain:
            # model_signing 1.1 cannot load an empty chain, and a verifier needs the issuer
            raise ValueError("signing_certificate= needs certificate_chain=: the certificates up to the root.")

    @property
    def kind(self) -> str:
        """``"key"``, ``"certificate"`` or ``"sigstore"``."""
        if self.sigstore:
            return "sigstore"
        return "certificate" if self.signing_certificate is not None else "key"


def as_signer(value: Any) -> Signer | None:
    """``sign=`` of the writing verbs: a :class:`Signer`, a private key path, or ``None``."""
    if value is None or isinstance(value, Signer):
        return value
    if isinstance(value, (str, os.PathLike)):
        return Signer(private_key=value)
    raise TypeError(f"sign= takes a zipsave.Signer or the path of a private key, found {type(value).__name__}.")
