"""The ``zipsave`` command: look inside, read, check, compare and unpack archives, and a demo.

Exit status: 0 on success, 1 when ``verify`` finds a problem or ``diff`` finds a difference,
2 on any error (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from . import _sign, _tools  # packages whose parts load on first use (zipsave._lazy)
from ._cli_sign import add_signer_options, check_signature, is_directory_of, trust_of
from ._printable import visible, visible_json
from ._version import __version__
from .exceptions import CheckpointDirectoryError, UnsafeGlobalError, ZipsaveError, ZipsaveWarning

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


def _part(module: str) -> Any:
    """A module only some subcommands use, imported when one of them runs: the demo (gymnasium,
    a trained agent), the checkpoint manager. ``zipsave inspect`` of an archive imported both,
    and with them the whole save side, before it opened the archive (about 150-200 ms of CPU,
    seven times the inspection itself)."""
    return importlib.import_module(module, __package__)


def _print_json(obj: Any) -> None:
    # ensure_ascii=False keeps names readable; JSON escapes C0 controls itself, and the rest
    # (DEL, C1, bidi overrides, separators) is written as \uXXXX, which is the same JSON value.
    print(visible_json(json.dumps(obj, indent=2, ensure_ascii=False)))


def _say(text: Any) -> None:
    """Print a report zipsave laid out: each field in it is visible already; this is the net
    under them (a line feed of the layout stays, every other control is escaped)."""
    print(visible(text, lines=True))


# -- subcommands -------------------------------------------------------------------------------
def _cmd_demo(args: argparse.Namespace) -> int:
    return _part("._demo").run_demo(seconds=args.seconds, out=args.out)


def _not_an_archive(directory: str) -> CheckpointDirectoryError:
    newest = _part("._manager").list_checkpoints(directory)
    # commands to paste: paths quoted for the shell (a file of the directory may be named anything)
    one = f"; `zipsave inspect {shlex.quote(newest[-1].path)}` looks inside the newest" if newest else ""
    return CheckpointDirectoryError(
        f"`{directory}` is a checkpoint directory of a CheckpointManager, not an archive. "
        f"`zipsave list {shlex.quote(directory)}` lists its checkpoints{one}."
    )


def _cmd_inspect(args: argparse.Namespace) -> int:
    if is_directory_of(args.archive, "manager"):
        raise _not_an_archive(args.archive)
    if is_directory_of(args.archive, "sharded"):  # a sharded (zipsave.dcp) checkpoint directory
        summary = _tools.describe_sharded(args.archive)
        _print_json(summary) if args.json else _say(_tools.render_sharded(summary))
        return EXIT_OK
    info = _tools.inspect(args.archive, verify=args.verify, trust=trust_of(args))
    if args.json:
        _print_json(info.to_dict())
    else:
        _say(info)
    return EXIT_FOUND if info.verified is False else EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    notes: list[str] = []
    # A directory is a sharded (zipsave.dcp) checkpoint: the index and every rank archive.
    if is_directory_of(args.archive, "manager"):  # a CheckpointManager's: every checkpoint it lists
        problems = _part("._manager").verify_directory(args.archive, require_manifest=args.require_manifest)
    elif is_directory_of(args.archive, "sharded"):
        problems = _tools.verify_sharded(args.archive)
    else:
        problems = _tools.verify(args.archive, require_manifest=args.require_manifest, notes=notes)
    signed = check_signature(args, problems)
    if args.json:
        report = {"archive": args.archive, "ok": not problems, "problems": problems, "notes": notes}
        if signed is not None:
            report["signature"] = signed.to_dict()
        _print_json(report)
    elif problems:
        _say(f"{visible(args.archive)}: {len(problems)} problem{'s' if len(problems) != 1 else ''}")
        for problem in problems:
            _say(f"  - {visible(problem)}")
    else:
        _say(f"{visible(args.archive)}: OK" + (f", {visible(signed)}" if signed is not None else ""))
    if not args.json:
        for note in notes:
            _say(f"  note: {visible(note)}")
    return EXIT_FOUND if problems else EXIT_OK


def _cmd_sign(args: argparse.Namespace) -> int:
    if args.sigstore == bool(args.private_key):
        raise ZipsaveError("give --private_key KEY.pem, or --sigstore to sign keyless.")
    if args.embed and args.signature:
        raise ZipsaveError("--signature names a detached signature; it cannot be combined with --embed.")
    signer = _sign.Signer(
        private_key=args.private_key,
        password=args.password,
        signing_certificate=args.signing_certificate,
        certificate_chain=args.certificate_chain or (),
        sigstore=args.sigstore,
        identity_token=args.identity_token,
        use_staging=args.use_staging,
        embed=args.embed,
    )
    written = _sign.sign(args.archive, signer, signature=args.signature, embed=args.embed)
    if args.json:
        _print_json({"archive": args.archive, "signature": written, "embedded": args.embed})
    else:
        _say(
            f"{visible(args.archive)}: signed, signature in {'the archive (zipsave.sig)' if args.embed else visible(written)}"
        )
    return EXIT_OK


def _cmd_diff(args: argparse.Namespace) -> int:
    for path in (args.a, args.b):
        if is_directory_of(path, "manager"):
            raise _not_an_archive(path)
    result = _tools.diff(args.a, args.b, decode=not args.bytes)
    if args.json:
        _print_json(result.to_dict())
    else:
        _say(result)
    return EXIT_OK if result.identical else EXIT_FOUND


def _cmd_extract(args: argparse.Namespace) -> int:
    if is_directory_of(args.archive, "manager"):
        raise _not_an_archive(args.archive)
    written = _tools.extract(args.archive, args.folder, overwrite=args.overwrite)
    if args.json:
        _print_json({"archive": args.archive, "folder": args.folder, "files": written})
    else:
        for path in written:
            _say(visible(path))
    return EXIT_OK


def _cmd_read(args: argparse.Namespace) -> int:
    try:
        value = _tools.read(args.archive, args.address, device="cpu", trusted=args.trust, trust=trust_of(args))
    except UnsafeGlobalError as err:
        if not err.by_value and (err.hint or "").startswith("To allow it, pass `trusted="):  # say this command's option
            err.hint = f"To allow it, pass `--trust {shlex.quote(err.global_name)}` (which imports it) if you trust it."
            err.args = (err._compose(),)
        raise  # a global that rebuilds code keeps its hint: no option of this command may trust it safely
    with _tools.whole_integers():  # an integer of 5 000 digits is a value zipsave writes and reads
        if not args.json:
            _say(f"{visible(args.address)}: {visible(_tools.value_text(value), lines=True)}")
        else:
            _print_json({"address": args.address, **_tools.value_json(value)})
    return EXIT_OK


def _cmd_list(args: argparse.Namespace) -> int:
    manager = _part("._manager")
    checkpoints = manager.list_checkpoints(args.directory)
    gone = manager.missing_archives(args.directory, checkpoints)
    if gone:
        steps = ", ".join(str(c.step) for c in gone)
        warnings.warn(
            f"`{args.directory}`: the index lists step{'s' if len(gone) > 1 else ''} {steps}, whose "
            f"archive{'s are' if len(gone) > 1 else ' is'} gone (deleted by hand?); a CheckpointManager "
            "drops them from the index when it opens the directory.",
            ZipsaveWarning,
            stacklevel=1,
        )
    if args.json:
        _print_json(
            [
                {
                    "step": c.step,
                    "time": c.time,
                    "size": c.size,
                    "metrics": {k: _tools.json_leaf(v) for k, v in c.metrics.items()},
                    "path": c.path,
                }
                for c in checkpoints
            ]
        )
        return EXIT_OK
    _say(f"{visible(args.directory)}: {len(checkpoints)} checkpoint{'s' if len(checkpoints) != 1 else ''}")
    if checkpoints:
        rows = [[visible(cell) for cell in row] for row in manager.table(checkpoints)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            _say("  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths)).rstrip())
    for broken in manager.set_aside_archives(args.directory):
        _say(f"  set aside as damaged by a resume: {visible(broken)}")
    return EXIT_OK


# -- parser ------------------------------------------------------------------------------------
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
    inspect.set_defaults(func=_cmd_inspect)


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
    verify.set_defaults(func=_cmd_verify)


def _read_args(reading: argparse.ArgumentParser) -> None:
    reading.add_argument("archive", help="the archive (a path; .zip is tried too)")
    reading.add_argument("address", help="a tensor (member/key) or a data key")
    reading.add_argument("--json", action="store_true", help="print JSON: {address, type, value or values}")
    trust = "also trust a global that a pickled value needs (pkg.module.Class or pkg.module.*); repeatable"
    reading.add_argument("--trust", action="append", default=[], metavar="NAME", help=trust)
    add_signer_options(reading, "(an error if not)")
    reading.set_defaults(func=_cmd_read)


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
    signing.set_defaults(func=_cmd_sign)


def _diff_args(diff: argparse.ArgumentParser) -> None:
    diff.add_argument("a", help="the old archive")
    diff.add_argument("b", help="the new archive")
    diff.add_argument("--json", action="store_true", help="print JSON instead of text")
    diff.add_argument("--bytes", action="store_true", help="compare data keys as stored, without decoding (byte-level)")
    diff.set_defaults(func=_cmd_diff)


def _extract_args(extract: argparse.ArgumentParser) -> None:
    extract.add_argument("archive", help="the archive")
    extract.add_argument("folder", help="destination folder (created if missing)")
    extract.add_argument("--overwrite", action="store_true", help="replace files that exist already")
    extract.add_argument("--json", action="store_true", help="print JSON: {archive, folder, files}")
    extract.set_defaults(func=_cmd_extract)


def _list_args(listing: argparse.ArgumentParser) -> None:
    listing.add_argument("directory", help="the checkpoint directory")
    listing.add_argument("--json", action="store_true", help="print JSON: a list of {step, time, size, metrics, path}")
    listing.set_defaults(func=_cmd_list)


def _demo_args(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--seconds", type=float, default=3.0, help="how long to train (default: 3)")
    demo.add_argument("--out", default=None, help="folder to keep the archive in (default: a temporary one)")
    demo.set_defaults(func=_cmd_demo)


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


def _one_line(text: object) -> str:
    return visible(" ".join(str(text).split()))


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    # Every warning, zipsave's or a library's, may quote an archive: made visible here too.
    print(f"zipsave: warning: {_one_line(message)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``zipsave`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        # zipsave's warnings are part of the command's output (one line each), also where
        # PYTHONWARNINGS=error would turn them into a failure reported as a zipsave bug
        warnings.filterwarnings("default", category=ZipsaveWarning)
        try:
            return int(args.func(args) or 0)
        except ZipsaveError as err:
            message = _one_line(err)
        except OSError as err:
            if isinstance(err, BrokenPipeError):  # `zipsave inspect x.zip | head`: not an error
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return EXIT_OK
            where = f"`{err.filename}`: " if err.filename else ""
            message = _one_line(f"{where}{err.strerror or err}")
        except KeyboardInterrupt:
            message = "interrupted"
        except Exception as err:  # noqa: BLE001 - the command never shows a traceback
            message = f"unexpected {type(err).__name__}: {_one_line(err)} (please report this as a zipsave bug)"
    print(f"zipsave: error: {visible(message)}", file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
