"""First-load rows (issue 31): the first call in a fresh interpreter, imports included.

The worker (``_worker.py``) runs an op marked ``fresh`` without its untimed warm-up call and
refuses to time it if anything of zipsave, SB3 or safetensors is already imported: before the
timer only ``torch`` (which both sides need), the standard library and this folder's modules
are. So ``zipsave_*_first`` times ``import zipsave`` and its first ``load_archive`` / ``load`` /
``inspect``, against ``torch_load_first``, the first ``torch.load`` in an equally fresh
interpreter. The worker records which integrations ended up imported (``imported``) and the
part of the time ``import zipsave`` (and SB3) took (``import_s``; zipsave's modules load on
first use, so most of its import cost falls in the first call), and an op that names
``forbids`` fails when one of those integrations was imported (the PPO row: any but SB3's).

The SB3 pair loads a PPO (``MlpPolicy``, ``net_arch=[w, w, w]`` for the policy and the value
network: as many parameters as the main model, Adam state after one step) saved by
``zipsave.save`` and by SB3's ``save``; both time ``from stable_baselines3 import PPO``.

This module imports ``_ops`` and nothing imports it back but ``_catalog``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from _ops import FILES, Ctx, Op, _check_result, width_for

#: The integrations a first load may import; a plain torch archive must import none of them.
INTEGRATIONS = ("zipsave.sb3", "zipsave.rllib", "zipsave.dcp")
#: Imported before the timer of a ``fresh`` op, the row would not show a first load.
NOT_BEFORE = ("zipsave", "stable_baselines3", "sb3_contrib", "safetensors")


# -- input files ---------------------------------------------------------------------------
def build_ppo(n_params: float, seed: int = 0) -> Any:
    """A PPO whose policy and value networks hold about ``n_params`` parameters, Adam stepped once."""
    from stable_baselines3 import PPO

    w = width_for(n_params)
    model = PPO("MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": [w, w, w]}, seed=seed, device="cpu")
    gen = torch.Generator().manual_seed(seed + 100)
    for p in model.policy.parameters():
        p.grad = torch.rand(p.shape, generator=gen)
    model.policy.optimizer.step()
    model.policy.optimizer.zero_grad(set_to_none=True)
    return model


def prepare(folder: str, n_params: float) -> dict[str, int]:
    """Write the PPO archives of one size (zipsave's and SB3's); return their sizes."""
    import zipsave

    model = build_ppo(n_params)
    path = {k: os.path.join(folder, FILES[k]) for k in ("zipsave_ppo", "sb3_ppo")}
    zipsave.save(model, path["zipsave_ppo"])
    model.save(path["sb3_ppo"])
    return {k: os.path.getsize(p) for k, p in path.items()}


# -- timed bodies --------------------------------------------------------------------------
def _imported(ctx: Ctx, sb3: bool = False) -> Any:
    """``import zipsave`` (and SB3's ``PPO``) inside the timed body; its share of the row's
    time goes to ``ctx.extra["import_s"]`` (the worker reports it as ``import_s``)."""
    t0 = time.perf_counter()
    import zipsave

    if sb3:
        from stable_baselines3 import PPO

        ctx.extra["PPO"] = PPO
    ctx.extra["import_s"] = time.perf_counter() - t0
    return zipsave


def _load_archive(ctx: Ctx) -> None:
    ctx.result = _imported(ctx).load_archive(ctx.path("zipsave"))[1]


def _load(ctx: Ctx) -> None:
    ctx.result = _imported(ctx).load(ctx.path("zipsave"))


def _inspect(ctx: Ctx) -> None:
    ctx.result = _imported(ctx).inspect(ctx.path("zipsave"))


def _torch_load(ctx: Ctx) -> None:
    ctx.result = torch.load(ctx.path("torch"), weights_only=True)


def _zipsave_ppo(ctx: Ctx) -> None:
    zipsave = _imported(ctx, sb3=True)
    ctx.result = zipsave.load(ctx.path("zipsave_ppo"), cls=ctx.extra["PPO"], device="cpu")


def _sb3_ppo(ctx: Ctx) -> None:
    t0 = time.perf_counter()
    from stable_baselines3 import PPO

    ctx.extra["import_s"] = time.perf_counter() - t0
    ctx.result = PPO.load(ctx.path("sb3_ppo"), device="cpu")


# -- checks (untimed, after the row) ---------------------------------------------------------
def _check_inspect(ctx: Ctx) -> None:
    """inspect found the layout, the data keys and every tensor of the archive."""
    import _ops

    info = ctx.result
    want = len(_ops.state_tensors(*_ops.build_model(ctx.n, _ops.SEED_SAVED)))
    if info.layout != "zipsave" or "learning_rate" not in str(info.data) or len(info.tensors) != want:
        raise AssertionError(
            f"inspect: layout {info.layout!r}, {len(info.tensors)} tensors (want {want}), data {str(info.data)[:120]}"
        )


def _same_ppo(mine: Any, theirs: Any) -> None:
    """Two PPOs read from the two archives of one saved PPO hold the same state."""
    import _ops

    if not mine.policy.optimizer.state_dict()["state"]:
        raise AssertionError("the loaded PPO has no Adam state: not the archive prepare() wrote")
    _ops._same(mine.policy.state_dict(), theirs.policy.state_dict(), "policy")
    _ops._same(
        mine.policy.optimizer.state_dict()["state"],
        theirs.policy.optimizer.state_dict()["state"],
        "policy.optimizer.state",
    )


def _check_zipsave_ppo(ctx: Ctx) -> None:
    from stable_baselines3 import PPO

    _same_ppo(ctx.result, PPO.load(ctx.path("sb3_ppo"), device="cpu"))


def _check_sb3_ppo(ctx: Ctx) -> None:
    from stable_baselines3 import PPO

    import zipsave

    _same_ppo(ctx.result, zipsave.load(ctx.path("zipsave_ppo"), cls=PPO, device="cpu"))


FIRST_OPS: list[Op] = [
    Op(
        "torch_load_first",
        "load",
        "first torch.load in a fresh process",
        _torch_load,
        reads="torch",
        check=_check_result,
        fresh=True,
    ),
    Op(
        "zipsave_load_archive_first",
        "load",
        "import zipsave + first load_archive, fresh process",
        _load_archive,
        reads="zipsave",
        check=_check_result,
        fresh=True,
        forbids=INTEGRATIONS,
    ),
    Op(
        "zipsave_load_first",
        "load",
        "import zipsave + first load, fresh process",
        _load,
        reads="zipsave",
        check=_check_result,
        fresh=True,
        forbids=INTEGRATIONS,
    ),
    Op(
        "zipsave_inspect_first",
        "load",
        "import zipsave + first inspect, fresh process (reads no tensor)",
        _inspect,
        reads="zipsave",
        check=_check_inspect,
        fresh=True,
        forbids=INTEGRATIONS,
    ),
    Op(
        "sb3_load_ppo_first",
        "load",
        "import SB3 + first PPO.load, fresh process",
        _sb3_ppo,
        reads="sb3_ppo",
        check=_check_sb3_ppo,
        fresh=True,
    ),
    Op(
        "zipsave_load_ppo_first",
        "load",
        "import zipsave, SB3 + first load(cls=PPO), fresh process",
        _zipsave_ppo,
        reads="zipsave_ppo",
        check=_check_zipsave_ppo,
        fresh=True,
        forbids=("zipsave.rllib", "zipsave.dcp"),
    ),
]
