"""The replay-buffer benchmark's model and operations (``replay_buffer.py`` runs each in a fresh
interpreter): a DQN ``CnnPolicy`` on 4 x 84 x 84 uint8 frames with a full replay buffer of
``n`` transitions (``observations`` and ``next_observations``: 56 KB a transition).

Every op has an untimed setup (``Ctx``) and a timed body. The input files of one size are
written once by :func:`prepare`: zipsave's archive with its buffer, SB3's model zip and
``save_replay_buffer`` pickle, and ``raw.bin``, the buffer's array bytes one after the other
(the raw floor's file).
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

FRAME = (4, 84, 84)  # channel-first Atari frames: SB3 does not transpose them
FILES = {"zipsave": "model.zip", "sb3": "sb3.zip", "sb3_buffer": "sb3_buffer.pkl", "raw": "raw.bin"}
SAMPLES = 64  # batches of 32 drawn after a mapped load, to show resident memory follows use


class AtariLike(gym.Env):
    """An environment with Atari's observation and action spaces; the benchmark never steps it."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, FRAME, np.uint8)
        self.action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        return np.zeros(FRAME, np.uint8), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(FRAME, np.uint8), 0.0, False, False, {}


def build(n: int, **kwargs: Any) -> Any:
    """A DQN whose buffer holds ``n`` transitions (SB3's constructor allocates it with
    ``np.zeros``; nothing is touched)."""
    from stable_baselines3 import DQN

    return DQN("CnnPolicy", AtariLike(), buffer_size=n, learning_starts=0, device="cpu", seed=0, **kwargs)


def buffer_arrays(buffer: Any) -> list[np.ndarray]:
    """The buffer's arrays in a fixed order (what ``raw.bin`` holds)."""
    out = []
    for _name, value in sorted(vars(buffer).items()):
        if isinstance(value, np.ndarray):
            out.append(value)
        elif isinstance(value, dict) and value and all(isinstance(v, np.ndarray) for v in value.values()):
            out.extend(value[k] for k in sorted(value))
    return out


def buffer_bytes(n: int) -> int:
    """About the bytes of a buffer of ``n`` transitions (frames dominate)."""
    return n * (2 * int(np.prod(FRAME)) + 8 + 4 * 3)


def fill_from(buffer: Any, path: str) -> None:
    """Fill the buffer's arrays from ``raw.bin`` (faster than drawing random bytes again)."""
    with open(path, "rb", buffering=0) as f:
        for arr in buffer_arrays(buffer):
            view = memoryview(arr.reshape(-1).view(np.uint8))
            done = 0
            while done < view.nbytes:
                done += f.readinto(view[done:])
    buffer.pos, buffer.full = 0, True


def fill_random(buffer: Any, rng: Any, true_share: float) -> Any:
    """Fill ``buffer``'s arrays with random values, 64 MiB at a time; yields each filled piece
    (flat, in order), so a caller can write the raw bytes as they are made. Booleans are true
    with probability ``true_share``."""
    for arr in buffer_arrays(buffer):
        flat = arr.reshape(-1)
        step = max(1, (64 << 20) // arr.itemsize)
        for start in range(0, flat.size, step):
            piece = flat[start : start + step]
            if arr.dtype == np.uint8:
                piece[:] = np.frombuffer(rng.bytes(piece.size), np.uint8)
            elif arr.dtype == np.bool_:
                piece[:] = rng.random(piece.size) < true_share
            else:
                piece[:] = rng.random(piece.size)
            yield piece


def prepare(folder: str, n: int) -> dict[str, int]:
    """Write one size's input files (skipped when they exist); returns their sizes."""
    import zipsave

    os.makedirs(folder, exist_ok=True)
    paths = {k: os.path.join(folder, v) for k, v in FILES.items()}
    if not all(os.path.exists(p) for p in paths.values()):
        model = build(n)
        buffer = model.replay_buffer
        with open(paths["raw"], "wb") as f:
            for piece in fill_random(buffer, np.random.default_rng(0), true_share=0.01):
                f.write(memoryview(piece.view(np.uint8)))
        buffer.pos, buffer.full = 0, True
        zipsave.save(model, paths["zipsave"], include=["replay_buffer"])
        model.save(paths["sb3"])
        model.save_replay_buffer(paths["sb3_buffer"])
    return {k: os.path.getsize(p) for k, p in paths.items()}


@dataclasses.dataclass
class Ctx:
    """One op's inputs and untimed setup."""

    n: int
    folder: str
    out: str
    model: Any = None
    buffer: Any = None
    result: Any = None
    extra: dict = dataclasses.field(default_factory=dict)

    def path(self, kind: str) -> str:
        return os.path.join(self.folder, FILES[kind])


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    group: str  # "load" or "save"; each group's ratios are taken against its floor
    body: Callable[[Ctx], None]
    setup: Callable[[Ctx], None] | None = None
    reads: tuple[str, ...] = ()  # input files warmed into the page cache before the op
    check: Callable[[Ctx], None] | None = None


# -- load ops ----------------------------------------------------------------------------------
def _raw_readinto_fresh(ctx: Ctx) -> None:
    """The floor: fresh anonymous memory as ``malloc`` gives it (``np.empty`` would advise it
    for huge pages, whose faults compact memory on this VM: 9.6-12.6 s against 5.2-13 s for
    0.85 GB, see ``zipsave/_tensors/_npy.py``)."""
    size = os.path.getsize(ctx.path("raw"))
    buf = mmap.mmap(-1, size)
    view = memoryview(buf)
    with open(ctx.path("raw"), "rb", buffering=0) as f:
        done = 0
        while done < size:
            done += f.readinto(view[done : done + (64 << 20)])
    ctx.result = buf


def _sb3_load(ctx: Ctx) -> None:
    from stable_baselines3 import DQN

    model = DQN.load(ctx.path("sb3"), device="cpu")
    model.load_replay_buffer(ctx.path("sb3_buffer"))
    ctx.result = model


def _zipsave_load(ctx: Ctx, **kwargs: Any) -> None:
    from stable_baselines3 import DQN

    import zipsave

    ctx.result = zipsave.load(ctx.path("zipsave"), cls=DQN, device="cpu", **kwargs)


def _setup_live(ctx: Ctx) -> None:
    """A live model as a resumed run has it: its buffer filled by training (resident), with
    other transitions than the saved ones, so a restore that changed nothing fails the check."""
    ctx.model = build(ctx.n)
    for arr in buffer_arrays(ctx.model.replay_buffer):
        arr.fill(1)  # every page written: resident, as training leaves a full buffer
    ctx.model.replay_buffer.pos, ctx.model.replay_buffer.full = 5, False


def _sb3_restore(ctx: Ctx) -> None:
    ctx.model.set_parameters(ctx.path("sb3"), device="cpu")
    ctx.model.load_replay_buffer(ctx.path("sb3_buffer"))
    ctx.result = ctx.model


def _zipsave_restore(ctx: Ctx, **kwargs: Any) -> None:
    import zipsave

    zipsave.restore(ctx.model, ctx.path("zipsave"), device="cpu", **kwargs)
    ctx.result = ctx.model


def _sample(ctx: Ctx) -> None:
    """Resume and draw a few batches: the mapped buffer only pages in what is sampled."""
    _zipsave_load(ctx, mmap=True)
    for _ in range(SAMPLES):
        ctx.result.replay_buffer.sample(32)


def _check_loaded(ctx: Ctx) -> None:
    """The loaded buffer holds exactly ``raw.bin``'s bytes."""
    arrays = buffer_arrays(ctx.result.replay_buffer)
    with open(ctx.path("raw"), "rb") as f:
        for arr in arrays:
            want = f.read(arr.nbytes)
            if memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)) != want:
                raise AssertionError(f"an array of shape {arr.shape} differs from the saved one")
    if not ctx.result.replay_buffer.full:
        raise AssertionError("the loaded buffer is not full")


# -- save ops -----------------------------------------------------------------------------------
def _setup_full(ctx: Ctx) -> None:
    ctx.model = build(ctx.n)
    fill_from(ctx.model.replay_buffer, ctx.path("raw"))


def _raw_write_fsync(ctx: Ctx) -> None:
    with open(ctx.out, "wb", buffering=0) as f:
        for arr in buffer_arrays(ctx.model.replay_buffer):
            view = memoryview(arr.reshape(-1).view(np.uint8))
            done = 0
            while done < view.nbytes:
                done += f.write(view[done:])
        os.fsync(f.fileno())


def _sb3_save(ctx: Ctx) -> None:
    ctx.model.save(ctx.out)
    ctx.model.save_replay_buffer(ctx.out + ".pkl")


def _zipsave_save(ctx: Ctx) -> None:
    import zipsave

    zipsave.save(ctx.model, ctx.out, include=["replay_buffer"])


def _zipsave_save_background(ctx: Ctx) -> None:
    """Only the blocked part: until ``save(background=True)`` returns."""
    import zipsave

    ctx.extra["handle"] = zipsave.save(ctx.model, ctx.out, include=["replay_buffer"], background=True)


def _wait_background(ctx: Ctx) -> None:
    ctx.extra["handle"].wait()


def new_rows(n: int) -> int:
    """Transitions added between two incremental background saves: 2% of the buffer (a
    checkpoint every 20 000 steps of a 1 M buffer)."""
    return max(1, n // 50)


def _setup_incremental(ctx: Ctx) -> None:
    """A full buffer, one incremental background save (it fills the shadow: timed here as
    ``first_s``), then :func:`new_rows` transitions added as training adds them."""
    import zipsave

    _setup_full(ctx)
    model, buffer = ctx.model, ctx.model.replay_buffer
    model.num_timesteps = ctx.n
    t0 = time.perf_counter()
    handle = zipsave.save(model, ctx.out, include=["replay_buffer"], background=True, incremental=True)
    ctx.extra["record"] = {"first_s": time.perf_counter() - t0, "new_rows": new_rows(ctx.n)}
    handle.wait()
    rng = np.random.default_rng(1)
    for _ in range(new_rows(ctx.n)):
        frames = np.frombuffer(rng.bytes(2 * int(np.prod(FRAME))), np.uint8).reshape(2, 1, *FRAME)
        buffer.add(frames[0], frames[1], np.array([1]), np.array([0.5]), np.array([False]), [{}])
        model.num_timesteps += 1


def _zipsave_save_background_incremental(ctx: Ctx) -> None:
    """Only the blocked part of the second background save: the new rows copied."""
    import zipsave

    ctx.extra["handle"] = zipsave.save(ctx.model, ctx.out, include=["replay_buffer"], background=True, incremental=True)


def _check_incremental(ctx: Ctx) -> None:
    """The incremental save's archive is byte for byte a plain save's of the same state."""
    import zipsave

    plain = ctx.out + ".plain.zip"
    zipsave.save(ctx.model, plain, include=["replay_buffer"])
    try:
        with open(ctx.out, "rb") as a, open(plain, "rb") as b:
            while True:
                x, y = a.read(64 << 20), b.read(64 << 20)
                if x != y:
                    raise AssertionError("the incremental background save differs from a plain save")
                if not x:
                    break
    finally:
        os.unlink(plain)


def _cleanup_sb3(ctx: Ctx) -> None:
    for path in (ctx.out + ".pkl",):
        if os.path.exists(path):
            os.unlink(path)


OPS = [
    Op("raw_readinto_fresh", "load", _raw_readinto_fresh, reads=("raw",)),
    Op("sb3_load", "load", _sb3_load, reads=("sb3", "sb3_buffer"), check=_check_loaded),
    Op("zipsave_load", "load", _zipsave_load, reads=("zipsave",), check=_check_loaded),
    Op("zipsave_load_noverify", "load", lambda c: _zipsave_load(c, verify=False), reads=("zipsave",)),
    Op("sb3_restore", "load", _sb3_restore, setup=_setup_live, reads=("sb3", "sb3_buffer"), check=_check_loaded),
    Op("zipsave_restore", "load", _zipsave_restore, setup=_setup_live, reads=("zipsave",), check=_check_loaded),
    Op("zipsave_load_model_only", "load", lambda c: _zipsave_load(c, exclude=["replay_buffer"]), reads=("zipsave",)),
    Op("zipsave_load_mmap", "mmap", lambda c: _zipsave_load(c, mmap=True), reads=("zipsave",), check=_check_loaded),
    Op("zipsave_load_mmap_lazy", "mmap", lambda c: _zipsave_load(c, mmap=True, verify=False), reads=("zipsave",)),
    Op("zipsave_load_mmap_sample", "mmap", _sample, reads=("zipsave",)),
    Op(
        "zipsave_restore_mmap",
        "mmap",
        lambda c: _zipsave_restore(c, mmap=True),
        setup=_setup_live,
        reads=("zipsave",),
        check=_check_loaded,
    ),
    Op("raw_write_fsync", "save", _raw_write_fsync, setup=_setup_full),
    Op("sb3_save", "save", _sb3_save, setup=_setup_full),
    Op("zipsave_save", "save", _zipsave_save, setup=_setup_full),
    Op("zipsave_save_background", "save", _zipsave_save_background, setup=_setup_full),
    Op(
        "zipsave_save_background_incremental",
        "save",
        _zipsave_save_background_incremental,
        setup=_setup_incremental,
        check=_check_incremental,
    ),
]
BY_NAME = {op.name: op for op in OPS}
AFTER = {
    "zipsave_save_background": _wait_background,
    "zipsave_save_background_incremental": _wait_background,
    "sb3_save": _cleanup_sb3,
}
