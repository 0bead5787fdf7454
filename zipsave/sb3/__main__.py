"""``python -m zipsave.sb3 [--allow-pickle] [--trust NAME]... [--strict] MODULE [ARGS...]``:
install zipsave, then run ``MODULE`` as ``python -m MODULE ARGS...`` would."""

from __future__ import annotations

import runpy
import sys

from ._install import install

USAGE = """usage: python -m zipsave.sb3 [--allow-pickle] [--trust NAME]... [--strict] MODULE [ARGS...]

Run MODULE (e.g. rl_zoo3.train) as `python -m MODULE ARGS...`, with every Stable-Baselines3
save and load going through zipsave (see zipsave.sb3.install).

options (before MODULE):
  --allow-pickle  trust every archive completely (SB3's plain cloudpickle loading)
  --trust NAME    also trust the global NAME ("pkg.module.Class" or "pkg.module.*"); repeatable
  --strict        raise instead of skipping an entry that cannot be decoded
"""


def main(argv: list[str] | None = None) -> int:
    """Parse the runner's options, install zipsave and run the module; returns an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    allow_pickle, strict, trusted = False, False, []
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag in ("-h", "--help"):
            print(USAGE, end="")
            return 0
        if flag == "--allow-pickle":
            allow_pickle = True
        elif flag == "--strict":
            strict = True
        elif flag == "--trust" and args:
            trusted.append(args.pop(0))
        elif flag.startswith("--trust="):
            trusted.append(flag.partition("=")[2])
        else:
            print(f"zipsave.sb3: unknown option {flag!r}\n\n{USAGE}", end="", file=sys.stderr)
            return 2
    if not args:
        print(USAGE, end="", file=sys.stderr)
        return 2
    module = args[0]
    install(allow_pickle=allow_pickle, trusted=trusted, strict=strict)
    sys.argv = [module, *args[1:]]  # run_module replaces argv[0] with the module's file name
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
