"""More operations (issue 18): the floors of a fresh load (fresh pages, huge pages), checksum
speeds, zipsave's copying / mmap load_archive, loads that touch every tensor, and the CUDA
rows (selected with ``run.py --device cuda``; named ``cuda_*``)."""

from __future__ import annotations

import hashlib
import mmap
import zlib
from typing import Any

import torch
from _ops import Ctx, Op, _check_live, _check_result, _zipsave, app_state, apply, model_bytes, read_whole


def _raw_readinto_fresh(ctx: Ctx) -> None:
    buf = torch.empty(model_bytes(ctx.n)[1], dtype=torch.uint8)  # fresh 4 KiB pages, faulted by the read
    read_whole(ctx.path("raw"), memoryview(buf.numpy()))
    ctx.result = buf


def _raw_readinto_hugepage(ctx: Ctx) -> None:
    nbytes = model_bytes(ctx.n)[1]
    arena = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        arena.madvise(mmap.MADV_HUGEPAGE)
    read_whole(ctx.path("raw"), memoryview(arena))
    ctx.result = arena


def _crc_zlib(ctx: Ctx) -> None:
    ctx.result = zlib.crc32(memoryview(ctx.buffer))


def _crc_isal(ctx: Ctx) -> None:
    from isal.isal_zlib import crc32

    ctx.result = crc32(memoryview(ctx.buffer))


def _crc_zipsave(ctx: Ctx) -> None:
    from zipsave._archive import crc32_many  # 2 threads over bytes in memory

    ctx.result = crc32_many([memoryview(ctx.buffer)])[0]


def _sha256(ctx: Ctx) -> None:
    ctx.result = hashlib.sha256(memoryview(ctx.buffer)).digest()


def _check_crc(ctx: Ctx) -> None:
    if ctx.result != zlib.crc32(memoryview(ctx.buffer)):
        raise AssertionError("crc32 differs from zlib's")


def _load_archive(ctx: Ctx, **kw: Any) -> None:
    ctx.result = _zipsave().load_archive(ctx.path("zipsave"), **kw)[1]


def _touch(tree: Any) -> float:
    total = 0.0
    for value in tree.values() if isinstance(tree, dict) else tree:
        if isinstance(value, torch.Tensor):
            total += float(value.sum())
        elif isinstance(value, (dict, list, tuple)):
            total += _touch(value)
    return total


def _zipsave_load_mmap_touch(ctx: Ctx) -> None:
    ctx.result = _zipsave().load(ctx.path("zipsave"), mmap=True)
    _touch(ctx.result)


def _zipsave_load_mmap_apply_noverify(ctx: Ctx) -> None:
    ctx.result = _zipsave().load(ctx.path("zipsave"), mmap=True, verify=False)
    apply(ctx.policy, ctx.optimizer, ctx.result)


def _torch_load_mmap_touch(ctx: Ctx) -> None:
    ctx.result = torch.load(ctx.path("torch"), weights_only=True, mmap=True)
    _touch(ctx.result)


# -- CUDA (run.py --device cuda) ------------------------------------------------------------
def _cuda_h2d_floor(ctx: Ctx) -> None:
    pinned = ctx.extra["pinned"]
    ctx.result = pinned.to("cuda", non_blocking=True)
    torch.cuda.synchronize()


def _cuda_h2d_setup(ctx: Ctx) -> None:
    ctx.extra["pinned"] = torch.from_numpy(ctx.buffer).pin_memory()


def _cuda_sync(value: Any) -> Any:
    torch.cuda.synchronize()
    return value


def _cuda_zipsave_load(ctx: Ctx) -> None:
    ctx.result = _cuda_sync(_zipsave().load(ctx.path("zipsave"), device="cuda"))


def _cuda_zipsave_restore(ctx: Ctx) -> None:
    ctx.policy.to("cuda")  # the optimizer's state follows its parameters on load_state_dict
    _zipsave().restore(app_state(ctx.policy, ctx.optimizer), ctx.path("zipsave"))
    _cuda_sync(None)


def _cuda_torch_load(ctx: Ctx) -> None:
    ctx.result = _cuda_sync(torch.load(ctx.path("torch"), weights_only=True, map_location="cuda"))


def _cuda_torch_load_mmap(ctx: Ctx) -> None:
    loaded = torch.load(ctx.path("torch"), weights_only=True, mmap=True)
    ctx.result = _cuda_sync(_to(loaded, "cuda"))


def _cuda_safetensors_load(ctx: Ctx) -> None:
    from safetensors.torch import load_file

    ctx.result = _cuda_sync({"policy": load_file(ctx.path("safetensors"), device="cuda")})


def _cuda_sb3_load(ctx: Ctx) -> None:
    from stable_baselines3.common.save_util import load_from_zip_file

    ctx.result = _cuda_sync(load_from_zip_file(ctx.path("sb3"), device="cuda")[1])


def _to(tree: Any, device: str) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.to(device)
    if isinstance(tree, dict):
        return {k: _to(v, device) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to(v, device) for v in tree)
    return tree


def _check_cpu_copy(ctx: Ctx) -> None:
    _check_result(Ctx(n=ctx.n, folder=ctx.folder, out=ctx.out, result=_to(ctx.result, "cpu")))


MORE_OPS: list[Op] = [
    Op(
        "raw_readinto_fresh", "load", "raw readinto, fresh torch.empty (4 KiB faults)", _raw_readinto_fresh, reads="raw"
    ),
    Op("raw_readinto_hugepage", "load", "raw readinto, one MADV_HUGEPAGE arena", _raw_readinto_hugepage, reads="raw"),
    Op("raw_crc32_zlib", "load", "CRC-32 of the bytes, zlib (1 thread)", _crc_zlib, check=_check_crc),
    Op("raw_crc32_isal", "load", "CRC-32 of the bytes, ISA-L (1 thread)", _crc_isal, check=_check_crc),
    Op(
        "raw_crc32_zipsave",
        "load",
        "CRC-32 of the bytes as zipsave checks (ISA-L, 2 threads)",
        _crc_zipsave,
        check=_check_crc,
    ),
    Op("raw_sha256", "load", "SHA-256 of the bytes (1 thread)", _sha256),
    Op(
        "zipsave_load_archive",
        "load",
        "zipsave.load_archive (copying)",
        lambda c: _load_archive(c),
        reads="zipsave",
        check=_check_result,
    ),
    Op(
        "zipsave_load_archive_noverify",
        "load",
        "zipsave.load_archive verify=False (copying)",
        lambda c: _load_archive(c, verify=False),
        reads="zipsave",
        check=_check_result,
    ),
    Op(
        "zipsave_load_archive_mmap",
        "load",
        "zipsave.load_archive mmap=True (checked)",
        lambda c: _load_archive(c, mmap=True),
        reads="zipsave",
        check=_check_result,
    ),
    Op(
        "zipsave_load_archive_mmap_lazy",
        "load",
        "zipsave.load_archive mmap=True verify=False (lazy)",
        lambda c: _load_archive(c, mmap=True, verify=False),
        reads="zipsave",
        check=_check_result,
    ),
    Op(
        "zipsave_load_mmap_touch",
        "load",
        "zipsave.load mmap=True, every tensor summed",
        _zipsave_load_mmap_touch,
        reads="zipsave",
        check=_check_result,
    ),
    Op(
        "zipsave_load_mmap_apply_noverify",
        "load",
        "zipsave.load mmap=True verify=False + apply",
        _zipsave_load_mmap_apply_noverify,
        model=True,
        reads="zipsave",
        check=_check_live,
    ),
    Op(
        "torch_load_mmap_touch",
        "load",
        "torch.load mmap=True, every tensor summed",
        _torch_load_mmap_touch,
        reads="torch",
        check=_check_result,
    ),
    Op("cuda_raw_h2d", "load", "CUDA: pinned host -> device copy (bus floor)", _cuda_h2d_floor),
    Op(
        "cuda_zipsave_load",
        "load",
        "CUDA: zipsave.load device=cuda",
        _cuda_zipsave_load,
        reads="zipsave",
        check=_check_cpu_copy,
    ),
    Op(
        "cuda_zipsave_restore",
        "load",
        "CUDA: zipsave.restore into CUDA tensors",
        _cuda_zipsave_restore,
        model=True,
        reads="zipsave",
    ),
    Op(
        "cuda_torch_load",
        "load",
        "CUDA: torch.load map_location=cuda",
        _cuda_torch_load,
        reads="torch",
        check=_check_cpu_copy,
    ),
    Op(
        "cuda_torch_load_mmap",
        "load",
        "CUDA: torch.load mmap=True + .to(cuda)",
        _cuda_torch_load_mmap,
        reads="torch",
        check=_check_cpu_copy,
    ),
    Op(
        "cuda_safetensors_load",
        "load",
        "CUDA: safetensors load_file device=cuda (policy)",
        _cuda_safetensors_load,
        moves="policy",
        reads="safetensors",
    ),
    Op(
        "cuda_sb3_load",
        "load",
        "CUDA: SB3 load_from_zip_file device=cuda",
        _cuda_sb3_load,
        reads="sb3",
        check=_check_cpu_copy,
    ),
]

MORE_SETUPS = {"cuda_raw_h2d": _cuda_h2d_setup}
