"""Signed archives in the OpenSSF model-signing format (the ``sign`` extra): signing as an
archive is written, and checking the signature before anything of it is decoded.

Only :mod:`._ms` imports ``model_signing``, and only when something is signed or checked.
"""

from ._check import SignatureInfo, check_source, verify_signature
from ._settings import Signer, Trust, as_signer
from ._write import embedded_signature, sign, sign_detached

__all__ = [
    "SignatureInfo",
    "Signer",
    "Trust",
    "as_signer",
    "check_source",
    "embedded_signature",
    "sign",
    "sign_detached",
    "verify_signature",
]
