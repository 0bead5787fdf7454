"""The signer options of the ``zipsave`` command (``verify``, ``inspect``): parsed into a
:class:`~zipsave.Trust` and checked, a failed signature reported as one more problem."""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

from . import _sign, _tools  # packages whose parts load on first use (zipsave._lazy)
from ._cli_hints import in_command_terms
from .exceptions import SignatureError, ZipsaveError

__all__ = ["add_signer_options", "check_signature", "is_directory_of", "trust_of"]


def is_directory_of(path: Any, kind: str) -> bool:
    """Whether ``path`` is a checkpoint directory of ``kind``: ``"manager"`` (a
    CheckpointManager's) or ``"sharded"`` (a zipsave.dcp checkpoint). Asked of a local folder
    only, so a command given an archive imports neither (the checkpoint manager imports the
    save side)."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else ""
    if not text or "://" in text or not os.path.isdir(text):
        return False
    if kind == "manager":
        return bool(importlib.import_module("._manager", __package__).is_manager_directory(text))
    return bool(_tools.is_checkpoint_dir(text))


def trust_of(args: argparse.Namespace) -> Any:
    """The ``Trust`` of ``verify``'s signer options; ``None`` when it was given none."""
    identities = list(zip(args.identity or [], args.identity_provider or []))
    if len(args.identity or []) != len(args.identity_provider or []):
        raise ZipsaveError("give one --identity_provider for each --identity.")
    if not (args.public_key or args.certificate_chain or identities):
        if args.signature:
            raise ZipsaveError(
                "--signature needs the signer to accept: --public_key, --certificate_chain or --identity."
            )
        return None
    return _sign.Trust(
        public_keys=args.public_key or (),
        certificates=args.certificate_chain or (),
        identities=identities,
        signature=args.signature,
        use_staging=args.use_staging,
        trust_config=args.trust_config,
    )


def check_signature(args: argparse.Namespace, problems: list[str]) -> Any:
    """Check the archive's signature when ``verify`` was given signer options; a failure is one
    more problem (exit 1), and the signer is returned when it held."""
    trust = trust_of(args)
    if trust is None:
        return None
    if is_directory_of(args.archive, "manager") or is_directory_of(args.archive, "sharded"):
        raise ZipsaveError("signature options check one archive, not a directory.")
    try:
        return _sign.verify_signature(args.archive, trust)
    except SignatureError as err:
        in_command_terms(err)
        problems.append(f"signature ({err.reason}): {err.detail}" + (f" {err.hint}" if err.hint else ""))
        return None


def add_signer_options(command: argparse.ArgumentParser, outcome: str) -> None:
    """The options of the signers a command accepts (``verify``, ``inspect``)."""
    signer = command.add_argument_group(
        "signature (the sign extra)",
        f"With any of these, the archive must also carry a signature by an accepted signer over every member "
        f"{outcome}: the embedded zipsave.sig, else ARCHIVE.sig, else --signature. Options are spelled as "
        "model_signing spells them; the dashed forms work too.",
    )
    signer.add_argument(
        "--public_key",
        "--public-key",
        action="append",
        metavar="KEY.pem",
        help="accept signatures by this PEM public key (repeatable)",
    )
    signer.add_argument(
        "--certificate_chain",
        "--certificate-chain",
        action="append",
        metavar="CERT.pem",
        help="accept certificates chaining to these PEM certificates (repeatable)",
    )
    signer.add_argument("--identity", action="append", help="accept this Sigstore identity (needs the network)")
    signer.add_argument(
        "--identity_provider", "--identity-provider", action="append", help="the OIDC issuer of each --identity"
    )
    signer.add_argument("--use_staging", "--use-staging", action="store_true", help="Sigstore's staging instance")
    signer.add_argument(
        "--trust_config", "--trust-config", metavar="FILE", help="a Sigstore client trust configuration"
    )
    signer.add_argument("--signature", metavar="SIG", help="check this detached signature")
