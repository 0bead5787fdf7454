"""The one module that calls ``model_signing``: its signers and verifiers, so that a signature
zipsave writes is one ``model_signing`` writes and checks, and one it wrote is checked by its own
code. Imported only when something is signed or a signature checked."""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
from collections.abc import Iterable
from typing import Any

from .._optional import require
from ..exceptions import ZipsaveError
from ._bundle import Bundle, shown
from ._settings import Signer, Trust

__all__ = ["Checked", "is_public_key", "manifest_of", "sign_file", "sign_manifest", "verify_bundle"]

_FEATURE = "Signing and checking signatures"


def _ms() -> Any:
    require("OpenSSL", package="pyOpenSSL", extra="sign", feature=_FEATURE)  # model_signing imports it undeclared
    return require("model_signing", package="model-signing", extra="sign", feature=_FEATURE)


def _config(signer: Signer) -> Any:
    """model_signing's signing configuration for ``signer``; a key or certificate it cannot use
    is a :class:`ZipsaveError` naming the file."""
    ms = _ms()
    try:
        return _make_config(ms, signer)
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 - cryptography's and model_signing's errors, as one
        what = (
            f"`{signer.signing_certificate}` and `{signer.private_key}`"
            if signer.signing_certificate
            else (f"`{signer.private_key}`" if signer.private_key else "Sigstore")
        )
        raise ZipsaveError(
            f"cannot sign with {what}: {_cause(err)}.",
            hint="model-signing signs with elliptic-curve keys (P-256, P-384, P-521) in PEM form.",
        ) from err


def _make_config(ms: Any, signer: Signer) -> Any:
    config = ms.signing.Config()
    if signer.sigstore:
        return config.use_sigstore_signer(identity_token=signer.identity_token, use_staging=signer.use_staging)
    if signer.signing_certificate is not None:
        return config.use_certificate_signer(
            private_key=signer.private_key,
            signing_certificate=signer.signing_certificate,
            certificate_chain=signer.certificate_chain,
        )
    # model_signing (1.1) hands the password to cryptography's PEM loader, which takes bytes only:
    # a str (what its signature and zipsave's Signer say) failed every encrypted key.
    password = signer.password.encode() if isinstance(signer.password, str) else signer.password
    return config.use_elliptic_key_signer(private_key=signer.private_key, password=password)


def sign_file(path: str, signer: Signer, signature: str) -> None:
    """Sign the file ``path`` as ``model_signing sign`` does, writing the bundle to ``signature``."""
    ms = _ms()
    hashing = ms.hashing.Config().set_ignored_paths(paths=[], ignore_git_paths=True).set_allow_symlinks(False)
    _config(signer).set_hashing_config(hashing).sign(path, signature)


def manifest_of(model_name: str, digests: Iterable[tuple[str, str]], ignore_paths: Iterable[str]) -> Any:
    """A model-signing manifest of ``(name, sha256 hex)`` pairs, serialized as files: the one
    ``model_signing`` computes for the archive's members extracted into a folder."""
    ms = _ms()
    from model_signing._hashing import hashing  # the Digest type its manifests hold

    serialization = ms.manifest.SerializationType.from_args(
        {"method": "files", "hash_type": "sha256", "allow_symlinks": False, "ignore_paths": list(ignore_paths)}
    )
    items = [
        ms.manifest.FileManifestItem(
            path=pathlib.PurePosixPath(name), digest=hashing.Digest("sha256", bytes.fromhex(hex_))
        )
        for name, hex_ in digests
    ]
    return ms.manifest.Manifest(model_name, items, serialization)


def sign_manifest(manifest: Any, signer: Signer) -> bytes:
    """The bundle ``model_signing`` writes for ``manifest``, as bytes."""
    from model_signing._signing import signing

    config = _config(signer)
    signature = config._signer.sign(signing.Payload(manifest))
    return signature.bundle.to_json().encode("utf-8")


class Checked:
    """What a verified bundle signed: ``resources`` (``{name: (algorithm, digest hex)}``), the
    statement's ``subject`` name and ``serialization``, and who signed (``signer``)."""

    def __init__(self, manifest: Any, signer: str, kind: str) -> None:
        self.resources = {
            rd.identifier: (rd.digest.algorithm, rd.digest.digest_hex) for rd in manifest.resource_descriptors()
        }
        self.model_name = manifest.model_name
        self.serialization = manifest.serialization_type
        self.signer = signer
        self.kind = kind


def _pb_signature(bundle: Bundle, hint: str | None = None) -> Any:
    """The bundle as model_signing's protobuf-based signature (key and certificate signers),
    with the same adjustments its ``Signature.read`` makes. ``hint`` fills a missing key hint
    (older bundles), which model_signing would otherwise warn about on standard output; the
    hint is not signed, only the key that verifies counts."""
    from model_signing._signing import sign_sigstore_pb
    from sigstore_models.bundle import v1 as bundle_pb

    data = json.loads(json.dumps(bundle.data))  # a copy to adjust
    material = data["verificationMaterial"]
    material.setdefault("tlogEntries", [])
    if "publicKey" in material and isinstance(material["publicKey"], dict):
        if not material["publicKey"].get("hint"):
            material["publicKey"]["hint"] = hint
        for k in ("rawBytes", "keyDetails"):
            material["publicKey"].pop(k, None)
    return sign_sigstore_pb.Signature(bundle_pb.Bundle.from_dict(data))


def is_public_key(raw: bytes) -> bool:
    """Whether ``raw`` is a PEM public key (``True`` where ``cryptography`` is missing: the
    check that needs it then says what to install)."""
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        return True
    try:
        serialization.load_pem_public_key(raw)
    except (ValueError, TypeError):  # not PEM, or not a public key
        return False
    except Exception:  # noqa: BLE001 - cryptography's UnsupportedAlgorithm: a key it cannot use
        return True  # said by model_signing's verifier, with its own words
    return True


def key_hint(path: str) -> str:
    """The ``hint`` model-signing records for a public key: the SHA-256 of its PEM form."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(pathlib.Path(path).read_bytes())
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def verify_bundle(bundle: Bundle, trust: Trust) -> tuple[Checked | None, str]:
    """Check ``bundle``'s signature against ``trust`` with model_signing's verifiers.

    Returns ``(checked, "")`` or ``(None, why)`` where ``why`` starts with ``unknown-signer:`` or
    ``invalid:``; never raises for a bad signature.
    """
    _ms()
    if bundle.kind == "key":
        return _verify_key(bundle, trust)
    if bundle.kind == "certificate":
        return _verify_certificate(bundle, trust)
    return _verify_sigstore(bundle, trust)


def _verify_key(bundle: Bundle, trust: Trust) -> tuple[Checked | None, str]:
    from model_signing._signing import sign_ec_key

    hint = bundle.key_hint
    known = {}
    for path in trust.public_keys:
        try:
            known[key_hint(path)] = path
        except (OSError, ValueError, TypeError) as err:
            raise ValueError(f"public key `{path}` cannot be read: {err}") from err
    if not known:
        return None, "unknown-signer: it is signed with a key, and the trust setting names no public_keys."
    candidates = [known[hint]] if hint in known else ([] if hint else list(known.values()))
    if not candidates and hint:
        return None, (
            f"unknown-signer: it is signed by the key sha256:{shown(hint[:16])}..., which is not among the trusted "
            f"public keys ({', '.join(f'`{p}` sha256:{h[:16]}...' for h, p in sorted(known.items()))})."
        )
    why = ""
    for path in candidates:
        try:
            manifest = sign_ec_key.Verifier(pathlib.Path(path)).verify(_pb_signature(bundle, key_hint(path)))
        except Exception as err:  # noqa: BLE001 - any failure of a hostile bundle is a refusal
            why = f"invalid: the signature does not verify with the public key `{path}` ({_cause(err)})."
            continue
        return Checked(manifest, f"public key `{path}` (sha256:{key_hint(path)[:16]}...)", "key"), ""
    return None, why


def _leaf(bundle: Bundle) -> Any:
    from cryptography import x509

    certs = bundle.data["verificationMaterial"]["x509CertificateChain"].get("certificates") or []
    return [x509.load_der_x509_certificate(base64.b64decode(c["rawBytes"])) for c in certs]


def _expired(chain: list[Any], anchors: Iterable[str]) -> str:
    """Why a certificate of ``chain`` or a trusted anchor is not valid now ("" when all are).

    model_signing 1.1 checks the chain as of the leaf's ``notBefore`` (a bundle carries no
    trusted time); a key whose certificate expired may be in anyone's hands, so zipsave also
    requires every certificate to be valid when the archive is loaded."""
    import datetime

    from cryptography import x509

    now = datetime.datetime.now(datetime.timezone.utc)
    anchor_certs = []
    for path in anchors:
        anchor_certs.extend(x509.load_pem_x509_certificates(pathlib.Path(path).read_bytes()))
    for cert in [*chain, *anchor_certs]:
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            return (
                f"the certificate `{cert.subject.rfc4514_string()}` is valid from {cert.not_valid_before_utc:%Y-%m-%d} "
                f"to {cert.not_valid_after_utc:%Y-%m-%d}, not now"
            )
    return ""


def _verify_certificate(bundle: Bundle, trust: Trust) -> tuple[Checked | None, str]:
    from model_signing._signing import sign_certificate

    try:
        chain = _leaf(bundle)
    except Exception as err:  # noqa: BLE001
        return None, f"invalid: its certificate chain cannot be read ({_cause(err)})."
    if not chain:
        return None, "invalid: its certificate chain is empty."
    subject = chain[0].subject.rfc4514_string()
    if not trust.certificates:
        return (
            None,
            f"unknown-signer: it is signed with the certificate `{subject}`, and the trust setting names no certificates.",
        )
    try:
        verifier = sign_certificate.Verifier([pathlib.Path(p) for p in trust.certificates])
    except Exception as err:  # noqa: BLE001
        raise ValueError(f"the trusted certificates cannot be read: {_cause(err)}") from err
    try:
        manifest = verifier.verify(_pb_signature(bundle))
    except Exception as err:  # noqa: BLE001
        return (
            None,
            f"unknown-signer: the certificate `{subject}` does not chain to a trusted certificate or does not sign this ({_cause(err)}).",
        )
    expired = _expired(chain, trust.certificates)
    if expired:
        return None, f"unknown-signer: {expired} (expired or not yet valid)."
    return Checked(manifest, f"certificate `{subject}`", "certificate"), ""


def _verify_sigstore(bundle: Bundle, trust: Trust) -> tuple[Checked | None, str]:
    if not trust.identities:
        return None, "unknown-signer: it is a Sigstore keyless signature, and the trust setting names no identities."
    from model_signing._signing import sign_sigstore
    from sigstore.models import Bundle as SigstoreBundle

    try:
        signature = sign_sigstore.Signature(SigstoreBundle.from_json(bundle.raw))
    except Exception as err:  # noqa: BLE001
        return None, f"invalid: the Sigstore bundle cannot be read ({_cause(err)})."
    why = ""
    for identity, issuer in trust.identities:
        try:
            verifier = sign_sigstore.Verifier(
                identity=identity,
                oidc_issuer=issuer,
                use_staging=trust.use_staging,
                trust_config=pathlib.Path(trust.trust_config) if trust.trust_config else None,
            )
        except Exception as err:  # noqa: BLE001
            raise ValueError(
                f"Sigstore's trust root cannot be had ({_cause(err)}); checking a keyless signature needs the "
                "network, or trust_config= naming a client trust configuration"
            ) from err
        try:
            manifest = verifier.verify(signature)
        except Exception as err:  # noqa: BLE001
            why = f"unknown-signer: not signed by {identity} ({issuer}) under Sigstore ({_cause(err)})."
            continue
        return Checked(manifest, f"Sigstore identity {identity} ({issuer})", "sigstore"), ""
    return None, why


def _cause(err: BaseException) -> str:
    text = shown(" ".join(str(err).split()), 300)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
