"""Reading a signature file (a Sigstore bundle) without trusting it: bounded in size and depth,
strict JSON, the shape model-signing writes, and which kind of signer it names."""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Any

from .. import _json
from ..exceptions import SignatureError, ZipsaveError

__all__ = ["Bundle", "MAX_BUNDLE_BYTES", "parse_bundle", "shown"]

#: The largest signature read. A bundle holds one line per signed member (about 150 bytes), so
#: this admits archives of some 100 000 members; anything larger is refused before parsing.
MAX_BUNDLE_BYTES = 16 << 20
#: A bundle is six levels deep; the statement inside it five.
MAX_DEPTH = 16

BUNDLE_MEDIA_TYPES = (
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
)


@dataclasses.dataclass(frozen=True)
class Bundle:
    """A parsed, not yet verified, signature.

    ``kind`` is ``"key"``, ``"certificate"`` or ``"sigstore"``; ``statement`` the in-toto
    statement it claims to sign (checked by the signature before anything relies on it).
    """

    raw: bytes
    data: dict[str, Any]
    kind: str
    statement: dict[str, Any]
    where: str

    @property
    def key_hint(self) -> str | None:
        hint = self.data["verificationMaterial"].get("publicKey", {}).get("hint")
        return hint if isinstance(hint, str) else None


def shown(text: Any, limit: int = 200) -> str:
    """A name read from a signature or an archive, safe for a terminal or a log: non-printable
    characters escaped, and cut to ``limit`` characters."""
    text = str(text)
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _malformed(detail: str, *, archive: Any, where: str) -> SignatureError:
    return SignatureError(
        f"the signature `{where}` is not a model-signing bundle: {detail}",
        reason="malformed",
        archive=archive,
        hint="Sign the archive again (`zipsave sign` or `model_signing sign`).",
    )


def parse_bundle(raw: bytes, *, archive: Any, where: str) -> Bundle:
    """Parse ``raw`` as a model-signing bundle, or raise :class:`SignatureError` (``malformed``)."""
    if len(raw) > MAX_BUNDLE_BYTES:
        raise _malformed(
            f"it is {len(raw)} bytes, more than the {MAX_BUNDLE_BYTES} a signature may be.",
            archive=archive,
            where=where,
        )
    try:
        data = _json.parse_json(raw, max_depth=MAX_DEPTH)
    except ZipsaveError as err:
        raise _malformed(f"{err.detail}", archive=archive, where=where) from err
    if not isinstance(data, dict):
        raise _malformed("it is not a JSON object.", archive=archive, where=where)
    if data.get("mediaType") not in BUNDLE_MEDIA_TYPES:
        raise _malformed(
            f"its mediaType is {str(data.get('mediaType'))[:80]!r}, not a Sigstore bundle v0.3.",
            archive=archive,
            where=where,
        )
    material = data.get("verificationMaterial")
    envelope = data.get("dsseEnvelope")
    if not isinstance(material, dict) or not isinstance(envelope, dict):
        raise _malformed("it has no verificationMaterial or no dsseEnvelope.", archive=archive, where=where)
    if "publicKey" in material:
        kind, field = "key", "publicKey"
    elif "x509CertificateChain" in material:
        kind, field = "certificate", "x509CertificateChain"
    elif "certificate" in material:
        kind, field = "sigstore", "certificate"
    else:
        raise _malformed(
            "its verificationMaterial names no public key and no certificate.", archive=archive, where=where
        )
    if not isinstance(material[field], dict):
        raise _malformed(f"its verificationMaterial's {field} is not an object.", archive=archive, where=where)
    if not isinstance(material[field].get("hint"), (str, type(None))):
        raise _malformed("its public key hint is not a string.", archive=archive, where=where)
    sigs = envelope.get("signatures")
    if not isinstance(sigs, list) or len(sigs) != 1 or not isinstance(sigs[0], dict):
        raise _malformed("its DSSE envelope must hold exactly one signature.", archive=archive, where=where)
    if envelope.get("payloadType") != "application/vnd.in-toto+json":
        raise _malformed("its DSSE payload is not an in-toto statement.", archive=archive, where=where)
    try:
        payload = base64.b64decode(str(envelope.get("payload", "")), validate=True)
        statement = _json.parse_json(payload, max_depth=MAX_DEPTH)
    except (binascii.Error, ValueError, ZipsaveError) as err:
        raise _malformed(f"its DSSE payload cannot be read ({err}).", archive=archive, where=where) from err
    if not isinstance(statement, dict) or not isinstance(statement.get("predicate"), dict):
        raise _malformed("its payload is not an in-toto statement with a predicate.", archive=archive, where=where)
    return Bundle(raw, data, kind, statement, where)
