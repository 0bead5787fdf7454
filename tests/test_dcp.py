"""zipsave as a torch.distributed.checkpoint storage: real gloo process groups on 127.0.0.1
(1, 2 and 4 ranks, FSDP2 ``fully_shard`` on CPU), resharding 4 -> 2 -> 1, async_save,
consolidation both ways, and the checks that run on the checkpoint afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile

import dcp_workers as workers
import pytest
import torch
import torch.multiprocessing as mp

import zipsave
import zipsave.dcp

pytestmark = pytest.mark.slow


STEPS = [  # (name, job, world size, checkpoint folder)
    ("w4", "round_trip", 4, "w4"),
    ("w2", "round_trip", 2, "w2"),
    ("w1", "round_trip", 1, "w1"),
    ("prepare", "prepare", 1, "w4"),
    ("reshard", "reshard", 2, "w4"),
    ("killed", "killed_save", 2, "w2"),  # last: rank 1 dies in it
]


def read_reports(out, world: int) -> list[dict | None]:
    reports: list[dict | None] = []
    for rank in range(world):
        path = os.path.join(out, f"rank{rank}.json")
        if os.path.exists(path):
            with open(path) as f:
                reports.append(json.load(f))
        else:
            reports.append(None)
    return reports


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every multi-rank step, run once by one set of 4 spawned processes: {name: reports}."""
    root = tmp_path_factory.mktemp("dcp")
    steps = [(name, job, world, str(root / f"{name}.store"), str(root / folder)) for name, job, world, folder in STEPS]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=workers.run_steps, args=(rank, steps, str(root / "out"))) for rank in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    out = {name: read_reports(root / "out" / name, world) for name, _, world, _ in STEPS}
    out["exitcodes"] = [p.exitcode for p in procs]
    out["root"] = root
    return out


@pytest.fixture(scope="module")
def saved(runs):
    """{world: (checkpoint folder, reports)} of the round trips."""
    return {world: (runs["root"] / f"w{world}", ok(runs[f"w{world}"])) for world in (1, 2, 4)}


@pytest.fixture(scope="module")
def resharded(runs):
    ok(runs["prepare"])
    return ok(runs["reshard"])


def ok(reports: list[dict | None]) -> list[dict]:
    for rank, report in enumerate(reports):
        assert report is not None, f"rank {rank} wrote no report"
        assert "error" not in report, f"rank {rank}: {report.get('trace')}"
    return reports  # type: ignore[return-value]


def assert_values(got: dict, expected: dict, keys=None) -> None:
    keys = expected.keys() if keys is None else keys
    for key in keys:
        assert torch.equal(torch.tensor(got[key]), torch.tensor(expected[key])), key


@pytest.mark.parametrize("world", [1, 2, 4])
def test_save_and_load_on_n_ranks(saved, world):
    _, reports = saved[world]
    for report in reports:
        assert report["saved"] == reports[0]["saved"]  # full tensors agree across ranks
        for kind in ("sync", "async"):
            assert_values(report[f"{kind}_loaded"], report["saved"])
            assert report[f"{kind}_step"] == 2
            assert report[f"{kind}_next_loss"] == report["next_loss"]
    # one archive per rank and the index, nothing else
    files = reports[0]["files"]
    assert files[0] == "index.zip" and len(files) == world + 1
    assert all(re.fullmatch(r"rank-\d{5}-[0-9a-f]{16}\.zip", f) for f in files[1:])


def test_rank_archives_are_ordinary_verified_zips(saved):
    ckpt = saved[2][0] / "sync"
    for name in os.listdir(ckpt):
        assert zipsave.dcp.verify(ckpt) == []
        with zipfile.ZipFile(ckpt / name) as zf:
            assert zf.testzip() is None
            infos = zf.infolist()
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
        assert "manifest.json" in [i.filename for i in infos]
    with zipfile.ZipFile(ckpt / "index.zip") as zf:
        assert sorted(zf.namelist()) == ["dcp_metadata.json", "manifest.json"]
        doc = json.loads(zf.read("dcp_metadata.json"))  # JSON, no pickle
    assert doc["format"] == "zipsave-dcp" and [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["state_dict_metadata"]["model.0.weight"] == {
        "type": "tensor",
        "dtype": "float32",
        "size": [16, 6],
        "requires_grad": False,
        "layout": "strided",
        "memory_format": "contiguous_format",
        "pin_memory": False,
        "chunks": [{"offsets": [0, 0], "sizes": [8, 6]}, {"offsets": [8, 0], "sizes": [8, 6]}],
    }


def test_four_ranks_load_into_two_and_train_on(saved, resharded):
    _, four = saved[4]
    for report in resharded:
        assert_values(report["loaded"], four[0]["saved"])
        assert report["step"] == 2
        # The next step on 2 ranks matches the one the 4 ranks took (float sums differ in order).
        assert report["next_loss"] == pytest.approx(four[0]["next_loss"], rel=1e-5)


def test_ranks_load_their_slices_from_one_ordinary_archive(saved, resharded):
    _, four = saved[4]
    big = workers.make_big(seed=7)
    size = os.path.getsize(saved[4][0] / "big.zip")
    for report in resharded:
        model_keys = [k for k in four[0]["saved"] if k.startswith("model.")]
        assert_values(report["archive_loaded"], four[0]["saved"], model_keys)
        for key, value in big.state_dict().items():
            assert report["big_sums"][key] == pytest.approx(float(value.double().sum()), rel=1e-9)
        # each rank read about half of the tensors' bytes, not the whole archive
        assert report["big_read_bytes"] < 0.7 * size


def _plain_app_state():
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model = workers.make_model(seed=123)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    workers.train_step(model, optim, 9, 0, 1)
    model_sd, optim_sd = get_state_dict(model, optim)
    return model, optim, {"model": model_sd, "optim": optim_sd, "step": 0}


def test_four_ranks_load_into_one_process_as_plain_tensors(saved):
    from torch.distributed.checkpoint.state_dict import set_state_dict

    ckpt, four = saved[4]
    model, optim, state = _plain_app_state()
    zipsave.dcp.load(state, ckpt / "sync")
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
    assert all(type(t) is torch.Tensor for t in state["model"].values())
    assert_values(workers.full_values(state), four[0]["saved"])
    assert workers.train_step(model, optim, 2, 0, 1) == pytest.approx(four[0]["next_loss"], rel=1e-5)


@pytest.mark.parametrize("layout", ["sync", "fs"])
def test_consolidate_into_one_archive(saved, tmp_path, layout):
    ckpt, four = saved[4]
    dst = tmp_path / "model.zip"
    state = zipsave.dcp.consolidate(ckpt / layout, dst)
    assert sorted(state) == ["model", "optim", "step"]
    loaded = zipsave.load(dst)
    assert loaded["step"] == 2
    assert_values(workers.full_values(loaded), four[0]["saved"])
    assert torch.equal(zipsave.read(dst, "model/2.weight"), torch.tensor(four[0]["saved"]["model.2.weight"]))
    data, params, _ = zipsave.load_archive(dst)  # SB3's shape: (data, params, variables)
    assert data == {"step": 2} and sorted(params) == ["model", "optim"]
    model = workers.make_model(seed=5)
    zipsave.restore({"model": model, "step": 0}, dst, exclude=["optim"])
    assert torch.equal(model[4].bias.detach(), torch.tensor(four[0]["saved"]["model.4.bias"]))


def test_cli_verify_and_inspect_a_checkpoint_directory(saved, tmp_path, capsys):
    from zipsave.cli import main

    ckpt = shutil.copytree(saved[2][0] / "sync", tmp_path / "ckpt")
    assert main(["verify", str(ckpt)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["inspect", str(ckpt)]) == 0
    shown = capsys.readouterr().out
    assert "2 rank archive(s)" in shown and "model.0.weight: float32 [16, 6] in 2 chunk(s)" in shown
    assert main(["inspect", "--json", str(ckpt)]) == 0
    assert [r["rank"] for r in json.loads(capsys.readouterr().out)["ranks"]] == [0, 1]
    rank1 = next(f for f in os.listdir(ckpt) if f.startswith("rank-00001"))
    _flip_byte_in(ckpt / rank1, "shards/model.0.weight@8,0")
    assert main(["verify", str(ckpt)]) == 1
    out = capsys.readouterr().out
    assert f"rank 1 (`{rank1}`)" in out and "shards/model.0.weight@8,0" in out


def _flip_byte_in(path, member: str) -> None:
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = (int.from_bytes(f.read(2), "little") for _ in range(2))
        at = info.header_offset + 30 + name_len + extra_len
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_missing_rank_archive_names_rank_and_file(saved, tmp_path):
    ckpt = shutil.copytree(saved[2][0] / "sync", tmp_path / "ckpt")
    rank1 = next(f for f in os.listdir(ckpt) if f.startswith("rank-00001"))
    os.unlink(ckpt / rank1)
    _, _, state = _plain_app_state()
    with pytest.raises(zipsave.IntegrityError, match=re.escape(f"member `{rank1}`: rank 1's archive is missing")):
        zipsave.dcp.load(state, ckpt)
    assert any(f"rank 1 (`{rank1}`)" in p or rank1 in p for p in zipsave.dcp.verify(ckpt))


def test_corrupt_rank_member_names_rank_and_member(saved, tmp_path):
    ckpt = shutil.copytree(saved[2][0] / "sync", tmp_path / "ckpt")
    rank1 = next(f for f in os.listdir(ckpt) if f.startswith("rank-00001"))
    _flip_byte_in(ckpt / rank1, "shards/model.2.weight@6,0")
    _, _, state = _plain_app_state()
    with pytest.raises(zipsave.IntegrityError, match=re.escape("member `shards/model.2.weight@6,0`: rank 1: CRC-32")):
        zipsave.dcp.load(state, ckpt)


def test_killed_rank_leaves_the_previous_checkpoint_whole(runs, saved):
    ckpt = runs["root"] / "w2" / "killed"  # a copy of the 2-rank checkpoint, saved over
    assert runs["exitcodes"][1] == -9  # rank 1: SIGKILL while writing its archive
    assert runs["exitcodes"][2:] == [0, 0]
    report = runs["killed"][0]
    assert report is not None and report["raised"] is not None, report  # rank 0 saw the failure
    assert (ckpt / "index.zip").read_bytes() == (saved[2][0] / "sync" / "index.zip").read_bytes()  # no commit
    assert zipsave.dcp.verify(ckpt) == []
    _, _, state = _plain_app_state()
    zipsave.dcp.load(state, ckpt)
    assert_values(workers.full_values(state), saved[2][1][0]["saved"])
