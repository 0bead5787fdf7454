"""The ``zipsave`` command: look inside, read, check, compare and unpack archives, and a demo.

Exit status: 0 on success, 1 when ``verify`` finds a problem or ``diff`` finds a difference,
2 on any error (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shlex
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from . import _sign, _tools  # packages whose parts load on first use (zipsave._lazy)
from ._cli_hints import as_flags, in_command_terms, signature_note
from ._cli_parser import COMMANDS, build_parser
from ._cli_sign import check_signature, is_directory_of, trust_of
from ._printable import visible, visible_json
from .exceptions import CheckpointDirectoryError, ZipsaveError, ZipsaveWarning

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
    if info.signature is not None:  # "not checked": said with this command's options
        info = dataclasses.replace(info, signature=signature_note(info.signature))
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
    elif os.path.isdir(args.archive):  # it said only "is a directory, not a zip archive"
        raise CheckpointDirectoryError(
            f"`{args.archive}` is a folder, but neither a CheckpointManager's (no `zipsave-checkpoints.json`) "
            "nor a sharded zipsave.dcp checkpoint (no `index.zip`): give an archive file, "
            f"`zipsave verify {shlex.quote(os.path.join(args.archive, 'model.zip'))}`."
        )
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
    if args.sigstore and args.private_key:
        raise ZipsaveError("give --private_key KEY.pem or --sigstore, not both: --sigstore signs keyless.")
    if not (args.sigstore or args.private_key):
        raise ZipsaveError("give --private_key KEY.pem, or --sigstore to sign keyless.")
    if args.embed and args.signature:
        raise ZipsaveError("--signature names a detached signature; it cannot be combined with --embed.")
    try:
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
    except ValueError as err:  # options that do not go together: a usage mistake, said in flags
        raise ZipsaveError(as_flags(str(err))) from None
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
    value = _tools.read(args.archive, args.address, device="cpu", trusted=args.trust, trust=trust_of(args))
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


#: What runs each command (its arguments are in ``_cli_parser``).
_RUN: dict[str, Callable[[argparse.Namespace], int]] = {
    "inspect": _cmd_inspect,
    "verify": _cmd_verify,
    "read": _cmd_read,
    "sign": _cmd_sign,
    "diff": _cmd_diff,
    "extract": _cmd_extract,
    "list": _cmd_list,
    "demo": _cmd_demo,
}


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
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        # zipsave's warnings are part of the command's output (one line each), also where
        # PYTHONWARNINGS=error would turn them into a failure reported as a zipsave bug
        warnings.filterwarnings("default", category=ZipsaveWarning)
        try:
            return int(_RUN[args.command](args) or 0)
        except ZipsaveError as err:
            in_command_terms(err)  # a hint for a Python caller, said in the command's options
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
