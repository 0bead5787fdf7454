"""Signed archives in the OpenSSF model-signing format (the ``sign`` extra): signing as an
archive is written, and checking the signature before anything of it is decoded.

Only :mod:`._ms` imports ``model_signing``, and only when something is signed or checked.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:  # what __getattr__ below imports on first use, spelled out for type checkers
    from ._check import SignatureInfo, check_source, verify_signature
    from ._settings import Signer, Trust, as_signer
    from ._write import embedded_signature, sign, sign_detached

# Each name's module, imported on first use (PEP 562): a load that checks no signature imports
# only the settings records its options name.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("SignatureInfo", "check_source", "verify_signature"), "._check"),
    **dict.fromkeys(("Signer", "Trust", "as_signer"), "._settings"),
    **dict.fromkeys(("embedded_signature", "sign", "sign_detached"), "._write"),
}
_SUBMODULES = frozenset({"_bundle", "_check", "_ms", "_settings", "_write"})

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)

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
