"""Round twelve of the adversarial suite: the values a restored learning-rate scheduler or
optimizer computes with (ranges, flag combinations torch refuses), EnvState attributes the live
environment holds as None, a Saveable's recorded constructor arguments, ``extract`` onto a file
system that folds case, and the archive-level families listed with their tests below."""

from __future__ import annotations

import collections
import io
import re
import zipfile

import pytest
from test_adversarial_round11 import (  # round eleven's helpers, as they are
    _ADAM,
    _advance,
    _optimizer_archive,
    _put,
    _rewritten_pth,
    _scheduled,
    _state_entry,
)
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

import zipsave
from zipsave._tools import extract

torch = pytest.importorskip("torch")

# -- a scheduler's saved numbers: within the ranges its step computes in ------------------------

_INF, _NAN = float("inf"), float("nan")
SCHEDULER_VALUES = {
    # what the first steps did after the old tree's restore
    "steplr-step_size-0": ("StepLR", _put("step_size", 0), "step_size"),  # ZeroDivisionError
    "steplr-gamma-nan": ("StepLR", _put("gamma", _NAN), "gamma"),  # every lr NaN
    "steplr-gamma-inf": ("StepLR", _put("gamma", _INF), "gamma"),  # every lr inf
    "steplr-base_lrs-nan": ("StepLR", _put("base_lrs", [_NAN]), "base_lrs"),
    "steplr-last_lr-text": ("StepLR", _put("_last_lr", ["x"]), "_last_lr"),
    "exponential-gamma-negative": ("ExponentialLR", _put("gamma", -1.0), "gamma"),  # a negative lr
    "multistep-milestones-text": ("MultiStepLR", _put("milestones", "ab"), "milestones"),  # TypeError
    "multistep-negative-count": (  # OverflowError: 0.1 ** -1000000
        "MultiStepLR",
        _put("milestones", collections.Counter({4: -(10**6)})),
        "milestones",
    ),
    "cosine-T_max-0": ("CosineAnnealingLR", _put("T_max", 0), "T_max"),  # ZeroDivisionError
    "cosine-eta_min-nan": ("CosineAnnealingLR", _put("eta_min", _NAN), "eta_min"),
    "restarts-T_i-0": ("CosineAnnealingWarmRestarts", _put("T_i", 0), "T_i"),  # ZeroDivisionError
    "restarts-T_mult-0": ("CosineAnnealingWarmRestarts", _put("T_mult", 0), "T_mult"),
    "onecycle-total_steps-0": ("OneCycleLR", _put("total_steps", 0), "total_steps"),  # ValueError
    "onecycle-anneal-unknown": ("OneCycleLR", _put("_anneal_func_type", "x"), "_anneal_func_type"),
    "onecycle-phases-text": ("OneCycleLR", _put("_schedule_phases", ["x", "y"]), "_schedule_phases"),
    "onecycle-phase-names-params": (
        "OneCycleLR",
        _put("_schedule_phases", 0, "start_lr", "params"),
        "_schedule_phases",
    ),
    "cyclic-total_size-0": ("CyclicLR", _put("total_size", 0), "total_size"),  # ZeroDivisionError
    "cyclic-step_ratio-0": ("CyclicLR", _put("step_ratio", 0.0), "step_ratio"),
    "cyclic-mode-unknown": ("CyclicLR", _put("mode", "x"), "mode"),
    "cyclic-scale_fn-attributes": ("CyclicLR", _put("_scale_fn_custom", {"zz": 1}), "_scale_fn_custom"),
    "plateau-mode-unknown": ("ReduceLROnPlateau", _put("mode", "x"), "mode"),  # ValueError at restore
    "plateau-factor-2": ("ReduceLROnPlateau", _put("factor", 2.0), "factor"),  # the lr grows on a plateau
    "plateau-best-nan": ("ReduceLROnPlateau", _put("best", _NAN), "best"),
    "polynomial-power-nan": ("PolynomialLR", _put("power", _NAN), "power"),
    "linear-start_factor-0": ("LinearLR", _put("start_factor", 0.0), "start_factor"),
    "sequential-milestones-text": ("SequentialLR", _put("_milestones", ["x"]), "_milestones"),  # TypeError
    "sequential-child-gamma-nan": ("SequentialLR", _put("_schedulers", 1, "gamma", _NAN), "_schedulers.1.gamma"),
}


@pytest.mark.parametrize("case", SCHEDULER_VALUES.values(), ids=SCHEDULER_VALUES.keys())
def test_a_scheduler_value_its_step_cannot_compute_with_is_refused(case):
    # torch's load_state_dict sets what it is given; its constructors check some of these
    # (T_0 > 0, factor < 1, mode), its step divides by the others or multiplies by them.
    name, change, key = case
    hostile = _scheduler_archive(name, change)
    net, opt, scheduler = _scheduled(name)
    before = repr(scheduler.state_dict())
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(f"`{key}`")) as caught:
        zipsave.restore({"net": net, "opt": opt, "sched": scheduler}, hostile)
    assert caught.value.member == "sched.pth" and caught.value.key == key
    assert repr(scheduler.state_dict()) == before  # nothing set before the refusal


def _scheduler_archive(name, change) -> io.BytesIO:
    net, opt, scheduler = _scheduled(name)
    _advance(opt, scheduler)
    return _rewritten_pth({"net": net, "opt": opt, "sched": scheduler}, "sched.pth", change)


def test_a_scheduler_whose_own_load_raises_is_named_with_its_member():
    # CyclicLR's load_state_dict pops `_scale_fn_custom` without a default: the old tree let
    # its KeyError out as "could not be read", naming no member.
    def drop(state):
        del state["_scale_fn_custom"]

    hostile = _scheduler_archive("CyclicLR", drop)
    net, opt, scheduler = _scheduled("CyclicLR")
    with pytest.raises(zipsave.ParameterMismatchError, match="KeyError") as caught:
        zipsave.restore({"net": net, "opt": opt, "sched": scheduler}, hostile)
    assert caught.value.member == "sched.pth"


def test_scheduler_values_torch_writes_still_restore():
    # ReduceLROnPlateau keeps best and mode_worse at infinity until a metric comes; a
    # MultiStepLR milestone given twice is counted twice; gamma above 1 warms up.
    lr = torch.optim.lr_scheduler
    for make in (
        lambda o: lr.ReduceLROnPlateau(o, mode="max"),
        lambda o: lr.MultiStepLR(o, [2, 2, 5], gamma=0.5),
        lambda o: lr.ExponentialLR(o, 1.01),
        lambda o: lr.StepLR(o, 1, gamma=0.0),
    ):
        opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
        saved = io.BytesIO()
        zipsave.save({"opt": opt, "sched": make(opt)}, saved)
        fresh = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
        saved.seek(0)
        zipsave.restore({"opt": fresh, "sched": make(fresh)}, saved, strict=True)


# -- an optimizer's saved settings: a combination torch takes, and the state its step reads -------


def _settings(**changes):
    def change(state):
        state["param_groups"][0].update(changes)

    return change


def _rmsprop(p):
    return torch.optim.RMSprop(p)


OPTIMIZER_COMBINATIONS = {
    # what the first step did after the old tree's restore (torch's constructor refuses the first five)
    "adam-differentiable-fused": (_ADAM, _settings(differentiable=True, fused=True), "RuntimeError"),  # at step
    "adam-foreach-fused": (_ADAM, _settings(foreach=True, fused=True), "RuntimeError"),
    "adam-eps-negative": (_ADAM, _settings(eps=-1.0), "ValueError"),  # every weight NaN
    "adam-betas-past-1": (_ADAM, _settings(betas=(2.0, 0.999)), "ValueError"),
    "sgd-nesterov-without-momentum": (
        lambda p: torch.optim.SGD(p, lr=0.1),
        _settings(nesterov=True),
        "ValueError",
    ),
    "adam-capturable-on-cpu": (_ADAM, _settings(capturable=True), "AssertionError"),  # at step
}


@pytest.mark.parametrize("case", OPTIMIZER_COMBINATIONS.values(), ids=OPTIMIZER_COMBINATIONS.keys())
def test_optimizer_settings_torch_refuses_are_refused_at_restore(case):
    make, change, raised = case
    hostile = _optimizer_archive(make, change)
    net = torch.nn.Linear(8, 8)
    opt = make(net.parameters())
    before = repr([{k: v for k, v in group.items() if k != "params"} for group in opt.param_groups])
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(raised)) as caught:
        zipsave.restore({"net": net, "opt": opt}, hostile)
    assert caught.value.member == "opt.pth" and caught.value.key == "param_groups.0"
    assert repr([{k: v for k, v in group.items() if k != "params"} for group in opt.param_groups]) == before


@pytest.mark.parametrize(
    ("key", "value"), [("lr", float("inf")), ("weight_decay", float("inf")), ("lr", 10**400), ("eps", -(10**400))]
)
def test_an_infinite_optimizer_setting_is_refused(key, value):
    # torch's constructor takes lr=inf; the first step made every weight inf or NaN. An int
    # past float's range (lr=10**400) raised OverflowError at the first step.
    hostile = _optimizer_archive(_ADAM, _settings(**{key: value}))
    net = torch.nn.Linear(8, 8)
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(f"`param_groups.0.{key}` is not a finite")):
        zipsave.restore({"net": net, "opt": _ADAM(net.parameters())}, hostile)


STATE_FOR_SETTINGS = {
    # a flag turned on whose state the saved entries lack: KeyError at the first step
    "adam-amsgrad": (_ADAM, _settings(amsgrad=True), "max_exp_avg_sq"),
    "rmsprop-momentum": (_rmsprop, _settings(momentum=0.9), "momentum_buffer"),
    "rmsprop-centered": (_rmsprop, _settings(centered=True), "grad_avg"),
}


@pytest.mark.parametrize("case", STATE_FOR_SETTINGS.values(), ids=STATE_FOR_SETTINGS.keys())
def test_a_saved_state_without_what_its_settings_step_reads_is_refused(case):
    make, change, missing = case
    hostile = _optimizer_archive(make, change)
    net = torch.nn.Linear(8, 8)
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(missing)) as caught:
        zipsave.restore({"net": net, "opt": make(net.parameters())}, hostile)
    assert caught.value.key == "state.0"


def test_a_learning_rate_a_schedule_took_below_zero_still_restores():
    # SB3's linear schedule ends a hair below 0: published RL Zoo agents saved lr=-9.6e-07 (PPO
    # CartPole-v1), -1.98e-08 (PPO BipedalWalkerHardcore-v3), -1.44e-06 (QR-DQN LunarLander-v2),
    # which torch's constructor refuses and its step computes with; the schedule sets the next
    # one at the next update
    saved = _optimizer_archive(_ADAM, _settings(lr=-1.440000000000108e-06))
    net = torch.nn.Linear(8, 8)
    opt = _ADAM(net.parameters())
    zipsave.restore({"net": net, "opt": opt}, saved, strict=True)
    assert opt.param_groups[0]["lr"] == -1.440000000000108e-06
    net(torch.ones(8)).sum().backward()
    opt.step()


def test_optimizer_settings_torch_takes_still_restore():
    # a saved group's own choices of kernels and flags (fused, foreach, maximize, amsgrad with
    # its state), and SGD's momentum without a buffer (its step makes one)
    for make, change in (
        (lambda p: torch.optim.Adam(p, amsgrad=True), _settings(fused=True, maximize=True)),
        (_ADAM, _settings(foreach=True, lr=0.5)),
        (lambda p: torch.optim.SGD(p, lr=0.1), _settings(momentum=0.9)),
    ):
        hostile = _optimizer_archive(make, change)
        net = torch.nn.Linear(8, 8)
        opt = make(net.parameters())
        zipsave.restore({"net": net, "opt": opt}, hostile, strict=True)
        net(torch.ones(8)).sum().backward()
        opt.step()


def test_trying_the_saved_settings_runs_no_step_hook_of_the_callers():
    # torch's verdict on the settings comes from a stand-in's step: the caller's global step
    # hooks (a logger counting steps) must not see it
    taken, refused = _optimizer_archive(_ADAM, _settings(lr=0.25)), _optimizer_archive(_ADAM, _settings(eps=-1.0))
    net = torch.nn.Linear(8, 8)
    opt = _ADAM(net.parameters())
    seen = []
    handles = [
        register_optimizer_step_pre_hook(lambda opt, args, kwargs: seen.append("pre")),
        register_optimizer_step_post_hook(lambda opt, args, kwargs: seen.append("post")),
    ]
    try:
        zipsave.restore({"net": net, "opt": opt}, taken)
        assert opt.param_groups[0]["lr"] == 0.25
        with pytest.raises(zipsave.ParameterMismatchError, match="ValueError"):
            zipsave.restore({"net": net, "opt": opt}, refused)
        assert seen == []
        net(torch.ones(8)).sum().backward()
        opt.step()  # the hooks themselves work
        assert seen == ["pre", "post"]
    finally:
        for handle in handles:
            handle.remove()


# -- an optimizer's saved state: tensors its step can write, numbers it can compute with ----------


def _fused_adam(p):
    return torch.optim.Adam(p, fused=True)


def _fused_sgd(p):
    return torch.optim.SGD(p, lr=0.1, momentum=0.9, fused=True)


OPTIMIZER_STATE_VALUES = {
    # what the first step did after the old tree's restore
    "fused-adam-expanded": (  # 64 writes into a 4-byte storage: "corrupted size vs. prev_size", abort
        _fused_adam,
        _state_entry("exp_avg", torch.zeros(1).expand(8, 8)),
        "state.0.exp_avg",
        "share memory",
    ),
    "fused-sgd-expanded": (  # "corrupted double-linked list", abort
        _fused_sgd,
        _state_entry("momentum_buffer", torch.zeros(1).expand(8, 8)),
        "state.0.momentum_buffer",
        "share memory",
    ),
    "adam-expanded": (_ADAM, _state_entry("exp_avg", torch.zeros(1).expand(8, 8)), "state.0.exp_avg", "share memory"),
    "fused-adam-gaps": (  # the kernel wrote 64 elements in a row over a view that skips every other
        _fused_adam,
        _state_entry("exp_avg", torch.zeros(8, 16)[:, ::2]),
        "state.0.exp_avg",
        "leave gaps",
    ),
    "adam-sparse": (_ADAM, _state_entry("exp_avg", torch.zeros(8, 8).to_sparse()), "state.0.exp_avg", "sparse"),
    "adam-list": (_ADAM, _state_entry("exp_avg", [1.0]), "state.0.exp_avg", "a list where"),  # AttributeError
    "adam-none": (_ADAM, _state_entry("exp_avg", None), "state.0.exp_avg", "a NoneType where"),
    "sgd-text": (_fused_sgd, _state_entry("momentum_buffer", "x"), "state.0.momentum_buffer", "a str where"),
    "adam-step-bool": (_ADAM, _state_entry("step", torch.tensor(True)), "state.0.step", "torch.bool"),  # RuntimeError
    "adam-step-complex": (_ADAM, _state_entry("step", torch.tensor(1 + 1j)), "state.0.step", "complex"),
    "adam-step-nan": (_ADAM, _state_entry("step", torch.tensor(float("nan"))), "state.0.step", "nan"),  # NaN weights
    "adam-step-negative": (_ADAM, _state_entry("step", torch.tensor(-1.0)), "state.0.step", "0 or more"),  # 1/0
}


@pytest.mark.parametrize("case", OPTIMIZER_STATE_VALUES.values(), ids=OPTIMIZER_STATE_VALUES.keys())
def test_an_optimizer_state_its_step_cannot_write_or_compute_with_is_refused(case):
    # torch's load_state_dict keeps the saved tensors as the state its step writes in place;
    # its fused kernels write each as one run of memory of the parameter's size.
    make, change, key, message = case
    hostile = _optimizer_archive(make, change)
    net = torch.nn.Linear(8, 8)
    opt = make(net.parameters())
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(message)) as caught:
        zipsave.restore({"net": net, "opt": opt}, hostile)
    assert caught.value.member == "opt.pth" and caught.value.key == key
    assert not opt.state  # nothing loaded


def test_optimizer_state_layouts_torch_writes_still_restore():
    # a channels-last parameter's state (dense, not contiguous), a step of 0, an int step
    # (older torch), a state tensor at an offset of its storage
    conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    opt = _fused_adam(conv.parameters())
    conv(torch.ones(1, 3, 5, 5).to(memory_format=torch.channels_last)).sum().backward()
    opt.step()
    saved = io.BytesIO()
    zipsave.save({"conv": conv, "opt": opt}, saved)
    fresh = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    fresh_opt = _fused_adam(fresh.parameters())
    saved.seek(0)
    zipsave.restore({"conv": fresh, "opt": fresh_opt}, saved, strict=True)
    fresh_opt.step()
    for change in (
        _state_entry("step", torch.tensor(0.0)),
        _state_entry("step", 3),
        _state_entry("exp_avg", torch.zeros(100)[36:].view(8, 8)),
    ):
        hostile = _optimizer_archive(_fused_adam, change)
        net = torch.nn.Linear(8, 8)
        opt = _fused_adam(net.parameters())
        zipsave.restore({"net": net, "opt": opt}, hostile)
        net(torch.ones(8)).sum().backward()
        opt.step()


# -- extract where case is ignored ------------------------------------------------------------------

CASE_VARIANTS = {
    # members one file system takes for one file (macOS, Windows)
    "case": (("policy.pth", "Policy.pth"), "Policy.pth"),
    "normalization": (("caf\u00e9.txt", "cafe\u0301.txt"), "cafe\u0301.txt"),  # NFC and NFD spellings
    "folder-and-file": (("data", "DATA/x"), "DATA/x"),  # a file where a folder is needed
    "trailing-dot": (("policy.pth", "policy.pth."), "policy.pth."),  # Windows drops trailing dots
    "trailing-space": (("policy.pth", "policy.pth "), "policy.pth "),  # and spaces
}


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("case", CASE_VARIANTS.values(), ids=CASE_VARIANTS.keys())
def test_extract_refuses_members_that_differ_only_by_case_before_writing(tmp_path, case, overwrite):
    # On a case-insensitive file system the old tree wrote the second over the first with
    # --overwrite (or failed halfway without it); here, where case counts, it wrote both.
    names, refused = case
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for index, name in enumerate(names):
            zf.writestr(name, f"member {index}")
    out = tmp_path / "out"
    with pytest.raises(zipsave.ArchiveFormatError) as caught:
        extract(archive, out, overwrite=overwrite)
    assert caught.value.member == refused
    assert not out.exists() or not any(out.iterdir())  # nothing written


def test_extract_still_writes_folders_named_by_case_variants(tmp_path):
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("models/", b"")
        zf.writestr("Models/", b"")
        zf.writestr("models/a.pth", b"a")
    assert [p.rsplit("/", 1)[-1] for p in extract(archive, tmp_path / "out")] == ["a.pth"]


@pytest.mark.parametrize(
    "name",
    ["policy\u202ecod.pth", "a\nb.pth", "x/a\x1b[2Jb.pth", "a\u200bb.pth", "a\u2028b.pth"],
    ids=["bidi-override", "line-feed", "escape-sequence", "zero-width", "line-separator"],
)
def test_extract_refuses_a_file_name_a_terminal_or_file_manager_would_act_on(tmp_path, name):
    # The old tree made such a member a file: `policy\u202ecod.pth` shows as `policyhtp.doc`
    # in a file manager, a line feed splits what `ls | xargs` reads, an escape sequence in a
    # name clears the terminal that lists it.
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("data", b"{}")
        zf.writestr(name, b"x")
    out = tmp_path / "out"
    with pytest.raises(zipsave.ArchiveFormatError, match="refusing to make it a file name") as caught:
        extract(archive, out)
    assert caught.value.member == name and str(caught.value).isprintable()  # the name shown escaped
    assert not out.exists() or not any(out.iterdir())
