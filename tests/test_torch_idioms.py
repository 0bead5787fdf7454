"""What a new user of plain torch saves in an app state and restores into live objects: LR
schedulers whose state holds what torch's safe loader reads (a ``Counter``), and restores that
cannot do what was asked (a file that is no archive, a dict whose keys the archive does not
hold) failing with an error that says so, never returning with the objects as they were, and
a constructor argument of the user's own class named with its fix when the build fails."""

from __future__ import annotations

import collections
import dataclasses
import re
import warnings
import zipfile

import numpy as np
import pytest
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


def test_restore_from_a_torch_save_file_or_a_zip_of_other_files_is_an_error(tmp_path):
    # load() named a torch.save file for what it is, but restore() returned having restored
    # nothing: the model kept its fresh weights and the training loop went on from scratch.
    net, _ = _net_and_optimizer()
    torch.save(net.state_dict(), tmp_path / "model.pt")
    fresh = nn.Linear(3, 2)
    for target in (fresh, {"model": fresh}):
        with pytest.raises(zipsave.ArchiveFormatError, match=r"model\.pt`: has no `data` member.*`torch\.save` file"):
            zipsave.restore(target, tmp_path / "model.pt")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("notes.txt", "x")
    with pytest.raises(zipsave.ArchiveFormatError, match=r"zip file of 1 other member\(s\) \(`notes\.txt`\)"):
        zipsave.restore({"model": fresh}, tmp_path / "other.zip")


def test_restore_of_an_app_state_names_a_stateful_object_the_archive_holds_no_state_for(tmp_path):
    # restore({"model": net, "optimizer": opt, "scheduler": sched}, ckpt) of a checkpoint saved
    # without the scheduler, or restore({"model": net}, path) of a module saved on its own,
    # returned without a word, leaving those objects as they were built (exact_match=True).
    net, optimizer = _net_and_optimizer()
    zipsave.save({"model": net, "optimizer": optimizer, "step": 3}, tmp_path / "ckpt.zip")
    zipsave.save(net, tmp_path / "net.zip")

    net2, optimizer2 = _net_and_optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer2, 1)
    app = {"model": net2, "optimizer": optimizer2, "scheduler": scheduler, "step": 0}
    with pytest.raises(zipsave.ParameterMismatchError, match=r"holds no state for `scheduler` of the app state") as err:
        zipsave.restore(app, tmp_path / "ckpt.zip")
    assert "exclude=['scheduler']" in str(err.value) and "exact_match=False" in str(err.value)
    zipsave.restore(app, tmp_path / "ckpt.zip", exclude=["scheduler"])
    zipsave.restore(app, tmp_path / "ckpt.zip", exact_match=False)
    assert app["step"] == 3

    with pytest.raises(zipsave.ParameterMismatchError, match=r"holds no state for `model`.*saved on its own"):
        zipsave.restore({"model": nn.Linear(3, 2)}, tmp_path / "net.zip")


def test_restore_into_a_dict_without_the_archives_key_names_the_key_of_the_app_state(tmp_path):
    net, optimizer = _net_and_optimizer()
    zipsave.save({"model": net, "optimizer": optimizer}, tmp_path / "ckpt.zip")
    with pytest.raises(zipsave.ParameterMismatchError, match=r"the app state has no key `optimizer`") as err:
        zipsave.restore({"model": nn.Linear(3, 2)}, tmp_path / "ckpt.zip")
    assert err.value.member == "optimizer.pth" and "exclude=['optimizer']" in str(err.value)


@dataclasses.dataclass
class TrainConfig:
    lr: float = 1e-3
    hidden: int = 8


class ConfiguredAgent(zipsave.Saveable):
    def __init__(self, cfg: TrainConfig, env=None):
        self.cfg = cfg
        self.net = nn.Linear(3, cfg.hidden)


def test_a_constructor_argument_the_safe_load_refused_is_named_with_its_fix_in_the_build_error(tmp_path):
    # The DecodeError said only "missing 1 required positional argument: 'cfg'. Pass the missing
    # or broken constructor arguments as keyword overrides", not that `cfg` had been refused and
    # that `trusted=[...]` loads it.
    ConfiguredAgent(TrainConfig(hidden=5)).save(tmp_path / "agent.zip")
    name = f"{TrainConfig.__module__}.TrainConfig"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.SkippedEntryWarning)
        with pytest.raises(zipsave.DecodeError, match=r"missing 1 required positional argument: 'cfg'") as err:
            ConfiguredAgent.load(tmp_path / "agent.zip")
    message = str(err.value)
    assert f"`cfg`: refusing to import untrusted global `{name}`" in message
    assert f"trusted=[{name!r}]" in message and "custom_objects={'cfg': ...}" in message
    loaded = ConfiguredAgent.load(tmp_path / "agent.zip", trusted=[name])
    assert loaded.cfg == TrainConfig(hidden=5) and loaded.net.out_features == 5


def test_torchs_checkpoint_idiom_restores_the_schedulers_state_dict_into_the_live_scheduler(tmp_path):
    # {"scheduler": scheduler.state_dict()} holds no tensor, so it stays in `data` (so does a
    # plain SGD's); restore into a live scheduler at that key skipped it without a word (the
    # schedule started over), and a strict restore said only "holds stateful entries []".
    net, optimizer = _net_and_optimizer()
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=10)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    checkpoint = {
        "model": net.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": 3,
    }
    zipsave.save(checkpoint, tmp_path / "ckpt.zip")

    net2, optimizer2 = _net_and_optimizer()
    scheduler2 = torch.optim.lr_scheduler.OneCycleLR(optimizer2, max_lr=0.1, total_steps=10)
    app = {"model": net2, "optimizer": optimizer2, "scheduler": scheduler2, "epoch": 0}
    zipsave.restore(app, tmp_path / "ckpt.zip")
    assert scheduler2.last_epoch == 3 and scheduler2.state_dict() == scheduler.state_dict()
    assert app["epoch"] == 3 and app["scheduler"] is scheduler2

    # SGD's state dict holds no tensor before momentum: it is in `data` too, and checked by torch
    other = nn.Linear(3, 2)
    grouped = torch.optim.SGD([{"params": [other.weight]}, {"params": [other.bias]}], lr=1.0)
    with pytest.raises(zipsave.ParameterMismatchError, match=r"does not fit the SGD the app state holds") as err:
        zipsave.restore({"optimizer": grouped}, tmp_path / "ckpt.zip", exact_match=False)
    assert err.value.key == "optimizer" and err.value.member == "data"

    # strict=True counts state dicts saved as values as values, and now says so
    with pytest.raises(
        zipsave.ParameterMismatchError, match=r"holds `model`, `optimizer`, `scheduler` as state dicts saved as values"
    ):
        zipsave.restore(app, tmp_path / "ckpt.zip", strict=True)


def test_a_lazy_module_before_its_first_call_is_refused_at_save_not_called_corrupt_at_load(tmp_path):
    # torch.save wrote the UninitializedParameter, which torch's weights_only loader (and
    # zipsave's reader) refuses: every load then failed with "IntegrityError: member `model.pth`
    # is corrupt or unreadable ... The model would not be the one saved".
    net = nn.Sequential(nn.Linear(2, 4), nn.LazyLinear(3))
    with pytest.raises(
        zipsave.EncodeError, match=r"`model\.state_dict\(\)\['1\.weight'\]` is an uninitialized parameter"
    ):
        zipsave.save({"model": net, "step": 0}, tmp_path / "lazy.zip")
    assert not (tmp_path / "lazy.zip").exists()
    net(torch.ones(1, 2))
    zipsave.save({"model": net, "step": 0}, tmp_path / "lazy.zip")
    fresh = nn.Sequential(nn.Linear(2, 4), nn.LazyLinear(3))
    zipsave.restore({"model": fresh, "step": 0}, tmp_path / "lazy.zip")
    assert torch.equal(fresh[1].weight, net[1].weight)


def test_a_sparse_tensor_in_an_app_state_loads_and_restores_without_pickle(tmp_path):
    # It went into `data` as SB3's pickle alone (no native form for a sparse layout), which a
    # default load refused ("refusing to import untrusted global
    # `torch._utils._rebuild_sparse_tensor`"): the value was lost, though a Saveable's loads.
    adjacency = torch.eye(3).to_sparse()
    zipsave.save({"adjacency": adjacency, "step": 2}, tmp_path / "graph.zip")
    loaded = zipsave.load(tmp_path / "graph.zip", strict=True)
    assert loaded["adjacency"].layout == torch.sparse_coo
    assert torch.equal(loaded["adjacency"].to_dense(), adjacency.to_dense())
    app = {"adjacency": None, "step": 0}
    zipsave.restore(app, tmp_path / "graph.zip", strict=True)
    assert app["step"] == 2 and torch.equal(app["adjacency"].to_dense(), adjacency.to_dense())


class _Agent(zipsave.Saveable):
    def __init__(self, gamma=0.99, with_critic=False):
        self.gamma = gamma
        self.steps = 0
        self.actor = nn.Linear(2, 2)
        if with_critic:
            self.critic = nn.Linear(2, 1)


def test_a_restore_that_does_not_fit_leaves_the_object_as_it_was(tmp_path):
    # The data values were set first and the state dicts compared after: restoring a SAC archive
    # into a PPO raised ParameterMismatchError with the PPO already holding SAC's buffer_size,
    # policy_class and num_timesteps; an app state kept the archive's `epoch`.
    saved = _Agent(gamma=0.5, with_critic=True)
    saved.steps = 7
    saved.save(tmp_path / "agent.zip")
    live = _Agent()
    with pytest.raises(zipsave.ParameterMismatchError, match=r"holds state dicts \['actor', 'critic'\]"):
        zipsave.restore(live, tmp_path / "agent.zip")
    assert (live.gamma, live.steps) == (0.99, 0)

    net, optimizer = _net_and_optimizer()
    zipsave.save({"model": net, "optimizer": optimizer, "epoch": 3}, tmp_path / "ckpt.zip")
    app = {"model": nn.Linear(3, 2), "epoch": 0}
    with pytest.raises(zipsave.ParameterMismatchError, match=r"the app state has no key `optimizer`"):
        zipsave.restore(app, tmp_path / "ckpt.zip")
    assert app["epoch"] == 0


class _WithExtraState(nn.Module):
    def __init__(self, extra):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.extra = extra

    def get_extra_state(self):
        return self.extra

    def set_extra_state(self, state):
        self.extra = state


def test_a_modules_extra_state_that_no_safe_load_reads_is_refused_at_save(tmp_path):
    # get_extra_state() returning a numpy array was written, and every load then called the
    # member "corrupt or unreadable" (IntegrityError); one of tensors and plain values loads.
    with pytest.raises(zipsave.EncodeError, match=re.escape("`model.state_dict()['_extra_state']['arr']` is a numpy")):
        zipsave.save({"model": _WithExtraState({"arr": np.ones(2)})}, tmp_path / "extra.zip")
    zipsave.save({"model": _WithExtraState({"count": 3, "t": torch.ones(2)})}, tmp_path / "extra.zip")
    back = _WithExtraState(None)
    zipsave.restore({"model": back}, tmp_path / "extra.zip")
    assert back.extra["count"] == 3 and torch.equal(back.extra["t"], torch.ones(2))


def test_a_numpy_memmap_saves_its_values_and_restores_into_the_live_memmap(tmp_path):
    # A memmap (a replay buffer kept on disk) was written only as a pickle naming numpy.memmap,
    # which a default load refuses: the values were lost. It is saved as the array it views.
    buffer = np.memmap(tmp_path / "obs.dat", dtype=np.float32, mode="w+", shape=(20000,))
    buffer[:] = np.arange(20000)
    zipsave.save({"obs": buffer, "pos": 5}, tmp_path / "rb.zip")
    loaded = zipsave.load(tmp_path / "rb.zip", strict=True)
    assert type(loaded["obs"]) is np.ndarray and np.array_equal(loaded["obs"], buffer)
    live = np.memmap(tmp_path / "live.dat", dtype=np.float32, mode="w+", shape=(20000,))
    app = {"obs": live, "pos": 0}
    zipsave.restore(app, tmp_path / "rb.zip", strict=True)
    assert app["obs"] is live and np.array_equal(live, buffer) and app["pos"] == 5


def test_a_dict_of_models_and_optimizers_in_an_app_state_saves_as_a_folder_and_restores(tmp_path):
    # {"models": {"actor": actor, "critic": critic}} was pickled whole into `data`, modules and
    # all, and a default load refused it ("untrusted global torch.nn.modules.linear.Linear"):
    # restore left the live models as they were built, with a warning only.
    torch.manual_seed(0)
    actor, critic = nn.Linear(2, 2), nn.Linear(2, 1)
    optimizers = {"actor": torch.optim.Adam(actor.parameters()), "critic": torch.optim.Adam(critic.parameters())}
    saved = {"models": {"actor": actor, "critic": critic, "tau": 0.01}, "optimizers": optimizers, "step": 4}
    zipsave.save(saved, tmp_path / "ckpt.zip")
    with zipfile.ZipFile(tmp_path / "ckpt.zip") as zf:
        assert {"models/actor.pth", "models/critic.pth", "optimizers/actor.pth"} <= set(zf.namelist())
    loaded = zipsave.load(tmp_path / "ckpt.zip", strict=True)
    assert loaded["models"]["tau"] == 0.01 and torch.equal(loaded["models"]["actor"]["weight"], actor.weight)

    actor2, critic2 = nn.Linear(2, 2), nn.Linear(2, 1)
    optimizers2 = {"actor": torch.optim.Adam(actor2.parameters()), "critic": torch.optim.Adam(critic2.parameters())}
    app = {"models": {"actor": actor2, "critic": critic2, "tau": 0.0}, "optimizers": optimizers2, "step": 0}
    zipsave.restore(app, tmp_path / "ckpt.zip", strict=True)
    assert app["models"]["actor"] is actor2 and torch.equal(actor2.weight, actor.weight)
    assert app["models"]["tau"] == 0.01 and app["step"] == 4 and app["optimizers"] is optimizers2

    with pytest.raises(zipsave.ParameterMismatchError, match=r"no dict at `models`") as err:
        zipsave.restore({"optimizers": optimizers2, "step": 0}, tmp_path / "ckpt.zip")
    assert "exclude=['models']" in str(err.value)
    with pytest.raises(zipsave.EncodeError, match=r"in a list or tuple, which an app state saves only in a dict"):
        zipsave.save({"optimizers": list(optimizers.values())}, tmp_path / "list.zip")
    assert not (tmp_path / "list.zip").exists()


class _Other(zipsave.Saveable):
    def __init__(self, width=3):
        self.net = nn.Linear(width, 1)


def test_loading_another_classs_archive_names_the_class_it_holds(tmp_path):
    # Agent.load of another Saveable's archive said only "unexpected keyword argument 'width'.
    # Pass the missing or broken constructor arguments as keyword overrides".
    _Other(width=4).save(tmp_path / "other.zip")
    with pytest.raises(zipsave.DecodeError, match=r"unexpected keyword argument 'width'") as err:
        _Agent.load(tmp_path / "other.zip")
    assert f"The archive holds a `{_Other.__module__}:_Other` (its init.json), not a _Agent" in str(err.value)
    assert type(zipsave.load(tmp_path / "other.zip")) is _Other


# -- nested tensors: refused when saving, with what to save instead ---------------------------


def _nested(layout):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: the nested tensor API is a prototype
        return torch.nested.nested_tensor([torch.ones(2), torch.zeros(3)], layout=layout)


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged], ids=["strided", "jagged"])
def test_a_nested_tensor_is_refused_before_anything_is_written(tmp_path, layout):
    # a strided one failed inside the encoder ("RuntimeError: reshape: For now nested reshape
    # cannot change ..."); a jagged one was written, and every load then called its member
    # corrupt ("refusing to import untrusted global ..._rebuild_njt")
    path = tmp_path / "nested.zip"
    with pytest.raises(zipsave.EncodeError, match=re.escape("is a nested tensor")) as caught:
        zipsave.save({"model": torch.nn.Linear(2, 2), "lengths": _nested(layout)}, path)
    assert caught.value.key == "lengths" and "unbind()" in str(caught.value)
    assert not path.exists()
