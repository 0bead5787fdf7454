"""The ``zipsave`` command: ``demo`` (and the archive tools added beside it)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ._version import __version__
from .exceptions import ZipsaveError

__all__ = ["main"]


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    return run_demo(seconds=args.seconds, out=args.out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zipsave", description="Save, inspect and check RL model archives.")
    parser.add_argument("--version", action="version", version=f"zipsave {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="train a small agent on CartPole-v1, save it, load it back and compare")
    demo.add_argument("--seconds", type=float, default=3.0, help="how long to train (default: 3)")
    demo.add_argument("--out", default=None, help="folder for the archive (default: a temporary folder)")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ZipsaveError as err:
        print(f"zipsave: error: {err}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:
        print(f"zipsave: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
