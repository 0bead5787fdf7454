"""Keys and certificates for the signing tests, made with ``cryptography``: EC P-256 key pairs,
and a self-signed CA with a code-signing leaf (valid, expired, or from another CA)."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAY = datetime.timedelta(days=1)


def write_key_pair(folder: Path, name: str, curve: ec.EllipticCurve | None = None) -> tuple[Path, Path]:
    """``(private.pem, public.pem)`` of a new EC key (P-256 unless ``curve``)."""
    key = ec.generate_private_key(curve or ec.SECP256R1())
    private, public = folder / f"{name}.pem", folder / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, cn), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "zipsave tests")]
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    start: datetime.datetime,
    end: datetime.datetime,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def write_pki(folder: Path, name: str, *, expired: bool = False) -> dict[str, Path]:
    """A CA and a leaf it signs: ``{"ca", "key", "cert"}`` PEM files. ``expired``: the leaf's
    validity ended yesterday (the CA's has not)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert(f"{name} CA", ca_key, f"{name} CA", ca_key, ca=True, start=now - 30 * DAY, end=now + 365 * DAY)
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    start, end = (now - 20 * DAY, now - DAY) if expired else (now - DAY, now + 30 * DAY)
    leaf = _cert(f"{name} signer", leaf_key, f"{name} CA", ca_key, ca=False, start=start, end=end)
    paths = {"ca": folder / f"{name}-ca.crt", "key": folder / f"{name}-leaf.pem", "cert": folder / f"{name}-leaf.crt"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths
