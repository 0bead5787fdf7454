"""The commands that only describe an archive, in a fresh interpreter that has not imported
torch, import none (issue 37: ``import torch`` was 1.5 s of a 2.1 s first ``zipsave inspect``):
``zipsave inspect`` (``--json``, ``--verify``), ``zipsave verify``, ``zipsave list`` and
``zipsave.inspect``, on a torch app-state archive and an SB3 archive. What they print is what
the same commands print in a process with torch, and the tensors they list carry the dtypes,
shapes and sizes torch gives them."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import zipsave
import zipsave.cli

SB3_ARCHIVE = Path(__file__).parent / "data" / "sb3" / "ppo_cartpole.zip"

_SCRIPT = r"""
import contextlib, io, json, sys
runs = json.loads(sys.argv[1])
import zipsave, zipsave.cli
done = []
for args in runs:
    if args[0] == "python":
        info = zipsave.inspect(args[1])
        done.append({"code": 0, "out": str(info), "err": json.dumps(info.to_dict())})
        continue
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = zipsave.cli.main(args)
    done.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps({"done": done, "torch": sorted(m for m in sys.modules if m.split(".")[0] == "torch")}))
"""


def _fresh(runs: list[list[str]]) -> dict:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(runs)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def _here(args: list[str]) -> dict:
    """The same run in this process, which imported torch."""
    if args[0] == "python":
        info = zipsave.inspect(args[1])
        return {"code": 0, "out": str(info), "err": json.dumps(info.to_dict())}
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = zipsave.cli.main(args)
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def _torch_tensors(path: Path) -> list[tuple]:
    """(member, key, dtype, shape, bytes) of every tensor, as torch.load reads the members."""
    found = []

    def walk(member: str, value: object, key: str) -> None:
        if isinstance(value, torch.Tensor):
            spec = (str(value.dtype).removeprefix("torch."), list(value.shape), value.numel() * value.element_size())
            found.append((member, key, *spec))
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(member, v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(member, v, f"{key}.{i}" if key else str(i))

    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if name.endswith(".pth"):
                walk(name, torch.load(io.BytesIO(zf.read(name)), weights_only=True), "")
    return sorted(found)


@pytest.fixture(scope="module")
def app_state(tmp_path_factory) -> Path:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2).double())
    for name, dtype in [("f16", torch.float16), ("bf16", torch.bfloat16), ("flags", torch.bool)]:
        model.register_buffer(name, torch.zeros(2, 3, dtype=dtype))
    model.register_buffer("counts", torch.zeros(5, dtype=torch.uint16))
    model.register_buffer("phase", torch.ones(2, dtype=torch.complex64))
    optimizer = torch.optim.Adam(model.parameters())
    model[0](torch.ones(1, 3)).sum().backward()  # Adam keeps state (step, moments) for these
    optimizer.step()
    path = tmp_path_factory.mktemp("notorch") / "app.zip"
    zipsave.save({"model": model, "optimizer": optimizer, "step": 7}, path)
    zipsave.CheckpointManager(path.parent / "run").save(1, {"model": model})  # for `zipsave list`
    return path


@pytest.mark.parametrize("which", ["app_state", "sb3"])
def test_describing_an_archive_imports_no_torch_and_says_what_torch_says(which, app_state, tmp_path):
    path = app_state if which == "app_state" else shutil.copy(SB3_ARCHIVE, tmp_path / "ppo.zip")
    runs = [
        ["inspect", str(path)],
        ["inspect", "--json", str(path)],
        ["inspect", "--verify", str(path)],
        ["verify", str(path)],
        ["python", str(path)],
    ]
    if which == "app_state":  # a CheckpointManager's directory: its checkpoints listed, then checked
        runs += [["list", str(path.parent / "run")], ["verify", str(path.parent / "run")]]
    fresh = _fresh(runs)
    assert fresh["torch"] == []
    for args, done in zip(runs, fresh["done"]):
        assert done == _here(args), args
    assert {d["code"] for d in fresh["done"]} == {0}
    assert "1 checkpoint" in fresh["done"][-2]["out"] or which == "sb3"
    listed = json.loads(fresh["done"][1]["out"])["tensors"]
    ours = sorted((t["member"], t["key"], t["dtype"], t["shape"], t["nbytes"]) for t in listed)
    assert ours == _torch_tensors(Path(path))
    assert {t[2] for t in ours} >= ({"float32"} if which == "sb3" else {"float16", "bfloat16", "bool", "uint16"})
