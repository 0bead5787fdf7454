"""How checkpoint.zip and expected.pt were made, with zipsave at commit 2a79a11 (before 0.2
wrote a state dict given as an app-state value as a ``.pth`` member): that zipsave wrote the
torch idiom ``{"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}``
with both state dicts inside ``data`` (tensors as typed values beside a pickled fallback).
Run from the repo root with that zipsave importable; later zipsave versions write ``model.pth``
and ``optimizer.pth`` instead, so the files are kept as they are."""

from __future__ import annotations

import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2])]

import zipsave  # noqa: E402


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and optimizer the test restores into (same shapes, fresh values)."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def main() -> None:
    torch.manual_seed(0)
    model, optimizer = build()
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}
    zipsave.save(state, HERE / "checkpoint.zip")
    torch.save(state, HERE / "expected.pt")


if __name__ == "__main__":
    main()
