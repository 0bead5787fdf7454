"""Load archives through zipsave's doors and *use* every value returned, in a process of its own.

``python values_worker.py``: reads one job per line on stdin (JSON: ``door``, ``files``,
``key``), answers one line per job on stdout: the outcome (``loaded``, ``refused`` with a
``ZipsaveError``, ``foreign`` with any other exception), the CLI's output where a door is the
CLI, and for a loaded value the bytes of every tensor and array it returned, each summed,
densified (``.coalesce().to_dense()`` for sparse) and copied first. A value that breaks its
invariants crashes this process there, and the parent sees the crash instead of a result.
The address space is capped, so an allocation past ``Limits`` is a ``MemoryError`` here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import traceback
import warnings


def _dense_bytes(t: object) -> bytes:
    import torch

    assert isinstance(t, torch.Tensor)
    if t.layout == torch.sparse_coo:
        d = t.detach().coalesce().to_dense()
    elif t.layout != torch.strided:
        d = t.detach().to_dense()
    else:
        d = t.detach()
    d.clone()
    if not d.is_complex():
        d.to(torch.float64).sum()
    else:
        d.sum()
    return (
        d.reshape(-1).clone(memory_format=torch.contiguous_format).view(torch.uint8).numpy().tobytes()
        if d.numel()
        else b""
    )


def touch(value: object) -> dict[str, str]:
    """Every tensor and array of ``value`` used as a caller would; their bytes, by path."""
    import numpy as np
    import torch

    out: dict[str, str] = {}
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, torch.Tensor):
            out[path] = _dense_bytes(item).hex()
        elif isinstance(item, np.ndarray):
            copy = item.copy()
            if copy.dtype.kind in "biufc":
                copy.sum()
            out[path] = np.ascontiguousarray(item).tobytes().hex()
        elif isinstance(item, dict):
            stack += [(f"{path}.{k}" if path else str(k), v) for k, v in item.items()]
        elif isinstance(item, (list, tuple)):
            stack += [(f"{path}.{i}" if path else str(i), v) for i, v in enumerate(item)]
        elif hasattr(item, "state_dict") and callable(item.state_dict):
            stack.append((path, item.state_dict()))
    return out


def doors() -> dict:
    import torch

    import zipsave
    from zipsave import cli

    def cli_run(*argv: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = cli.main(list(argv))
            except SystemExit as err:
                code = err.code
        text = out.getvalue()
        if "please report" in text:
            raise AssertionError(f"the CLI blames zipsave: {text[-600:]}")
        if code not in (0, None):
            raise zipsave.ZipsaveError(f"the command exited {code}: {text[-300:]}")
        return text

    class Holder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(3, 3))
            self.b = torch.nn.Parameter(torch.zeros(3))

    def restore(f: dict, key: str) -> object:
        holder = {"p": Holder()}
        zipsave.restore(holder, f["archive"])
        return holder

    def dcp_load(f: dict, key: str) -> object:
        import zipsave.dcp

        state = {"p": {"w": torch.zeros(3, 3), "b": torch.zeros(3)}}
        zipsave.dcp.load(state, f["archive"])
        return state

    models: list = []

    def sb3_model() -> object:
        import stable_baselines3 as sb3

        import zipsave.sb3

        zipsave.sb3.install()
        if not models:  # one model for every set_parameters: a refused load leaves it as it was
            models.append(sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu"))
        return models[0]

    def set_parameters(f: dict, key: str) -> object:
        model = sb3_model()
        model.set_parameters(f["archive"], device="cpu")
        return model.policy

    def ppo_load(f: dict, key: str) -> object:
        import stable_baselines3 as sb3

        sb3_model()
        return sb3.PPO.load(f["archive"], device="cpu").policy

    return {
        "load": lambda f, key: zipsave.load(f["archive"]),
        "load_mmap": lambda f, key: zipsave.load(f["archive"], mmap=True),
        "load_archive": lambda f, key: zipsave.load_archive(f["archive"]),
        "read": lambda f, key: zipsave.read(f["archive"], key),
        "restore": restore,
        "dcp_load": dcp_load,
        "cli_diff": lambda f, key: cli_run("diff", f["clean"], f["archive"]),
        "cli_inspect": lambda f, key: cli_run("inspect", f["archive"]),
        "cli_verify": lambda f, key: cli_run("verify", f["archive"]),
        "cli_read": lambda f, key: cli_run("read", f["archive"], key),
        "cli_read_json": lambda f, key: cli_run("read", "--json", f["archive"], key),
        "set_parameters": set_parameters,
        "ppo_load": ppo_load,
    }


def run(table: dict, job: dict) -> dict:
    import zipsave

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = table[job["door"]](job["files"], job.get("key"))
            values = touch(value) if not isinstance(value, str) else {}
    except zipsave.ZipsaveError as err:
        return {"outcome": "refused", "error": f"{type(err).__name__}: {err}"[:600]}
    except BaseException as err:  # noqa: BLE001 - anything else is what is reported
        return {"outcome": "foreign", "error": f"{type(err).__name__}: {err}"[:400] + traceback.format_exc()[-1200:]}
    return {"outcome": "loaded", "values": values}


def main() -> None:
    table = doors()
    headroom = int(os.environ.get("ZIPSAVE_VALUES_HEADROOM", 1 << 30))
    with open("/proc/self/status") as fp:
        vm = next(int(line.split()[1]) * 1024 for line in fp if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + headroom, resource.RLIM_INFINITY))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        result = run(table, job)
        result["id"] = job["id"]
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
