"""What a new user of plain torch saves in an app state and restores into live objects: LR
schedulers whose state holds what torch's safe loader reads (a ``Counter``), ..."""

from __future__ import annotations

import collections

import torch
from torch import nn

import zipsave


def _net_and_optimizer():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    return net, torch.optim.SGD(net.parameters(), lr=1.0)


def test_a_multistep_scheduler_saves_and_restores_its_counter_of_milestones(tmp_path):
    # MultiStepLR keeps its milestones in a collections.Counter, which torch's weights_only loader
    # (and zipsave's reader) reads; the save refused it as "a collections.Counter, which torch's
    # safe loader refuses", so no MultiStepLR (alone or in a ChainedScheduler) could be saved.
    net, optimizer = _net_and_optimizer()
    multistep = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1, 3, 3], gamma=0.5)
    for _ in range(2):
        optimizer.step()
        multistep.step()
    zipsave.save({"model": net, "optimizer": optimizer, "scheduler": multistep}, tmp_path / "ckpt.zip")

    net2, optimizer2 = _net_and_optimizer()
    multistep2 = torch.optim.lr_scheduler.MultiStepLR(optimizer2, milestones=[5], gamma=0.5)
    zipsave.restore({"model": net2, "optimizer": optimizer2, "scheduler": multistep2}, tmp_path / "ckpt.zip")
    assert type(multistep2.milestones) is collections.Counter
    assert multistep2.milestones == collections.Counter({1: 1, 3: 2})
    for _ in range(2):
        optimizer.step()
        multistep.step()
        optimizer2.step()
        multistep2.step()
    assert multistep2.get_last_lr() == multistep.get_last_lr() == [0.125]


def test_a_chained_scheduler_with_a_multistep_scheduler_inside_saves(tmp_path):
    net, optimizer = _net_and_optimizer()
    chained = torch.optim.lr_scheduler.ChainedScheduler(
        [
            torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.9),
            torch.optim.lr_scheduler.MultiStepLR(optimizer, [1, 3]),
        ]
    )
    optimizer.step()
    chained.step()
    zipsave.save({"scheduler": chained, "optimizer": optimizer}, tmp_path / "chained.zip")
    loaded = zipsave.load(tmp_path / "chained.zip")
    milestones = loaded["scheduler"]["_schedulers"][1]["milestones"]
    assert type(milestones) is collections.Counter and milestones == collections.Counter({1: 1, 3: 1})
