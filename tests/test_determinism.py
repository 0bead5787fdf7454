"""Same state in, same bytes out: one state saved by two fresh interpreters (different hash
seeds, different memory layouts) gives byte-identical archives, for every value kind the
format lists (docs/format.rst). A class or function defined in ``__main__`` is pickled by value,
with cloudpickle's random class-tracking id; format.rst says so, and such a value does not load
safely anyway. gymnasium < 1.0 orders the default character set of a ``Text`` space by string
hash, so two processes hold two different spaces there; the test names its characters."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

# Builds the state in a fresh interpreter; every value seeded, nothing random left over.
_WRITER = textwrap.dedent(
    """
    import collections, datetime, decimal, fractions, http, pathlib, sys
    import gymnasium as gym, numpy as np, torch, zipsave

    def kind(name):
        torch.manual_seed(0)
        if name == "json":
            return {"a": 1, "b": [1.5, "x", None, True]}
        if name == "numpy":
            return {"arr": np.arange(12, dtype=np.float32).reshape(3, 4), "big": np.arange(40000.0),
                    "scalar": np.float64(2.5), "int": np.int16(3), "dtype": np.dtype("<u2"),
                    "struct": np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")])}
        if name == "torch":
            base = torch.arange(12.0).reshape(3, 4)
            return {"tensor": torch.arange(6.0), "view": base[:, 1], "param": torch.nn.Parameter(torch.ones(2)),
                    "grad": torch.zeros(2, requires_grad=True), "half": torch.ones(3, dtype=torch.bfloat16),
                    "dtype": torch.float16, "device": torch.device("cpu"), "long": torch.arange(5)}
        if name == "python":
            return {"tuple": (1, "a"), "set": {"x", "y", "zz", "w"}, "frozenset": frozenset({"p", "q", "r"}),
                    "bytes": b"\\x00\\xff", "complex": 1 + 2j, "nan": float("nan"), "inf": float("-inf"),
                    "intkeys": {1: "a", (2, 3): "b"}, "deque": collections.deque([1, 2], maxlen=4),
                    "ordered": collections.OrderedDict(b=1, a=2), "enum": http.HTTPStatus.OK,
                    "path": pathlib.PurePosixPath("/a/b"), "when": datetime.datetime(2024, 1, 2, 3, 4, 5),
                    "date": datetime.date(2024, 1, 2), "bigint": 2**70, "fraction": fractions.Fraction(1, 3),
                    "decimal": decimal.Decimal("1.25"), "sets_in_list": [{"m", "n", "o"}]}
        if name == "spaces":
            spaces = {"box": gym.spaces.Box(-1, 1, (3,), seed=1), "discrete": gym.spaces.Discrete(4, seed=2),
                      "multidiscrete": gym.spaces.MultiDiscrete([2, 3], seed=3),
                      "multibinary": gym.spaces.MultiBinary(3, seed=4), "text": gym.spaces.Text(5, charset="abc123", seed=5),
                      "unseeded": gym.spaces.Box(0, 1, (2,)),
                      "dict": gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Box(0, 1, (1,))}, seed=6),
                      "tuple": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)), seed=7),
                      "sequence": gym.spaces.Sequence(gym.spaces.Discrete(2), seed=8),
                      "graph": gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(2), seed=9)}
            if hasattr(gym.spaces, "OneOf"):
                spaces["oneof"] = gym.spaces.OneOf((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (1,))), seed=10)
            spaces["used"] = gym.spaces.Box(-1, 1, (2,), seed=11)
            spaces["used"].sample()
            return spaces
        if name == "references":
            return {"cls": collections.OrderedDict, "func": np.linalg.norm, "builtin": len}
        if name == "modules":
            net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
            net(torch.ones(1, 3)).sum().backward()
            opt.step()
            return {"net": net, "opt": opt, "lr": 1e-3}
        raise SystemExit(f"unknown kind {name}")

    for name in sys.argv[2:]:
        zipsave.save(kind(name), f"{sys.argv[1]}/{name}.zip")
    """
)

KINDS = ["json", "numpy", "torch", "python", "spaces", "references", "modules"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every kind written by two fresh interpreters with different hash seeds."""
    root = tmp_path_factory.mktemp("determinism")
    script = root / "write.py"
    script.write_text(_WRITER)
    dirs = []
    for seed in ("1", "2"):
        out = root / f"seed{seed}"
        out.mkdir()
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, str(script), str(out), *KINDS], check=True, env=env, cwd=root)
        dirs.append(out)
    return dirs


@pytest.mark.parametrize("kind", KINDS)
def test_same_state_in_two_processes_gives_the_same_bytes(two_runs: list[Path], kind: str) -> None:
    outs = [(d / f"{kind}.zip").read_bytes() for d in two_runs]
    assert len(outs[0]) > 0
    if outs[0] != outs[1]:
        a, b = (zipfile.ZipFile(io.BytesIO(raw)) for raw in outs)
        differing = sorted(n for n in a.namelist() if n not in b.namelist() or a.read(n) != b.read(n))
        pytest.fail(f"{kind}: the two processes wrote different members: {differing}")


def test_a_tensor_pickle_is_keyed_canonically_and_loads_with_sb3s_reader(two_runs: list[Path]) -> None:
    """The ``":serialized:"`` of a tensor no longer carries the storage's address, and the
    plain cloudpickle SB3 uses still rebuilds the same tensors from it."""
    import base64
    import json

    import cloudpickle
    import torch

    data = json.loads(zipfile.ZipFile(two_runs[0] / "torch.zip").read("data"))
    view = cloudpickle.loads(base64.b64decode(data["view"][":serialized:"]))
    assert torch.equal(view, torch.arange(12.0).reshape(3, 4)[:, 1])
    assert torch.equal(cloudpickle.loads(base64.b64decode(data["tensor"][":serialized:"])), torch.arange(6.0))
