"""How agent.zip and expected.pt were made, with zipsave at commit e40ad85 (before 0.2 saved a
module's children as ``<name>.pth``): that zipsave wrote a model that is itself an
``nn.Module`` with its children as ``_modules.<name>.pth`` and its own parameters and buffers
inside ``data``. Run from the repo root with that zipsave importable; later zipsave versions
write the current layout instead, so the files are kept as they are."""

from __future__ import annotations

import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parents[2])]

from models import ModuleAgent  # noqa: E402


def main() -> None:
    agent = ModuleAgent(seed=1)
    loss = agent.head(agent.body(torch.randn(5, 3))).sum() * agent.scale
    loss.backward()
    agent.optimizer.step()
    with torch.no_grad():
        agent.count += 5
        agent.scale *= 3
    agent.gamma = 0.5
    agent.save(HERE / "agent.zip")
    torch.save(agent.state_dict(), HERE / "expected.pt")


if __name__ == "__main__":
    main()
