"""One memory budget at every door (issue 35): a pickle or ``.pth`` that asks for gigabytes is
refused with a ``ZipsaveError`` *before* the allocation is tried, through ``zipsave.load``,
an archive without a manifest, SB3's doors under ``install()`` (``load_replay_buffer``,
``VecNormalize.load``, ``Policy.load``, ``Algo.load``) and torch's fallback loader; and an SB3
model rebuilt from hyper-parameters is estimated before SB3 builds it.

The hostile loads run in one worker process whose address space is capped a little above
what it uses (``RLIMIT_AS``), so a regression is a ``MemoryError`` there, never gigabytes
taken from the machine.
"""

from __future__ import annotations

import base64
import collections
import io
import json
import os
import pickle
import re
import subprocess
import sys
import textwrap
import tracemalloc
import zipfile
from typing import Any

import numpy as np
import pytest
import torch

import zipsave
from zipsave._trust import TrustPolicy, restricted_loads
from zipsave._trust._prescan import check_torch_zip
from zipsave.exceptions import ArchiveLimitError, DecodeError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adversarial.asm import Emit, G, body, build, call, program  # noqa: E402
from adversarial.corpus import pth_with_pickle  # noqa: E402

sb3 = pytest.importorskip("stable_baselines3")
import zipsave.sb3  # noqa: E402

HUGE = 8 << 30


def _dtype(text: str) -> Emit:
    return Emit(G("numpy", "dtype").data + body((text, False, True)) + pickle.REDUCE)


def array_state_pickle(shape: tuple, dtype: str, data: object) -> bytes:
    """numpy's own pickle shape (``_reconstruct`` then BUILD) with any state."""
    empty = call(G("numpy.core.multiarray", "_reconstruct"), G("numpy", "ndarray"), (0,), b"b")
    return program(build(empty, (1, shape, _dtype(dtype), False, data)), 2)


class _Storage:
    def __reduce__(self) -> tuple:
        raise pickle.PicklingError("a persistent id only")


class _Tensor:
    """Pickles as torch's rebuild of ``size`` float32 elements over storage ``0`` (16 of them)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __reduce__(self) -> tuple:
        return torch._utils._rebuild_tensor_v2, (_Storage(), 0, (self.size,), (1,), False, collections.OrderedDict())


def tensor_pickle(obj: object) -> bytes:
    class Pickler(pickle.Pickler):
        def persistent_id(self, o: object) -> object:
            return ("storage", torch.FloatStorage, "0", "cpu", 16) if isinstance(o, _Storage) else None

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def plain_archive(path, data: dict, members: dict | None = None) -> str:
    """An archive without a manifest (what SB3 writes), holding ``data`` and ``members``."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", json.dumps(data))
        for name, raw in (members or {}).items():
            zf.writestr(name, raw)
    return str(path)


def serialized(raw: bytes) -> dict:
    return {":type:": "<class 'numpy.ndarray'>", ":serialized:": base64.b64encode(raw).decode()}


# -- the capped worker -------------------------------------------------------------------------
WORKER = textwrap.dedent("""
    import json, resource, sys, warnings
    import torch, zipsave, zipsave.sb3, stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.common.vec_env import VecNormalize
    files = json.loads(sys.argv[1])
    dqn = sb3.DQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu")
    venv = make_vec_env("CartPole-v1", n_envs=1)
    places = {
        "load": lambda p: zipsave.load(p, strict=True),
        "load_archive": lambda p: zipsave.load_archive(p, strict=True),
        "load_cls": lambda p: zipsave.load(p, cls=sb3.PPO, device="cpu"),
        "ppo_load": lambda p: sb3.PPO.load(p, device="cpu"),
        "replay_buffer": lambda p: dqn.load_replay_buffer(p),
        "vecnormalize": lambda p: VecNormalize.load(p, venv),
        "policy_load": lambda p: ActorCriticPolicy.load(p, device="cpu"),
    }
    zipsave.sb3.install()
    with open("/proc/self/status") as fp:
        used = next(int(line.split()[1]) * 1024 for line in fp if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), resource.RLIM_INFINITY))
    warnings.simplefilter("ignore")
    out = {}
    for name, (place, path) in files.items():
        try:
            places[place](path)
            out[name] = ["loaded", ""]
        except zipsave.ZipsaveError as err:
            out[name] = [type(err).__name__, str(err)]
        except BaseException as err:
            out[name] = ["foreign " + type(err).__name__, str(err)[:500]]
    print(json.dumps(out))
""")

#: case -> (place, the error class, words of its message)
EXPECTED = {
    "object_array_no_manifest": (
        "load",
        "ArchiveLimitError",
        "an ndarray state of shape (1073741824,) and dtype object asks for 8589934592 bytes",
    ),
    "numeric_array_no_manifest": ("load_archive", "ArchiveLimitError", "dtype float64 asks for 8589934592 bytes"),
    "many_small_arrays": ("load", "ArchiveLimitError", "(67108864 already)"),
    "replay_buffer_pickle": ("replay_buffer", "ArchiveLimitError", "dtype object asks for 8589934592 bytes"),
    "vecnormalize_pickle": ("vecnormalize", "ArchiveLimitError", "dtype object asks for 8589934592 bytes"),
    "policy_file_resize": (
        "policy_load",
        "DecodeError",
        "(size (2147483648,), stride (1,), offset 0) reaches past its 64-byte storage",
    ),
    "pth_fallback_resize": (
        "load_archive",
        "IntegrityError",
        "(size (2147483648,), stride (1,), offset 0) that reaches past its 64-byte storage",
    ),
    "n_steps_1e9": (
        "load_cls",
        "ArchiveLimitError",
        "`n_steps` asks for a rollout buffer of 1000000000 steps x 1 envs",
    ),
    "n_steps_1e9_installed": (
        "ppo_load",
        "ArchiveLimitError",
        "`n_steps` asks for a rollout buffer of 1000000000 steps",
    ),
    "net_arch_1e5": ("load_cls", "ArchiveLimitError", "`policy_kwargs` asks for a policy of about 10000"),
    "net_arch_1e5_installed": ("ppo_load", "ArchiveLimitError", "more than the 6"),
    "valid_ppo": ("load_cls", "loaded", ""),
    "valid_ppo_installed": ("ppo_load", "loaded", ""),
}


def _edited(src: str, dst, **changes: object) -> str:
    """``src`` with ``data`` keys changed, written without its manifest."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if info.filename == "manifest.json":
                continue
            raw = zin.read(info.filename)
            if info.filename == "data":
                raw = json.dumps({**json.loads(raw), **changes}).encode()
            zout.writestr(info.filename, raw)
    return str(dst)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory_doors")
    ppo = root / "ppo.zip"
    zipsave.save(
        sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu", policy_kwargs={"net_arch": [8]}),
        ppo,
    )
    object_array = array_state_pickle((HUGE // 8,), "O8", [])
    side = root / "side.pkl"
    side.write_bytes(object_array)
    many = program([call(G("builtins", "bytes"), 32 << 20) for _ in range(3)], 2)  # 32 MiB each, 96 in all
    fallback = pth_with_pickle(tensor_pickle({"w": _Tensor(2 << 30), "s": {1, 2}}))  # a set: torch.load reads it
    policy_file = root / "policy.pth"
    policy_file.write_bytes(
        pth_with_pickle(tensor_pickle({"state_dict": collections.OrderedDict(w=_Tensor(2 << 30)), "data": {}}))
    )
    files = {
        "object_array_no_manifest": plain_archive(root / "a.zip", {"evil": serialized(object_array)}),
        "numeric_array_no_manifest": plain_archive(
            root / "b.zip", {"evil": serialized(array_state_pickle((HUGE // 8,), "f8", b""))}
        ),
        "many_small_arrays": plain_archive(root / "c.zip", {"evil": serialized(many)}),
        "replay_buffer_pickle": str(side),
        "vecnormalize_pickle": str(side),
        "policy_file_resize": str(policy_file),
        "pth_fallback_resize": plain_archive(root / "d.zip", {}, {"policy.pth": fallback}),
        "n_steps_1e9": _edited(str(ppo), root / "e.zip", n_steps=10**9),
        "n_steps_1e9_installed": str(root / "e.zip"),
        "net_arch_1e5": _edited(str(ppo), root / "f.zip", policy_kwargs={"net_arch": [10**5, 10**5]}),
        "net_arch_1e5_installed": str(root / "f.zip"),
        "valid_ppo": str(ppo),
        "valid_ppo_installed": str(ppo),
    }
    spec = {name: (EXPECTED[name][0], path) for name, path in files.items()}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [os.path.dirname(os.path.dirname(zipsave.__file__)), os.environ.get("PYTHONPATH", "")]
        ),
    }
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(spec)], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_every_door_refuses_before_allocating(outcomes, case):
    _, kind, words = EXPECTED[case]
    found, message = outcomes[case]
    assert found == kind, f"{case}: {found}: {message}"
    assert words in message, message


# -- the budget, in process (small sizes) -------------------------------------------------------
def test_the_budget_follows_the_callers_limits():
    raw = pickle.dumps(np.arange(1000, dtype=np.float64), protocol=4)
    assert restricted_loads(raw, TrustPolicy()).sum() == 499500.0  # the default budget admits it
    tight = zipsave.Limits(alloc_floor=0, alloc_ratio=0.5)
    with pytest.raises(
        ArchiveLimitError,
        match=re.escape(
            f"asks for 8000 bytes, and this value may allocate {len(raw) // 2} in all (11 already): `Limits.alloc_floor` "
            f"(0) plus `Limits.alloc_ratio` (0.5) times the {len(raw)} bytes it is decoded from."
        ),
    ):
        restricted_loads(raw, TrustPolicy(), limits=tight)


def test_an_object_array_state_holds_one_item_per_element():
    with pytest.raises(
        DecodeError,
        match=re.escape("an object array's state of 10 elements holds 2 items; numpy's pickles hold one per element."),
    ):
        restricted_loads(array_state_pickle((10,), "O8", [1, 2]), TrustPolicy())
    with pytest.raises(
        DecodeError, match=re.escape("an array's state of 80 bytes holds 3; numpy's pickles hold its bytes.")
    ):
        restricted_loads(array_state_pickle((10,), "f8", b"abc"), TrustPolicy())


@pytest.mark.parametrize(
    "value",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([{"a": 1}, None, "x"], dtype=object),
        np.zeros((0, 5)),
        np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]),
        np.arange(6).reshape(2, 3).T,
        np.array(["ab", "c"]),
    ],
)
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_real_numpy_pickles_still_load(value, protocol):
    out = restricted_loads(pickle.dumps(value, protocol=protocol), TrustPolicy())
    assert out.dtype == value.dtype and out.shape == value.shape
    assert out.tolist() == value.tolist()


def test_a_side_pickle_streams_each_array_into_its_own_bytearray(tmp_path):
    # protocol 5 writes a writable array as BYTEARRAY8 outside the frames: read straight into the
    # bytearray numpy then views, with no whole-file copy and no temporary bytes of its size
    value = {"observations": np.random.default_rng(0).integers(0, 255, 32 << 20, dtype=np.uint8)}
    path = tmp_path / "buffer.pkl"
    path.write_bytes(pickle.dumps(value, protocol=5))
    tracemalloc.start()
    try:
        with open(path, "rb") as fp:
            out = restricted_loads(fp, TrustPolicy())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(out["observations"], value["observations"]) and out["observations"].flags.writeable
    assert peak < 1.1 * (32 << 20), peak


def test_a_truncated_stream_is_refused_not_padded(tmp_path):
    raw = pickle.dumps(np.zeros(1 << 16, np.uint8), protocol=5)
    path = tmp_path / "short.pkl"
    path.write_bytes(raw[: len(raw) // 2])
    with open(path, "rb") as fp, pytest.raises(DecodeError, match="BYTEARRAY8 claims 65536 bytes in a pickle of"):
        restricted_loads(fp, TrustPolicy())


def test_torchs_fallback_loader_is_checked_against_the_records():
    raw = pth_with_pickle(tensor_pickle({"w": _Tensor(17)}))  # one element past its 16
    with pytest.raises(
        ArchiveLimitError,
        match=re.escape(
            "a tensor of size (17,) reaches 68 bytes into storage `0` of 64 bytes (torch would grow the storage)"
        ),
    ):
        check_torch_zip(io.BytesIO(raw), size=len(raw), max_bytes=1 << 30, max_ratio=200.0)
    check_torch_zip(
        io.BytesIO(pth_with_pickle(tensor_pickle({"w": _Tensor(16)}))),
        size=len(raw),
        max_bytes=1 << 30,
        max_ratio=200.0,
    )


def test_real_torch_files_pass_the_fallback_check():
    base = torch.arange(100, dtype=torch.float32)
    obj = {
        "a": base,
        "view": base[10:20],
        "t": torch.ones(3, 4).t(),
        "bf": torch.ones(5, dtype=torch.bfloat16),
        "b": torch.zeros(7, dtype=torch.bool),
        "e": torch.empty(0, 5),
        "p": torch.nn.Parameter(torch.ones(2)),
        "opt": torch.optim.Adam(torch.nn.Linear(3, 2).parameters()).state_dict(),
    }
    buf = io.BytesIO()
    torch.save(obj, buf)
    check_torch_zip(io.BytesIO(buf.getvalue()), size=len(buf.getvalue()), max_bytes=1 << 30, max_ratio=200.0)


@pytest.mark.parametrize("func", [("builtins", "bytearray"), ("_codecs", "encode")])
def test_one_memoized_value_copied_by_many_calls_is_charged_each_time(func):
    # 1 MB once in the pickle, handed to 200 calls by memo references: 200 MB of copies
    big: object = {"bytearray": b"x" * (1 << 20), "encode": "x" * (1 << 20)}[func[1]]
    extra = body("latin1") if func[0] == "_codecs" else b""
    one = G(*func).data + pickle.MARK + pickle.BINGET + b"\x00" + extra + pickle.TUPLE + pickle.REDUCE + pickle.POP
    raw = b"\x80\x04" + body(big) + pickle.MEMOIZE + pickle.POP + one * 200 + pickle.NONE + pickle.STOP
    with pytest.raises(ArchiveLimitError, match="this value may allocate"):
        restricted_loads(raw, TrustPolicy())


def test_install_limits_reach_sb3s_side_pickles(tmp_path):
    model = sb3.DQN("MlpPolicy", "CartPole-v1", buffer_size=2000, learning_starts=0, device="cpu")
    model.replay_buffer.observations[:] = 1.5
    model.replay_buffer.full = True
    path = tmp_path / "buffer.pkl"
    model.save_replay_buffer(path)  # SB3's own pickle
    tight = zipsave.Limits(alloc_floor=0, alloc_ratio=0.5)
    with (
        zipsave.sb3.installed(limits=tight),
        pytest.raises(
            ArchiveLimitError, match=re.escape("`Limits.alloc_floor` (0) plus `Limits.alloc_ratio` (0.5) times the")
        ),
    ):
        model.load_replay_buffer(path)
    with zipsave.sb3.installed():
        model.load_replay_buffer(path)
    assert model.replay_buffer.observations.sum() == 1.5 * model.replay_buffer.observations.size


def test_dcp_reads_under_the_callers_limits(tmp_path):
    import zipsave.dcp

    path = tmp_path / "state.zip"
    zipsave.save({"x": torch.arange(4.0)}, path)
    with pytest.raises(ArchiveLimitError, match=re.escape("holds 5 members; the limit is 1.")):
        zipsave.dcp.ZipReader(path, limits=zipsave.Limits(max_members=1)).read_metadata()
    metadata = zipsave.dcp.ZipReader(path, limits=zipsave.Limits(max_members=10)).read_metadata()
    assert metadata.storage_data.limits.max_members == 10  # the reads that follow use them too


def test_an_unseekable_stream_is_read_whole_first():
    class Pipe(io.RawIOBase):
        def __init__(self, raw: bytes) -> None:
            self._inner = io.BytesIO(raw)

        def readable(self) -> bool:
            return True

        def readinto(self, buf: Any) -> int:
            return self._inner.readinto(buf)

    out = restricted_loads(io.BufferedReader(Pipe(pickle.dumps({"a": np.arange(3)}, protocol=5))), TrustPolicy())
    assert out["a"].tolist() == [0, 1, 2]


def _one_array_under_many_keys(tmp_path, keys: int = 200, name: str = "shared.zip", flip: bool = False) -> str:
    path = tmp_path / name
    zipsave.save({"a": np.arange(1 << 17, dtype=np.float64)}, path)  # 1 MiB: an arrays/0.npy member
    with zipfile.ZipFile(path) as z:
        items = {n: z.read(n) for n in z.namelist() if n != "manifest.json"}
    data = json.loads(items["data"])
    assert data["a"][":zipsave:"]["member"] == "arrays/0.npy"
    named = data["a"]
    if flip:  # stored differently, the same value: `diff` decodes each key on both sides
        named = {**named, ":zipsave:": {**named[":zipsave:"], "dtype": "float64"}}
    data.update({f"k{i}": named for i in range(keys)})  # JSON only: 200 keys naming the member
    data["many"] = {":type:": "<class 'list'>", ":zipsave:": {"kind": "list", "items": [named] * keys}}
    items["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, raw in items.items():
            z.writestr(name, raw)
    return str(path)


@pytest.mark.parametrize("door", ["load", "load_archive", "read", "diff"])
def test_an_array_member_named_by_many_keys_is_read_once(tmp_path, monkeypatch, door):
    """zipsave writes a member for each array; a hostile ``data`` naming one 8 MB member under
    200 keys made a load read it 200 times (1.8 GB from an 8 MB archive)."""
    import zipsave._tensors._npy as npy
    from zipsave._tools._diff import diff

    path = _one_array_under_many_keys(tmp_path)
    reads: list[str] = []
    real = npy.read_array_member
    monkeypatch.setattr(
        npy, "read_array_member", lambda reader, member, **kw: reads.append(member) or real(reader, member, **kw)
    )
    tracemalloc.start()
    try:
        if door == "load":
            out = zipsave.load(path)
        elif door == "load_archive":
            out = zipsave.load_archive(path)[0]
        elif door == "read":
            out = {"many": zipsave.read(path, "many")}
        else:
            other = _one_array_under_many_keys(tmp_path, name="other.zip", flip=True)
            result = diff(path, other)  # each key decoded on both sides: stored differently
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reads == (["arrays/0.npy"] * (2 if door == "diff" else 1))  # once for each archive
    if door == "diff":
        assert not result.data_changed and len(result.data_stored_differently) == 201
    else:
        assert peak < 40 << 20, f"{peak >> 20} MiB traced at the peak"  # 200 copies: 200 MiB
        named = out["many"] if door == "read" else [out[f"k{i}"] for i in range(200)]
        assert all(arr is named[0] for arr in named) and np.array_equal(named[0], np.arange(1 << 17, dtype=np.float64))
