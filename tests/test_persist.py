"""save/load/load_archive/save_archive: paths, file objects, skip rules, errors."""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
import sys
import tempfile
import warnings
import zipfile

import cloudpickle
import numpy as np
import orjson
import pytest
import torch
from models import Algo, same_state

import zipsave


def _rewrite(path, member, transform):
    """Rewrite one member of an archive (as a zip explorer would), keeping the rest."""
    with zipfile.ZipFile(path) as zf:
        items = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for info, raw in items:
            zf.writestr(info, transform(raw) if info.filename == member else raw)


@pytest.fixture
def edited_ok():
    """Tolerate the integrity note an edited ``data`` member produces (tested on its own)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*edited after saving")
        yield


def _edit_data(path, edit):
    def transform(raw):
        data = orjson.loads(raw)
        edit(data)
        return orjson.dumps(data)

    _rewrite(path, "data", transform)


# -- paths and files -------------------------------------------------------------------------
def test_suffix_rules(tmp_path):
    algo = Algo()
    zipsave.save(algo, tmp_path / "model")
    assert (tmp_path / "model.zip").exists()
    zipsave.save(algo, tmp_path / "model.v1")
    assert (tmp_path / "model.v1").exists()  # SB3's rule: an existing suffix is kept
    assert isinstance(zipsave.load(tmp_path / "model"), Algo)  # load tries path + ".zip"
    assert isinstance(zipsave.load(str(tmp_path / "model.v1")), Algo)


def test_missing_parent_folder_is_created(tmp_path):
    zipsave.save(Algo(), tmp_path / "runs" / "a" / "model.zip")
    assert (tmp_path / "runs" / "a" / "model.zip").exists()


def test_file_objects_are_not_closed(tmp_path):
    algo = Algo().train_step(1)
    buf = io.BytesIO()
    zipsave.save(algo, buf)
    assert not buf.closed
    buf.seek(0)
    loaded = zipsave.load(buf)
    assert not buf.closed
    assert same_state(algo.policy, loaded.policy)
    with open(tmp_path / "f.zip", "wb") as f:
        zipsave.save(algo, f)
        assert not f.closed
    with open(tmp_path / "f.zip", "rb") as f:
        loaded = zipsave.load(f)
        assert not f.closed
    assert same_state(algo.policy.optimizer, loaded.policy.optimizer)


def test_non_seekable_output_and_input(tmp_path):
    class Pipe(io.RawIOBase):
        def __init__(self):
            self.chunks = []

        def writable(self):
            return True

        def write(self, b):
            self.chunks.append(bytes(b))
            return len(b)

    pipe = Pipe()
    algo = Algo().train_step(1)
    zipsave.save(algo, pipe)
    raw = b"".join(pipe.chunks)
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        assert zf.testzip() is None

    class Reader(io.RawIOBase):
        def __init__(self, data):
            self._b = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, b):
            return self._b.readinto(b)

        def seekable(self):
            return False

    loaded = zipsave.load(Reader(raw))
    assert same_state(algo.policy, loaded.policy)


def test_save_archive_and_load_archive_mirror_sb3(tmp_path):
    net = torch.nn.Linear(3, 2)
    data = {"gamma": 0.99, "space_shape": (3,), "arr": np.arange(4)}
    zipsave.save_archive(
        tmp_path / "a.zip",
        data=data,
        params={"policy": net.state_dict()},
        pytorch_variables={"log_alpha": torch.tensor([0.5])},
    )
    got_data, params, variables = zipsave.load_archive(tmp_path / "a.zip")
    assert got_data["gamma"] == 0.99 and got_data["space_shape"] == (3,)
    assert np.array_equal(got_data["arr"], data["arr"])
    assert torch.equal(params["policy"]["weight"], net.weight)
    assert torch.equal(variables["log_alpha"], torch.tensor([0.5]))
    none_data, params2, _ = zipsave.load_archive(tmp_path / "a.zip", load_data=False)
    assert none_data is None and set(params2) == {"policy"}


def test_data_is_pretty_standard_json(tmp_path):
    import json

    algo = Algo()
    algo.extra = {"nan": float("nan"), "t": (1, 2)}
    algo.save(tmp_path / "a.zip")
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        text = zf.read("data").decode()
        infos = {i.filename: i for i in zf.infolist()}
    parsed = json.loads(text)  # strict standard-library parse
    assert "\n  " in text
    assert parsed["extra"][":zipsave:"]["kind"] == "dict" or "nan" in parsed["extra"]
    assert infos["policy.pth"].compress_type == zipfile.ZIP_STORED


def test_device_mapping_to_cpu(tmp_path):
    algo = Algo()
    algo.inside = torch.arange(3.0)
    algo.save(tmp_path / "a.zip")
    loaded = zipsave.load(tmp_path / "a.zip", device="cpu")
    assert loaded.inside.device.type == "cpu" and torch.equal(loaded.inside, algo.inside)
    _, params, _ = zipsave.load_archive(tmp_path / "a.zip", device=torch.device("cpu"))
    assert all(t.device.type == "cpu" for t in params["policy"].values())


def test_load_in_a_fresh_interpreter(tmp_path):
    algo = Algo(learning_rate=2e-3).train_step(2)
    algo.save(tmp_path / "a.zip")
    expected = algo.predict(np.ones((1, 4))).tolist()
    tests_dir = os.path.dirname(__file__)
    code = (
        "import sys, warnings; warnings.simplefilter('error'); sys.path.insert(0, %r)\n"
        "import numpy as np, zipsave\n"
        "try:\n"
        "    zipsave.load(%r)\n"
        "except zipsave.UnsafeGlobalError as err:\n"
        "    print('refused' if 'models' not in sys.modules else 'imported')\n"
        "import models  # the class's module, imported by the program that uses it\n"
        "m = zipsave.load(%r)\n"
        "print(type(m).__name__, m.learning_rate, m.predict(np.ones((1, 4))).tolist())\n"
    ) % (tests_dir, str(tmp_path / "a.zip"), str(tmp_path / "a.zip"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # init.json names models.Algo: nothing imports `models` on the archive's word alone
    assert out.stdout.strip().splitlines() == ["refused", f"Algo 0.002 {expected}"]


# -- skip rules ------------------------------------------------------------------------------
def test_broken_entry_is_skipped_with_a_warning(tmp_path, edited_ok):
    algo = Algo().train_step(1)
    algo.save(tmp_path / "a.zip")
    _edit_data(
        tmp_path / "a.zip",
        lambda d: d.update(ep_info_buffer={":type:": "<class 'collections.deque'>", ":serialized:": "!!notbase64"}),
    )
    report = zipsave.LoadReport()
    with pytest.warns(
        zipsave.SkippedEntryWarning,
        match=re.escape("key `ep_info_buffer` of member `data` (type <class 'collections.deque'>)"),
    ):
        loaded = zipsave.load(tmp_path / "a.zip", report=report)
    assert [e.key for e in report.skipped] == ["ep_info_buffer"]
    assert loaded.zipsave_report.skipped[0].member == "data"
    assert same_state(algo.policy, loaded.policy)  # everything else loaded
    assert loaded.num_timesteps == algo.num_timesteps
    # strict: every problem is an error, the edit of `data` first of all
    with pytest.raises(zipsave.IntegrityError, match=re.escape("member `data`: differs from manifest.json")):
        zipsave.load(tmp_path / "a.zip", strict=True)
    # strict on an unedited archive: the refused pickle is an error naming the key
    algo.fn = lambda x: x
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("`fn` holds code that cloudpickle stores by value")):
        algo.save(tmp_path / "b.zip")
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("key `fn`")):
        zipsave.load(tmp_path / "b.zip", strict=True)


def test_custom_objects_replace_without_decoding(tmp_path, edited_ok):
    algo = Algo()
    algo.save(tmp_path / "a.zip")
    _edit_data(
        tmp_path / "a.zip",
        lambda d: d.update(learning_rate={":type:": "<class 'function'>", ":serialized:": "corrupt"}),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", zipsave.SkippedEntryWarning)  # nothing may be skipped
        loaded = zipsave.load(tmp_path / "a.zip", custom_objects={"learning_rate": 0.5})
    assert loaded.learning_rate == 0.5
    with pytest.raises(
        TypeError,
        match=re.escape(
            "custom_objects must be a dict of `data` keys to the values used "
            "instead of the saved ones, found a list: [1]."
        ),
    ):
        zipsave.load(tmp_path / "a.zip", custom_objects=[1])


def test_edited_data_is_reported_and_decoded(tmp_path):
    Algo().save(tmp_path / "a.zip")
    _edit_data(tmp_path / "a.zip", lambda d: d.update(num_timesteps=1234))
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("member `data`")):
        loaded = zipsave.load(tmp_path / "a.zip")
    assert loaded.num_timesteps == 1234


def test_an_edited_version_member_is_said_not_used_silently(tmp_path):
    # Its format line is read before anything else, unchecked, to know how to read the rest;
    # a change after saving is then reported as any changed member is (format.rst, manifest).
    zipsave.save({"w": torch.ones(3)}, tmp_path / "a.zip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a member as saved: nothing to say
        zipsave.load(tmp_path / "a.zip")
    _rewrite(tmp_path / "a.zip", "_zipsave_version", lambda raw: raw.replace(b"format 1", b"format 0"))
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("member `_zipsave_version` differs from manifest.json")):
        loaded = zipsave.load(tmp_path / "a.zip")
    assert torch.equal(loaded["w"], torch.ones(3))
    with pytest.raises(zipsave.IntegrityError, match=re.escape("member `_zipsave_version`: differs")):
        zipsave.load(tmp_path / "a.zip", strict=True)
    with pytest.raises(zipsave.IntegrityError, match="_zipsave_version"):
        zipsave.restore({"w": torch.zeros(3)}, tmp_path / "a.zip", strict=True)


def test_pickled_entry_needs_opt_in(tmp_path):
    algo = Algo()
    algo.schedule = lambda progress: 3e-4 * progress
    # said when saving, with the fix, not only when the load skips it
    with pytest.warns(
        zipsave.ZipsaveWarning,
        match=re.escape(
            "`schedule` holds code that cloudpickle stores by value (a lambda, or a function or class defined inside a "
            "function or in `__main__`): a safe load (the default) runs no code from an archive, so it will skip it. "
            "Define it at module level in an importable module (it is then saved by its import path), or pass it "
            "again when loading: `custom_objects={'schedule': ...}`."
        ),
    ):
        algo.save(tmp_path / "a.zip")
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("key `schedule`")):
        loaded = zipsave.load(tmp_path / "a.zip")
    assert not hasattr(loaded, "schedule") or loaded.schedule is None or not callable(loaded.schedule)
    loaded = zipsave.load(tmp_path / "a.zip", allow_pickle=True)
    assert loaded.schedule(0.5) == pytest.approx(1.5e-4)


def _flip_byte(path, member):
    """Flip one byte in the middle of a member, keeping the zip directory's CRC-32 (bit rot)."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    with open(path, "r+b") as f:
        f.seek(start + info.file_size // 2)
        byte = f.read(1)
        f.seek(start + info.file_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_truncated_pth_member_is_an_integrity_error(tmp_path):
    algo = Algo().train_step(1)
    algo.save(tmp_path / "a.zip")
    _rewrite(tmp_path / "a.zip", "policy.optimizer.pth", lambda raw: raw[:100])
    with pytest.raises(
        zipsave.IntegrityError,
        match=re.escape(f"archive `{tmp_path / 'a.zip'}`, member `policy.optimizer.pth`: differs from manifest.json"),
    ) as err:
        zipsave.load(tmp_path / "a.zip")
    assert err.value.member == "policy.optimizer.pth" and err.value.expected != err.value.found


@pytest.mark.parametrize("member", ["policy.pth", "policy.optimizer.pth"])
@pytest.mark.parametrize("verb", ["load", "restore", "Saveable.load"])
def test_flipped_byte_in_a_tensor_member_is_never_a_wrong_model(tmp_path, member, verb):
    algo = Algo().train_step(1)
    algo.save(tmp_path / "a.zip")
    _flip_byte(tmp_path / "a.zip", member)
    load = {
        "load": lambda **kw: zipsave.load(tmp_path / "a.zip", **kw),
        "restore": lambda **kw: zipsave.restore(Algo(), tmp_path / "a.zip", **kw),
        "Saveable.load": lambda **kw: Algo.load(tmp_path / "a.zip", **kw),
    }[verb]
    with pytest.raises(zipsave.IntegrityError, match=re.escape(f"member `{member}`: CRC-32 ")) as err:
        load()
    assert err.value.archive == str(tmp_path / "a.zip")
    assert err.value.expected.startswith("crc32 ") and err.value.found.startswith("crc32 ")
    assert err.value.expected != err.value.found
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape(f"member `{member}`")) as caught:
        load(skip_broken_tensors=True)
    assert caught[0].filename == __file__


def test_a_broken_tensor_member_left_out_loads_the_rest(tmp_path):
    algo = Algo().train_step(1)
    algo.save(tmp_path / "a.zip")
    _flip_byte(tmp_path / "a.zip", "policy.optimizer.pth")
    loaded = zipsave.load(tmp_path / "a.zip", exclude=["policy.optimizer"])
    assert same_state(algo.policy, loaded.policy)
    assert loaded.zipsave_report.ok


# -- errors ----------------------------------------------------------------------------------
def test_missing_file(tmp_path):
    with pytest.raises(zipsave.ZipsaveError, match=re.escape(f"archive `{tmp_path / 'nope'}`: no such file")):
        zipsave.load(tmp_path / "nope")


def test_not_a_zip(tmp_path):
    (tmp_path / "x.zip").write_bytes(b"hello, not a zip")
    with pytest.raises(
        zipsave.ArchiveFormatError, match=re.escape(f"archive `{tmp_path / 'x.zip'}`: not a zip archive")
    ):
        zipsave.load(tmp_path / "x.zip")


def test_truncated_zip(tmp_path):
    Algo().save(tmp_path / "a.zip")
    raw = (tmp_path / "a.zip").read_bytes()
    for cut, words in [(len(raw) // 2, "the archive is truncated"), (len(raw) - 10, "not a zip archive, or truncated")]:
        (tmp_path / "a.zip").write_bytes(raw[:cut])
        with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(words)):
            zipsave.load(tmp_path / "a.zip")


def test_archive_without_init_or_data(tmp_path):
    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as zf:
        zf.writestr("something.txt", "hi")
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("has no `data` member, so it holds no model")):
        zipsave.load(tmp_path / "empty.zip", cls=Algo)
    assert zipsave.load_archive(tmp_path / "empty.zip") == (None, {}, None)


def test_a_torch_save_file_or_a_zip_of_other_files_is_named_for_what_it_is(tmp_path):
    """The hint was `zipsave.load_archive`, which reads nothing from either."""
    torch.save({"w": torch.ones(2)}, tmp_path / "weights.pt")
    with pytest.raises(
        zipsave.ArchiveFormatError,
        match=re.escape(
            "has no `data` member, so it holds no model: it is a `torch.save` file (it holds `weights/data.pkl`), "
            "not a model archive. Read it with `torch.load(path, weights_only=True)`."
        ),
    ):
        zipsave.load(tmp_path / "weights.pt")
    with zipfile.ZipFile(tmp_path / "files.zip", "w") as zf:
        zf.writestr("notes.txt", "hi")
        zf.writestr("image.png", b"\x89PNG")
    with pytest.raises(
        zipsave.ArchiveFormatError,
        match=re.escape(
            "has no `data` member, so it holds no model: it is a zip file of 2 other member(s) (`image.png`, "
            "`notes.txt`), not a model archive. Check the path."
        ),
    ):
        zipsave.load(tmp_path / "files.zip", cls=Algo)


def test_unencodable_value_fails_before_writing(tmp_path):
    import threading

    Algo().save(tmp_path / "a.zip")
    before = (tmp_path / "a.zip").read_bytes()
    algo = Algo()
    algo.gen = (i for i in range(3))  # generators are left out as live handles
    algo.cond = [threading.Lock()]  # a lock inside a list cannot be pickled or encoded
    with pytest.raises(zipsave.EncodeError, match=re.escape("key `cond`")):
        algo.save(tmp_path / "a.zip")
    assert (tmp_path / "a.zip").read_bytes() == before
    assert os.listdir(tmp_path) == ["a.zip"]


def test_print_system_info(tmp_path, capsys):
    Algo().save(tmp_path / "a.zip")
    zipsave.load(tmp_path / "a.zip", print_system_info=True)
    out = capsys.readouterr().out
    assert "== SAVED MODEL SYSTEM INFO ==" in out and "== CURRENT SYSTEM INFO ==" in out
    assert f"- PyTorch: {torch.__version__}" in out


def test_app_state_dict_round_trip(tmp_path):
    net = torch.nn.Linear(3, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    zipsave.save({"model": net, "optim": opt, "step": 10, "name": ("a", 1)}, tmp_path / "s.zip")
    net2 = torch.nn.Linear(3, 3)
    opt2 = torch.optim.SGD(net2.parameters(), lr=0.1, momentum=0.9)
    state = {"model": net2, "optim": opt2, "step": 0, "name": None}
    zipsave.restore(state, tmp_path / "s.zip")
    assert state["step"] == 10 and state["name"] == ("a", 1)
    assert same_state(net, net2) and same_state(opt, opt2)
    loaded = zipsave.load(tmp_path / "s.zip")
    assert set(loaded) == {"model", "optim", "step", "name"}
    assert torch.equal(loaded["model"]["weight"], net.weight)


def test_demo_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "zipsave", "demo", "--seconds", "1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "demo succeeded" in out.stdout
    assert (tmp_path / "reinforce_cartpole.zip").is_file()
    assert "policy.optimizer.pth" in out.stdout and "same actions on 200 observations: True" in out.stdout


def test_demo_without_out_leaves_nothing_behind(tmp_path, monkeypatch):
    # `python -m zipsave demo` without --out left a zipsave-demo-* folder in the temp dir per run
    from zipsave._demo import run_demo

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    said = io.StringIO()
    assert run_demo(seconds=0.1, stream=said) == 0, said.getvalue()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("zipsave-demo")] == []
    assert "removed when the demo ends: `--out FOLDER` keeps the archive" in said.getvalue()


def test_serialized_spelling_matches_sb3(tmp_path):
    algo = Algo()
    algo.fn = lambda x: x  # only a pickle can hold it
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("`fn` holds code that cloudpickle stores by value")):
        algo.save(tmp_path / "a.zip")
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        data = orjson.loads(zf.read("data"))
    entry = data["fn"]
    assert entry[":type:"] == "<class 'function'>"
    assert cloudpickle.loads(base64.b64decode(entry[":serialized:"]))(7) == 7


def test_newer_format_is_refused(tmp_path):
    Algo().save(tmp_path / "a.zip")
    _rewrite(tmp_path / "a.zip", "_zipsave_version", lambda raw: raw.replace(b"format 1", b"format 99"))
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("uses archive format 99; this zipsave")):
        zipsave.load(tmp_path / "a.zip")


def test_read_of_a_tensor_in_a_corrupted_member_is_an_integrity_error(tmp_path):
    algo = Algo().train_step(1)
    algo.save(tmp_path / "a.zip")
    name = next(iter(algo.policy.state_dict()))
    intact = zipsave.read(tmp_path / "a.zip", f"policy/{name}")
    assert torch.equal(intact, algo.policy.state_dict()[name])
    raw = (tmp_path / "a.zip").read_bytes()
    stored = intact.detach().numpy().tobytes()
    assert raw.count(stored) == 1  # bit rot inside the very bytes that are read
    (tmp_path / "a.zip").write_bytes(raw.replace(stored, bytes(b ^ 0xFF for b in stored[:1]) + stored[1:]))
    with pytest.raises(
        zipsave.IntegrityError, match=re.escape(f"archive `{tmp_path / 'a.zip'}`, member `policy.pth`: ")
    ) as err:
        zipsave.read(tmp_path / "a.zip", f"policy/{name}")
    assert err.value.expected != err.value.found
