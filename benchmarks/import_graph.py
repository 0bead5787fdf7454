"""Who imports whom in a first call (issue 37): the modules of zipsave (and ISA-L) that
``import zipsave`` and one call of a verb import in a fresh interpreter, after ``import torch``
and a small model and optimizer were built, drawn as a tree in the order they were imported.

Each line is a module, indented under the module whose import (or whose first use of a lazy
name, ``zipsave._lazy``) imported it; top-level lines were imported by the call itself. The
first line also gives the size of their bytecode: what their ``.pyc`` files hold (the
marshalled code of each source, as ``compileall`` writes it, without the 16-byte header),
which a first call reads and unmarshals.

Usage::

    python benchmarks/import_graph.py --verb restore --out benchmarks/results/import-graph
    python benchmarks/import_graph.py --verb load
    python benchmarks/import_graph.py --verb load --tree /tmp/peer   # another checkout's zipsave
"""

from __future__ import annotations

import argparse
import marshal
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import sys
import torch

verb, path = sys.argv[1], sys.argv[2]
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 4))
optimizer = torch.optim.Adam(model.parameters())
import importlib._bootstrap as bootstrap

stack, edges = [], []
load_unlocked = bootstrap._load_unlocked


def traced(spec):
    if not spec.name.startswith(("zipsave", "isal")):
        return load_unlocked(spec)
    edges.append((stack[-1] if stack else "", spec.name))
    stack.append(spec.name)
    try:
        return load_unlocked(spec)
    finally:
        stack.pop()


bootstrap._load_unlocked = traced
import zipsave

if verb == "restore":
    zipsave.restore({"model": model, "optimizer": optimizer}, path)
elif verb == "save":
    zipsave.save({"model": model, "optimizer": optimizer}, path + ".again.zip")
else:
    getattr(zipsave, verb)(path)
for parent, child in edges:
    print(parent, child)
for _, child in edges:
    print("FILE", child, getattr(sys.modules[child], "__file__", None) or "")
"""

_PREPARE = r"""
import sys
import torch
import zipsave

model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 4))
optimizer = torch.optim.Adam(model.parameters())
model(torch.zeros(2, 64)).sum().backward()
optimizer.step()
zipsave.save({"model": model, "optimizer": optimizer, "learning_rate": 3e-4}, sys.argv[1])
"""


def tree(edges: list[tuple[str, str]]) -> list[str]:
    """The lines of the import tree: each child under its parent, in import order."""
    children: dict[str, list[str]] = {}
    for parent, child in edges:
        children.setdefault(parent, []).append(child)
    lines: list[str] = []

    def draw(name: str, depth: int) -> None:
        for child in children.get(name, []):
            lines.append("  " * depth + (child if child == "zipsave" else child.removeprefix("zipsave.")))
            draw(child, depth + 1)

    draw("", 0)
    return lines


def bytecode_size(path: str) -> int:
    """What the module's ``.pyc`` holds after its header: its source compiled and marshalled."""
    with open(path, encoding="utf-8") as f:
        return len(marshal.dumps(compile(f.read(), path, "exec", dont_inherit=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verb", default="restore", choices=("restore", "load", "load_archive", "inspect", "save"))
    parser.add_argument("--out", default=None, help="folder for import-graph-<verb>.txt")
    parser.add_argument("--tree", default=None, help="the checkout whose zipsave is drawn (default: this one)")
    args = parser.parse_args()
    root = args.tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as folder:
        archive = os.path.join(folder, "model.zip")
        subprocess.run([sys.executable, "-c", _PREPARE, archive], env=env, check=True, cwd=folder)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, args.verb, archive],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            cwd=folder,
        ).stdout
    files = dict(line.split(" ")[1:3] for line in out.splitlines() if line.startswith("FILE "))
    edges = [
        (line.split(" ")[0], line.split(" ")[-1]) for line in out.splitlines() if line.strip() and line[:5] != "FILE "
    ]
    lines = tree(edges)
    ours = sum(1 for _, child in edges if child.startswith("zipsave"))
    code = sum(bytecode_size(files[name]) for name in files if name.startswith("zipsave") and files[name])
    text = "\n".join(
        [
            f"first zipsave.{args.verb} in a fresh interpreter: {ours} of zipsave's modules, {len(edges)} in all; "
            f"{code / 1e3:.0f} KB of zipsave bytecode",
            "",
        ]
        + lines
    )
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"import-graph-{args.verb}.txt"), "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
