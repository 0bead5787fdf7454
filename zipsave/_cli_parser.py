"""The ``zipsave`` command's arguments: each command's help, description and options, and the
parser, which defines a command's arguments only when that command runs (``cli`` runs them)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from . import _trust  # its name rule, on first use (zipsave._lazy)
from ._cli_sign import add_signer_options
from ._version import __version__

__all__ = ["COMMANDS", "build_parser"]


def _global_name(text: str) -> str:
    """A ``--trust`` value, checked by the trust policy's own rule (a usage error if not)."""
    try:
        _trust.normalise_trusted([text])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a global name: give pkg.module.Class, pkg.module:Class, pkg.module.* or pkg. "
            "(a class defined in a script or inside a function cannot be trusted by name)"
        ) from None
    return text


# Each command's arguments are defined only when that command runs (for help and usage errors,
# all of them): argparse makes a parser, a help formatter and several translation lookups for
# every command and argument, which a first `zipsave inspect` paid for all eight before it
# opened the archive (3.7 ms of CPU against 1.4 ms for one, after `import torch`).
def _inspect_args(inspect: argparse.ArgumentParser) -> None:
    inspect.add_argument("archive", help="the archive (a path; .zip is tried too), or a sharded checkpoint directory")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.add_argument(
        "--verify",
        action="store_true",
        help="also check every member's bytes and every tensor's own checksum (exit 1 on a problem)",
    )
    add_signer_options(inspect, "(an error if not), and its signer is shown")


def _verify_args(verify: argparse.ArgumentParser) -> None:
    verify.add_argument(
        "archive",
        help="the archive, a sharded checkpoint directory, or a CheckpointManager directory (every checkpoint)",
    )
    verify.add_argument("--json", action="store_true", help="print JSON: {archive, ok, problems, notes}")
    verify.add_argument(
        "--require-manifest", action="store_true", help="count a missing manifest.json as a problem (exit 1)"
    )
    add_signer_options(verify, "(exit 1 if not)")


def _read_args(reading: argparse.ArgumentParser) -> None:
    reading.add_argument("archive", help="the archive (a path; .zip is tried too)")
    reading.add_argument("address", help="a tensor (member/key) or a data key")
    reading.add_argument("--json", action="store_true", help="print JSON: {address, type, value or values}")
    trust = "also trust a global that a pickled value needs (pkg.module.Class or pkg.module.*); repeatable"
    reading.add_argument("--trust", action="append", default=[], metavar="NAME", type=_global_name, help=trust)
    add_signer_options(reading, "(an error if not)")


def _sign_args(signing: argparse.ArgumentParser) -> None:
    signing.add_argument("archive", help="the archive (a local path)")
    signing.add_argument("--private_key", "--private-key", metavar="KEY.pem", help="the PEM elliptic-curve private key")
    signing.add_argument("--password", help="the private key's password, if it is encrypted")
    signing.add_argument(
        "--signing_certificate",
        "--signing-certificate",
        metavar="CERT.pem",
        help="sign with this certificate of the private key",
    )
    signing.add_argument(
        "--certificate_chain",
        "--certificate-chain",
        action="append",
        metavar="CERT.pem",
        help="certificates between the signing certificate and the root (repeatable)",
    )
    signing.add_argument("--sigstore", action="store_true", help="sign keyless with Sigstore (needs the network)")
    signing.add_argument("--identity_token", "--identity-token", help="an OIDC token for Sigstore")
    signing.add_argument("--use_staging", "--use-staging", action="store_true", help="Sigstore's staging instance")
    signing.add_argument(
        "--signature", metavar="OUT", help="where to write the detached signature (default: ARCHIVE.sig)"
    )
    signing.add_argument("--embed", action="store_true", help="write the signature into the archive as zipsave.sig")
    signing.add_argument("--json", action="store_true", help="print JSON: {archive, signature, embedded}")


def _diff_args(diff: argparse.ArgumentParser) -> None:
    diff.add_argument("a", help="the old archive")
    diff.add_argument("b", help="the new archive")
    diff.add_argument("--json", action="store_true", help="print JSON instead of text")
    diff.add_argument("--bytes", action="store_true", help="compare data keys as stored, without decoding (byte-level)")


def _extract_args(extract: argparse.ArgumentParser) -> None:
    extract.add_argument("archive", help="the archive")
    extract.add_argument("folder", help="destination folder (created if missing)")
    extract.add_argument("--overwrite", action="store_true", help="replace files that exist already")
    extract.add_argument("--json", action="store_true", help="print JSON: {archive, folder, files}")


def _list_args(listing: argparse.ArgumentParser) -> None:
    listing.add_argument("directory", help="the checkpoint directory")
    listing.add_argument("--json", action="store_true", help="print JSON: a list of {step, time, size, metrics, path}")


def _demo_args(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--seconds", type=float, default=3.0, help="how long to train (default: 3)")
    demo.add_argument("--out", default=None, help="folder to keep the archive in (default: a temporary one)")


#: Each command's help line, description and arguments, in the order ``zipsave --help`` lists them.
COMMANDS: dict[str, tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = {
    "inspect": (
        "show what an archive holds, without loading it",
        "Show members, versions, saved system info, every data key with its type and whether it needs "
        "pickle, every tensor with dtype and shape, and the component tree. Never unpickles and never "
        "calls torch.load.",
        _inspect_args,
    ),
    "verify": (
        "check hashes and structure (exit 0 if OK, 1 if not)",
        "Check every member against manifest.json (size, CRC-32, SHA-256) and the archive's structure. "
        "Exit status 0 when the archive is intact, 1 when a problem was found.",
        _verify_args,
    ),
    "read": (
        "print one tensor or one data key (zipsave.read)",
        "Print the tensor (`policy/0.weight`) or data value (`learning_rate`) at ADDRESS, as `zipsave inspect` "
        "lists them. Only its bytes are read; a pickled value decodes only through the safe-load allowlist.",
        _read_args,
    ),
    "sign": (
        "sign an archive in the OpenSSF model-signing format (the sign extra)",
        "Write ARCHIVE.sig, the signature `model_signing sign` writes for the file, or with --embed a "
        "zipsave.sig member signed over every other member. `zipsave verify --public_key` and "
        "`model_signing verify` check it. Options are spelled as model_signing spells them; the dashed forms work too.",
        _sign_args,
    ),
    "diff": (
        "compare two archives: data keys and tensors (exit 1 if they differ)",
        "List changed, added and removed data keys and tensors, with the largest absolute difference of "
        "each changed tensor. Keys stored differently are decoded safely (allowlist only) and equal values "
        "reported as 'same value, stored differently'. Exit status 0 when equal, 1 when they differ.",
        _diff_args,
    ),
    "extract": (
        "unpack an archive into a folder, safely",
        "Write every member below FOLDER. Refuses absolute names, `..`, symbolic links and special files, "
        "and never writes through a link; checks each member's CRC-32 and manifest hash.",
        _extract_args,
    ),
    "list": (
        "list the checkpoints of a CheckpointManager directory",
        "Show each complete checkpoint of a checkpoint directory (a folder or fsspec URL written by "
        "zipsave.CheckpointManager): step, time, size and metrics. Reads the index only; takes no lock.",
        _list_args,
    ),
    "demo": (
        "train a small agent on CartPole-v1, save it, load it back and compare",
        "Train REINFORCE on CartPole-v1 for a few seconds, save it, show the archive, load it back and "
        "check that it acts the same and keeps training.",
        _demo_args,
    ),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``zipsave`` command's parser; with ``command`` (a name of :data:`COMMANDS`), one with
    that command's arguments only."""
    parser = argparse.ArgumentParser(
        prog="zipsave",
        description="Look inside, check, compare and unpack zipsave and Stable-Baselines3 model archives.",
        epilog="Exit status: 0 success, 1 verify found a problem or diff found a difference, 2 error.",
    )
    parser.add_argument("--version", action="version", version=f"zipsave {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (summary, description, define) in COMMANDS.items():
        if command in (None, name):
            define(sub.add_parser(name, help=summary, description=description))
    return parser
