"""The benchmark's model and operations: each op has an untimed setup and a timed body.

Every op runs in a fresh interpreter (``_worker.py``); this module only defines what runs.
Input files are written once per size by :func:`prepare` and shared by the load ops.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

SEED_SAVED = 0  # the model written to every input file
SEED_TARGET = 1  # the live model that restores overwrite
WARM_N = 1e3  # the tiny model each worker runs its op on once, untimed, before measuring

#: Plain ``data`` values stored beside the tensors (same for zipsave and SB3).
DATA = {"learning_rate": 3e-4, "gamma": 0.99, "n_steps": 2048}

#: Input files of one size, relative to that size's folder.
FILES = {
    "zipsave": "model.zip",
    "sb3": "sb3.zip",
    "torch": "model.pt",
    "safetensors": "policy.safetensors",
    "raw": "raw.bin",
    "zipsave_ppo": "ppo.zip",  # the first-load rows' PPO (``_ops_first.prepare`` writes these two)
    "sb3_ppo": "sb3_ppo.zip",
}


# -- the model -----------------------------------------------------------------------------
def width_for(n_params: float) -> int:
    """Width ``w`` of a 4 x Linear(w, w) MLP with about ``n_params`` parameters."""
    return max(1, round((-1 + math.sqrt(1 + n_params)) / 2))


def build_model(n_params: float, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A 4 x Linear(w, w) policy and its Adam optimizer after one step (state populated)."""
    torch.manual_seed(seed)
    w = width_for(n_params)
    policy = nn.Sequential(*[nn.Linear(w, w) for _ in range(4)])
    optimizer = torch.optim.Adam(policy.parameters(), lr=DATA["learning_rate"], foreach=True)
    gen = torch.Generator().manual_seed(seed + 100)
    for p in policy.parameters():
        p.grad = torch.rand(p.shape, generator=gen)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    policy.optimizer = optimizer  # SB3's layout: the optimizer hangs off the policy
    return policy, optimizer


def state_tensors(policy: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    out = list(policy.state_dict().values())
    for state in optimizer.state_dict()["state"].values():
        out.extend(v for v in state.values() if isinstance(v, torch.Tensor))
    return out


def policy_bytes(policy: nn.Module) -> int:
    return sum(t.nbytes for t in policy.state_dict().values())


def total_bytes(policy: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    return sum(t.nbytes for t in state_tensors(policy, optimizer))


def model_bytes(n_params: float) -> tuple[int, int]:
    """(policy bytes, policy + Adam bytes) of the model built for ``n_params``, without building it."""
    w = width_for(n_params)
    params = 4 * (w * w + w)
    policy = 4 * params
    return policy, 3 * policy + 4 * 8  # exp_avg, exp_avg_sq, and a 0-d float32 step per tensor


def state_dicts(policy: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    return {"policy": policy.state_dict(), "policy.optimizer": optimizer.state_dict()}


def apply(policy: nn.Module, optimizer: torch.optim.Optimizer, params: dict[str, Any]) -> None:
    """What SB3's ``set_parameters`` does with loaded state dicts."""
    policy.load_state_dict(params["policy"])
    if "policy.optimizer" in params:
        optimizer.load_state_dict(params["policy.optimizer"])


def app_state(policy: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """What zipsave saves and restores: two stateful objects plus plain values."""
    return {"policy": policy, "policy.optimizer": optimizer, **DATA}


# -- input files ---------------------------------------------------------------------------
def prepare(folder: str, n_params: float) -> dict[str, int]:
    """Write every input file for one size; return their sizes in bytes."""
    from safetensors.torch import save_file
    from stable_baselines3.common.save_util import save_to_zip_file

    import zipsave

    os.makedirs(folder, exist_ok=True)
    policy, optimizer = build_model(n_params, SEED_SAVED)
    path = {k: os.path.join(folder, v) for k, v in FILES.items()}
    zipsave.save(app_state(policy, optimizer), path["zipsave"])
    save_to_zip_file(path["sb3"], data=dict(DATA), params=state_dicts(policy, optimizer), pytorch_variables={})
    torch.save(state_dicts(policy, optimizer), path["torch"])
    save_file(policy.state_dict(), path["safetensors"])
    with open(path["raw"], "wb") as f:
        f.writelines(
            t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data for t in state_tensors(policy, optimizer)
        )
    return {k: os.path.getsize(p) for k, p in path.items() if os.path.exists(p)}


# -- checks (untimed; on with --check, always in --smoke) -------------------------------------
def _same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)):
            raise AssertionError(f"{where}: tensors differ")
    elif isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            raise AssertionError(f"{where}: keys differ ({sorted(map(str, a))} vs {sorted(map(str, b))})")
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise AssertionError(f"{where}: lengths differ")
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif a != b:
        raise AssertionError(f"{where}: {a!r} != {b!r}")


def check_params(n_params: float, params: dict[str, Any], *, optimizer: bool = True) -> None:
    policy, opt = build_model(n_params, SEED_SAVED)
    _same(policy.state_dict(), dict(params["policy"]), "policy")
    if optimizer:
        _same(opt.state_dict()["state"], params["policy.optimizer"]["state"], "policy.optimizer.state")


def check_live(n_params: float, policy: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    check_params(n_params, state_dicts(policy, optimizer))


# -- operations ----------------------------------------------------------------------------
@dataclasses.dataclass
class Ctx:
    """What an op's setup prepared; the timed body reads from it."""

    n: float
    folder: str
    out: str
    policy: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    buffer: np.ndarray | None = None
    result: Any = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def path(self, kind: str) -> str:
        return os.path.join(self.folder, FILES[kind])


@dataclasses.dataclass(frozen=True)
class Op:
    """One measured operation.

    ``group`` is "save" or "load" (which raw floor it is compared with); ``moves`` is
    "all" (policy + Adam) or "policy" (a third of the bytes); ``model`` says whether setup
    builds a live model (seed 1) for the op to write from or restore into; ``reads`` names the
    input file the op reads (warmed into the page cache before timing); ``fresh`` ops are timed
    as the first call of a fresh interpreter (no warm-up call, nothing of zipsave imported
    before), and fail when one of the modules ``forbids`` names was imported by them.
    """

    name: str
    group: str
    label: str
    body: Callable[[Ctx], None]
    moves: str = "all"
    model: bool = False
    reads: str | None = None
    check: Callable[[Ctx], None] | None = None
    needs: str | None = None  # an attribute of zipsave that must exist
    fresh: bool = False
    forbids: tuple[str, ...] = ()


def _zipsave() -> Any:
    import zipsave

    return zipsave


# saves ---------------------------------------------------------------------------------------
def _raw_write(ctx: Ctx, fsync: bool = False) -> None:
    with open(ctx.out, "wb", buffering=0) as f:
        f.write(memoryview(ctx.buffer))
        if fsync:
            os.fsync(f.fileno())


def _zipsave_save(ctx: Ctx) -> None:
    with open(ctx.out, "wb") as f:  # an open file: no temporary file, no fsync (like torch.save)
        _zipsave().save(app_state(ctx.policy, ctx.optimizer), f)


def _zipsave_save_sha256(ctx: Ctx) -> None:
    with open(ctx.out, "wb") as f:
        _zipsave().save(app_state(ctx.policy, ctx.optimizer), f, sha256=True)


def _zipsave_save_durable(ctx: Ctx) -> None:
    _zipsave().save(app_state(ctx.policy, ctx.optimizer), ctx.out)  # temp file + fsync + rename


def _zipsave_save_nondurable(ctx: Ctx) -> None:
    _zipsave().save(app_state(ctx.policy, ctx.optimizer), ctx.out, durable=False)  # temp file + rename


def _sb3_save(ctx: Ctx) -> None:
    from stable_baselines3.common.save_util import save_to_zip_file

    save_to_zip_file(ctx.out, data=dict(DATA), params=state_dicts(ctx.policy, ctx.optimizer), pytorch_variables={})


def _torch_save(ctx: Ctx) -> None:
    torch.save(state_dicts(ctx.policy, ctx.optimizer), ctx.out)


def _torch_save_fsync(ctx: Ctx) -> None:
    with open(ctx.out, "wb") as f:
        torch.save(state_dicts(ctx.policy, ctx.optimizer), f)
        f.flush()
        os.fsync(f.fileno())


def _safetensors_save(ctx: Ctx) -> None:
    from safetensors.torch import save_file

    save_file(ctx.policy.state_dict(), ctx.out)


def _check_saved_zipsave(ctx: Ctx) -> None:
    check_params(ctx.n, _zipsave().load(ctx.out))


def _check_saved_torch(ctx: Ctx) -> None:
    check_params(ctx.n, torch.load(ctx.out, weights_only=True))


def _check_saved_sb3(ctx: Ctx) -> None:
    from stable_baselines3.common.save_util import load_from_zip_file

    check_params(ctx.n, load_from_zip_file(ctx.out)[1])


def _check_saved_safetensors(ctx: Ctx) -> None:
    from safetensors.torch import load_file

    check_params(ctx.n, {"policy": load_file(ctx.out)}, optimizer=False)


# loads ---------------------------------------------------------------------------------------
def read_whole(path: str, view: memoryview) -> None:
    """Fill ``view`` from the start of ``path`` (the raw-read floors)."""
    with open(path, "rb", buffering=0) as f:
        done = 0
        while done < view.nbytes:
            n = f.readinto(view[done:])
            if not n:
                raise EOFError("raw file is short")
            done += n


def _raw_readinto(ctx: Ctx) -> None:
    read_whole(ctx.path("raw"), memoryview(ctx.buffer))


def _zipsave_load(ctx: Ctx) -> None:
    ctx.result = _zipsave().load(ctx.path("zipsave"))


def _zipsave_load_noopt(ctx: Ctx) -> None:
    ctx.result = _zipsave().load(ctx.path("zipsave"), exclude=["*.optimizer"])


def _zipsave_load_mmap(ctx: Ctx) -> None:
    ctx.result = _zipsave().load(ctx.path("zipsave"), mmap=True)


def _zipsave_load_mmap_apply(ctx: Ctx) -> None:
    ctx.result = _zipsave().load(ctx.path("zipsave"), mmap=True)
    apply(ctx.policy, ctx.optimizer, ctx.result)


def _zipsave_restore(ctx: Ctx) -> None:
    _zipsave().restore(app_state(ctx.policy, ctx.optimizer), ctx.path("zipsave"))


def _zipsave_restore_noverify(ctx: Ctx) -> None:
    _zipsave().restore(app_state(ctx.policy, ctx.optimizer), ctx.path("zipsave"), verify=False)


class _BenchAlgo:
    """Built lazily so that importing this module does not import zipsave."""

    cls: Any = None

    @classmethod
    def make(cls, policy: nn.Module) -> Any:
        if cls.cls is None:
            zipsave = _zipsave()

            class BenchAlgo(zipsave.Saveable):
                def __init__(self, policy: nn.Module | None = None) -> None:
                    self.policy = policy

            cls.cls = BenchAlgo
        return cls.cls(policy)


def _zipsave_set_parameters_setup(ctx: Ctx) -> None:
    ctx.extra["algo"] = _BenchAlgo.make(ctx.policy)


def _zipsave_set_parameters(ctx: Ctx) -> None:
    ctx.extra["algo"].set_parameters(ctx.path("zipsave"))


def _zipsave_read_weight(ctx: Ctx) -> None:
    ctx.result = _zipsave().read(ctx.path("zipsave"), "policy/0.weight")


def _zipsave_read_bias(ctx: Ctx) -> None:
    ctx.result = _zipsave().read(ctx.path("zipsave"), "policy/0.bias")


def _sb3_load(ctx: Ctx) -> None:
    from stable_baselines3.common.save_util import load_from_zip_file

    ctx.result = load_from_zip_file(ctx.path("sb3"))[1]


def _sb3_load_apply(ctx: Ctx) -> None:
    _sb3_load(ctx)
    apply(ctx.policy, ctx.optimizer, ctx.result)


def _torch_load(ctx: Ctx) -> None:
    ctx.result = torch.load(ctx.path("torch"), weights_only=True)


def _torch_load_apply(ctx: Ctx) -> None:
    _torch_load(ctx)
    apply(ctx.policy, ctx.optimizer, ctx.result)


def _torch_load_mmap(ctx: Ctx) -> None:
    ctx.result = torch.load(ctx.path("torch"), weights_only=True, mmap=True)


def _torch_load_mmap_apply(ctx: Ctx) -> None:
    _torch_load_mmap(ctx)
    apply(ctx.policy, ctx.optimizer, ctx.result)


def _safetensors_load(ctx: Ctx) -> None:
    from safetensors.torch import load_file

    ctx.result = {"policy": load_file(ctx.path("safetensors"))}


def _safetensors_load_apply(ctx: Ctx) -> None:
    _safetensors_load(ctx)
    ctx.policy.load_state_dict(ctx.result["policy"])


def _check_result(ctx: Ctx) -> None:
    check_params(ctx.n, ctx.result)


def _check_result_policy(ctx: Ctx) -> None:
    check_params(ctx.n, ctx.result, optimizer=False)


def _check_live(ctx: Ctx) -> None:
    check_live(ctx.n, ctx.policy, ctx.optimizer)


def _check_live_policy(ctx: Ctx) -> None:
    check_params(ctx.n, {"policy": ctx.policy.state_dict()}, optimizer=False)


def _check_read_weight(ctx: Ctx) -> None:
    policy, _ = build_model(ctx.n, SEED_SAVED)
    _same(policy.state_dict()["0.weight"], ctx.result, "policy/0.weight")


def _check_read_bias(ctx: Ctx) -> None:
    policy, _ = build_model(ctx.n, SEED_SAVED)
    _same(policy.state_dict()["0.bias"], ctx.result, "policy/0.bias")


OPS: list[Op] = [
    # saves, compared with one raw write of the same bytes
    Op("raw_write", "save", "raw write, 1 call (floor)", lambda c: _raw_write(c)),
    Op("raw_write_fsync", "save", "raw write + fsync (durable floor)", lambda c: _raw_write(c, True)),
    Op("zipsave_save", "save", "zipsave.save (open file)", _zipsave_save, model=True, check=_check_saved_zipsave),
    Op(
        "zipsave_save_sha256",
        "save",
        "zipsave.save sha256=True (open file)",
        _zipsave_save_sha256,
        model=True,
        check=_check_saved_zipsave,
    ),
    Op(
        "zipsave_save_durable",
        "save",
        "zipsave.save (path: temp+fsync+rename)",
        _zipsave_save_durable,
        model=True,
        check=_check_saved_zipsave,
    ),
    Op(
        "zipsave_save_nondurable",
        "save",
        "zipsave.save durable=False (temp+rename)",
        _zipsave_save_nondurable,
        model=True,
        check=_check_saved_zipsave,
    ),
    Op("sb3_save", "save", "SB3 save_to_zip_file", _sb3_save, model=True, check=_check_saved_sb3),
    Op("torch_save", "save", "torch.save", _torch_save, model=True, check=_check_saved_torch),
    Op("torch_save_fsync", "save", "torch.save + fsync", _torch_save_fsync, model=True, check=_check_saved_torch),
    Op(
        "safetensors_save",
        "save",
        "safetensors save_file (policy)",
        _safetensors_save,
        moves="policy",
        model=True,
        check=_check_saved_safetensors,
    ),
    # loads, compared with one readinto of the same bytes into existing memory
    Op("raw_readinto", "load", "raw readinto, preallocated (floor)", _raw_readinto, reads="raw"),
    Op(
        "zipsave_restore",
        "load",
        "zipsave.restore in place",
        _zipsave_restore,
        model=True,
        reads="zipsave",
        check=_check_live,
    ),
    Op(
        "zipsave_restore_noverify",
        "load",
        "zipsave.restore in place, verify=False",
        _zipsave_restore_noverify,
        model=True,
        reads="zipsave",
        check=_check_live,
    ),
    Op(
        "zipsave_set_parameters",
        "load",
        "Saveable.set_parameters in place",
        _zipsave_set_parameters,
        model=True,
        reads="zipsave",
        check=_check_live,
    ),
    Op("zipsave_load", "load", "zipsave.load (fresh tensors)", _zipsave_load, reads="zipsave", check=_check_result),
    Op(
        "zipsave_load_noopt",
        "load",
        "zipsave.load exclude=['*.optimizer']",
        _zipsave_load_noopt,
        moves="policy",
        reads="zipsave",
        check=_check_result_policy,
    ),
    Op(
        "zipsave_load_mmap",
        "load",
        "zipsave.load mmap=True (checked once)",
        _zipsave_load_mmap,
        reads="zipsave",
        check=_check_result,
    ),
    Op(
        "zipsave_load_mmap_apply",
        "load",
        "zipsave.load mmap=True (checked) + apply",
        _zipsave_load_mmap_apply,
        model=True,
        reads="zipsave",
        check=_check_live,
    ),
    Op(
        "zipsave_read_weight",
        "load",
        "zipsave.read one weight (1/12 of bytes)",
        _zipsave_read_weight,
        moves="weight",
        reads="zipsave",
        check=_check_read_weight,
        needs="read",
    ),
    Op(
        "zipsave_read_bias",
        "load",
        "zipsave.read one bias",
        _zipsave_read_bias,
        moves="bias",
        reads="zipsave",
        check=_check_read_bias,
        needs="read",
    ),
    Op("sb3_load", "load", "SB3 load_from_zip_file", _sb3_load, reads="sb3", check=_check_result),
    Op(
        "sb3_load_apply",
        "load",
        "SB3 load_from_zip_file + apply",
        _sb3_load_apply,
        model=True,
        reads="sb3",
        check=_check_live,
    ),
    Op("torch_load", "load", "torch.load", _torch_load, reads="torch", check=_check_result),
    Op(
        "torch_load_apply",
        "load",
        "torch.load + apply",
        _torch_load_apply,
        model=True,
        reads="torch",
        check=_check_live,
    ),
    Op("torch_load_mmap", "load", "torch.load mmap=True (lazy)", _torch_load_mmap, reads="torch", check=_check_result),
    Op(
        "torch_load_mmap_apply",
        "load",
        "torch.load mmap=True + apply",
        _torch_load_mmap_apply,
        model=True,
        reads="torch",
        check=_check_live,
    ),
    Op(
        "safetensors_load",
        "load",
        "safetensors load_file (policy)",
        _safetensors_load,
        moves="policy",
        reads="safetensors",
        check=_check_result_policy,
    ),
    Op(
        "safetensors_load_apply",
        "load",
        "safetensors load_file + apply (policy)",
        _safetensors_load_apply,
        moves="policy",
        model=True,
        reads="safetensors",
        check=_check_live_policy,
    ),
]

SETUPS: dict[str, Callable[[Ctx], None]] = {"zipsave_set_parameters": _zipsave_set_parameters_setup}

#: These rows only; ``_catalog.py`` joins them with issue 18's (``_ops_floor.py``).
BY_NAME = {op.name: op for op in OPS}


def moved_bytes(op: Op, n_params: float) -> int:
    """How many tensor bytes ``op`` moves (its throughput and memory are per these bytes)."""
    policy, total = model_bytes(n_params)
    w = width_for(n_params)
    return {"all": total, "policy": policy, "weight": 4 * w * w, "bias": 4 * w}[op.moves]
