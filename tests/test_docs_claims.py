"""Claims the documentation's prose makes about behaviour, checked against the code (the code
blocks run in test_docs_examples.py; these are the sentences around them)."""

from __future__ import annotations

import inspect
import json
import re
import struct
import zipfile
from pathlib import Path

import pytest
import torch

import zipsave
from zipsave import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"
VERBS = ["save", "load", "restore", "save_archive", "load_archive", "inspect", "read"]


def _rewrite(src: Path, dst: Path, edit) -> None:
    """Copy an archive member by member, passing each member's bytes through ``edit``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info))
            if data is not None:
                zout.writestr(info, data)


def _flip(path: Path, member: str, offset: int) -> None:
    """Flip one bit at ``offset`` bytes into a stored member's data, in place."""
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    raw[info.header_offset + 30 + name_len + extra_len + offset] ^= 0x01
    path.write_bytes(raw)


# -- security.rst, usage.rst: an edited data member --------------------------------------------


def test_strict_refuses_an_edited_data_member_without_claiming_to_decode_it(tmp_path):
    zipsave.save({"gamma": 0.9, "n": 1}, tmp_path / "a.zip")
    _rewrite(tmp_path / "a.zip", tmp_path / "edited.zip", lambda n, b: b.replace(b"0.9", b"0.5") if n == "data" else b)

    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("It was edited after saving; decoding it key by key.")):
        assert zipsave.load(tmp_path / "edited.zip")["gamma"] == 0.5

    with pytest.raises(zipsave.IntegrityError) as caught:
        zipsave.load(tmp_path / "edited.zip", strict=True)
    message = str(caught.value)
    assert "decoding it key by key." not in message  # it raised: nothing was decoded
    assert "member `data`: differs from manifest.json" in message
    assert "`strict=True` refuses an edited member. Load without `strict=True`" in message
    assert caught.value.member == "data"
    assert caught.value.expected != caught.value.found and caught.value.expected is not None


# -- cli.rst: verify, diff, inspect -------------------------------------------------------------


def test_verify_passes_an_archive_without_manifest_with_a_note(tmp_path, capsys):
    zipsave.save({"policy": torch.nn.Linear(2, 2), "x": 1}, tmp_path / "m.zip")
    _rewrite(tmp_path / "m.zip", tmp_path / "sb3like.zip", lambda n, b: None if n == "manifest.json" else b)

    assert cli.main(["verify", str(tmp_path / "sb3like.zip"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["problems"] == []
    assert any("no manifest.json" in note for note in out["notes"])

    assert cli.main(["verify", str(tmp_path / "sb3like.zip"), "--require-manifest"]) == 1
    assert "no manifest.json" in capsys.readouterr().out


def test_diff_decodes_a_value_stored_differently_unless_bytes(tmp_path, capsys):
    zipsave.save({"t": (1, 2), "x": 1}, tmp_path / "a.zip")

    def pickle_only(name: str, data: bytes) -> bytes:
        if name != "data":
            return data
        values = json.loads(data)
        del values["t"][":zipsave:"]  # as SB3 stores it: the pickle alone
        return json.dumps(values).encode()

    _rewrite(tmp_path / "a.zip", tmp_path / "b.zip", pickle_only)
    assert cli.main(["diff", str(tmp_path / "a.zip"), str(tmp_path / "b.zip")]) == 0
    assert "t: same value, stored differently" in capsys.readouterr().out
    assert cli.main(["diff", str(tmp_path / "a.zip"), str(tmp_path / "b.zip"), "--bytes"]) == 1
    assert "~ data    t:" in capsys.readouterr().out


def test_inspect_json_has_the_documented_keys(tmp_path, capsys):
    zipsave.save({"policy": torch.nn.Linear(2, 2), "x": 1}, tmp_path / "m.zip")
    assert cli.main(["inspect", str(tmp_path / "m.zip"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    documented = {"members", "data", "tensors", "components", "system_info", "manifest_digest", "notes"}
    assert documented <= set(out)
    assert {"needs_pickle", "globals", "untrusted"} <= set(out["data"][0])
    assert {"dtype", "shape", "name"} <= set(out["tensors"][0])


def test_read_output_in_cli_rst_is_what_the_command_prints(tmp_path, capsys, monkeypatch):
    """The output cli.rst shows for `zipsave read`, on model.zip made as the page makes it."""
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    zipsave.save({"policy": policy, "learning_rate": 3e-4, "num_timesteps": 1000}, "model.zip")
    printed = []
    for address in ("policy/2.bias", "learning_rate"):
        assert cli.main(["read", "model.zip", address]) == 0
        printed += capsys.readouterr().out.splitlines()
    page = (DOCS / "cli.rst").read_text()
    shown = page[page.index("Output for the first two::") :].split("\n\n")[1]
    assert [line.strip() for line in shown.splitlines()] == [line.strip() for line in printed]
    assert cli.main(["read", "model.zip", "policy.2.bias"]) == 2
    assert "Did you mean `policy/2.bias`?" in capsys.readouterr().err


def _cli_rst_archives(tmp_path: Path) -> None:
    """model.zip and model-v2.zip, made as docs/cli.rst makes them."""
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    zipsave.save({"policy": policy, "learning_rate": 3e-4, "num_timesteps": 1000}, tmp_path / "model.zip")
    with torch.no_grad():
        policy[2].bias += 0.5
    zipsave.save({"policy": policy, "learning_rate": 1e-4, "num_timesteps": 2000}, tmp_path / "model-v2.zip")


def _shown_after(page: str, lead: str) -> list[str]:
    """The lines of the literal block that follows ``lead`` on a page, dedented."""
    block = page[page.index(lead) + len(lead) :].split("\n\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    return "\n".join(lines).strip("\n").splitlines()


def test_inspect_output_in_cli_rst_is_what_the_command_prints(tmp_path, capsys, monkeypatch):
    """All but what differs by machine: the system info, which the page cuts short with
    ``...``, and what hashes or counts it (the digest, the sizes of system_info.txt and of the
    whole archive)."""
    monkeypatch.chdir(tmp_path)
    _cli_rst_archives(tmp_path)
    assert cli.main(["inspect", "model.zip"]) == 0
    printed = capsys.readouterr().out.strip("\n").splitlines()
    shown = _shown_after((DOCS / "cli.rst").read_text(), "Output\nfor ``model.zip``::")

    def machine_free(lines: list[str]) -> list[str]:
        out, skipping = [], False
        for line in lines:
            if line == "saved with":
                skipping = True
            elif skipping and not line.startswith("  "):
                skipping = False
            if not skipping:
                line = re.sub(r"^manifest sha256: [0-9a-f]{64}$", "manifest sha256: <digest>", line)
                line = re.sub(r"members, [\d.]+ KiB$", "members, <size>", line)
                out.append(re.sub(r"^ +[\d.]+ K?i?B( +stored +system_info.txt)$", r"<size>\1", line))
        return out

    assert machine_free(shown) == machine_free(printed)
    assert "saved with" in shown and any(line.startswith("  PyTorch: ") for line in shown)


def test_diff_output_in_cli_rst_is_what_the_command_prints(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _cli_rst_archives(tmp_path)
    assert cli.main(["diff", "model.zip", "model-v2.zip"]) == 1
    printed = capsys.readouterr().out.strip("\n").splitlines()
    assert _shown_after((DOCS / "cli.rst").read_text(), "For the two archives above::") == printed


def test_inspect_json_keys_are_the_ones_cli_rst_lists(tmp_path, capsys):
    _cli_rst_archives(tmp_path)
    assert cli.main(["inspect", str(tmp_path / "model.zip"), "--json"]) == 0
    keys = set(json.loads(capsys.readouterr().out))
    page = (DOCS / "cli.rst").read_text()
    paragraph = page[page.index("``--json`` prints :meth:`zipsave.ArchiveInfo.to_dict`") :].split("\n\n")[0]
    listed = set(re.findall(r"``(\w+)``", paragraph)) - {"needs_pickle", "globals", "untrusted", "rebuilt"}
    listed -= {"dtype", "shape", "name"}
    assert listed == keys


def test_list_output_in_cli_rst_is_what_the_command_prints(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    with zipsave.CheckpointManager("run-checkpoints", keep_last=2) as manager:
        for step in (1000, 2000, 3000):
            manager.save(step, {"policy": policy, "step": step}, metrics={"loss": 1 / step})
    assert cli.main(["list", "run-checkpoints"]) == 0
    printed = capsys.readouterr().out.strip("\n").splitlines()
    shown = _shown_after((DOCS / "cli.rst").read_text(), "the times are the saves')::")

    def timeless(lines: list[str]) -> list[str]:  # and sizeless: system_info.txt's length is the machine's
        return [re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  [\d.]+ KiB", "<time> <size>", line) for line in lines]

    assert timeless(shown) == timeless(printed)


def test_diff_json_keys_are_the_ones_cli_rst_lists(tmp_path, capsys):
    _cli_rst_archives(tmp_path)
    assert cli.main(["diff", str(tmp_path / "model.zip"), str(tmp_path / "model-v2.zip"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    page = (DOCS / "cli.rst").read_text()
    paragraph = page[page.index("``--json`` prints ``a`` and ``b``") :].split("::")[0]
    assert set(re.findall(r"``(\w+)``", paragraph)) - {"json"} == set(out)
    assert list(out["tensors_changed"][0]) == ["name", "old", "new", "max_abs_diff"]
    assert '{"name", "old", "new", "max_abs_diff"}' in paragraph


# -- security.rst: what read checks ---------------------------------------------------------------


def test_read_checks_the_records_it_reads(tmp_path):
    linear = torch.nn.Linear(4, 2)
    zipsave.save({"policy": linear}, tmp_path / "m.zip")
    with zipfile.ZipFile(tmp_path / "m.zip") as zf:
        records = json.loads(zf.read("manifest.json"))["members"]["policy.pth"]["records"]
        inner = zf.read("policy.pth")
    weight_record = next(
        name
        for name, rec in records.items()
        if inner[rec["offset"] : rec["offset"] + rec["size"]] == linear.weight.detach().numpy().tobytes()
    )
    _flip(tmp_path / "m.zip", "policy.pth", records[weight_record]["offset"] + 1)

    with pytest.raises(zipsave.IntegrityError, match=re.escape("(tensor `weight`)")):
        zipsave.read(tmp_path / "m.zip", "policy/weight")
    # another tensor's record is intact, and is all that read() reads
    assert torch.equal(zipsave.read(tmp_path / "m.zip", "policy/bias"), linear.bias.detach())


def test_read_puts_tensors_on_the_cpu_by_default():
    assert inspect.signature(zipsave.read).parameters["device"].default == "cpu"
    assert 'default ``"cpu"``' in zipsave.read.__doc__


# -- api.rst: every public name and option is documented -----------------------------------------


def test_every_public_name_has_an_api_entry():
    api = (DOCS / "api.rst").read_text()
    missing = [name for name in zipsave.__all__ if not re.search(rf"::\s+{re.escape(name)}\b", api)]
    assert missing == []


@pytest.mark.parametrize("verb", VERBS)
def test_every_option_of_a_verb_is_in_its_docstring(verb):
    function = getattr(zipsave, verb)
    documented = set()
    # inspect.getdoc: the same text whether or not the compiler stripped the indentation (3.13 does)
    for line in re.findall(r"^(\**\w[\w, *]*)$", inspect.getdoc(function), re.M):
        documented.update(part.strip().lstrip("*") for part in line.split(","))
    assert sorted(set(inspect.signature(function).parameters) - documented) == []


def test_error_classes_derive_from_the_builtins_api_rst_names():
    builtins = {
        name: [base.__name__ for base in getattr(zipsave, name).__mro__ if base.__module__ == "builtins"][0]
        for name in zipsave.__all__
        if isinstance(getattr(zipsave, name), type) and issubclass(getattr(zipsave, name), zipsave.ZipsaveError)
    }
    assert builtins == {
        "AlgorithmMismatchError": "ValueError",
        "ArchiveFormatError": "ValueError",
        "ArchiveLimitError": "ValueError",
        "ArchiveNotFoundError": "FileNotFoundError",
        "CheckpointDirectoryError": "ValueError",
        "CheckpointLockedError": "RuntimeError",
        "DecodeError": "ValueError",
        "DeviceError": "ValueError",
        "EncodeError": "TypeError",
        "IntegrityError": "ValueError",
        "MissingDependencyError": "ImportError",
        "ParameterMismatchError": "ValueError",
        "SignatureError": "ValueError",
        "StorageError": "OSError",
        "UnsafeGlobalError": "Exception",
        "UnsafeNameError": "ValueError",
        "UsageError": "TypeError",
        "ZipsaveError": "Exception",
    }
    api = (DOCS / "api.rst").read_text()
    for builtin in ("ValueError", "TypeError", "OSError", "FileNotFoundError", "ImportError", "RuntimeError"):
        assert f"``{builtin}``" in api


# -- usage.rst, checkpointing.rst -----------------------------------------------------------------


class _Live(zipsave.Saveable):
    def __init__(self, env=None):
        import logging
        import threading

        self.env = env
        self.lock = threading.Lock()
        self.log = logging.getLogger("zipsave.test")
        self.gamma = 0.9


def test_live_handles_are_left_out_and_their_argument_recorded_as_null(tmp_path):
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    _Live(env).save(tmp_path / "live.zip")
    assert [entry.key for entry in zipsave.inspect(tmp_path / "live.zip").data] == ["gamma"]
    with zipfile.ZipFile(tmp_path / "live.zip") as zf:
        assert json.loads(zf.read("init.json"))["args"] == {"env": None}
    assert _Live.load(tmp_path / "live.zip", env=env).env is env


def test_checkpoint_names_are_the_step_padded_to_ten_digits(tmp_path):
    with zipsave.CheckpointManager(tmp_path / "run", background=False) as manager:
        checkpoint = manager.save(1000, {"x": 1}, force=True)
    assert Path(checkpoint.path).name == "step-0000001000.zip"


@pytest.mark.parametrize("verb", ["load", "restore", "load_archive"])
def test_the_auto_device_default_is_documented(verb):
    function = getattr(zipsave, verb)
    assert inspect.signature(function).parameters["device"].default == "auto"
    assert '``"auto"`` (the default) picks CUDA' in function.__doc__


def test_a_load_report_notes_an_edited_data_member(tmp_path):
    zipsave.save({"gamma": 0.9}, tmp_path / "a.zip")
    _rewrite(tmp_path / "a.zip", tmp_path / "edited.zip", lambda n, b: b.replace(b"0.9", b"0.5") if n == "data" else b)
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.ZipsaveWarning):
        zipsave.load(tmp_path / "edited.zip", report=report)
    assert report.ok and report.skipped == []
    assert len(report.notes) == 1 and report.notes[0].startswith("data: differs from manifest.json")
    assert report.archive is not None and report.archive.endswith("edited.zip")


def test_keep_best_with_a_count_keeps_that_many_best(tmp_path):
    with zipsave.CheckpointManager(
        tmp_path / "run", keep_last=1, keep_best=("loss", "min", 2), background=False
    ) as manager:
        for step, loss in [(1, 5.0), (2, 1.0), (3, 2.0), (4, 9.0), (5, 8.0)]:
            manager.save(step, {"x": step}, metrics={"loss": loss})  # neither every_steps nor every_seconds: each saves
        assert [checkpoint.step for checkpoint in manager.list()] == [2, 3, 5]
        assert manager.best().step == 2


@pytest.mark.parametrize("overwrite", [False, True])
def test_extract_refuses_a_symbolic_link_in_the_destination_before_writing(tmp_path, capsys, overwrite):
    zipsave.save({"policy": torch.nn.Linear(2, 2), "x": 1}, tmp_path / "m.zip")
    out = tmp_path / "out"
    out.mkdir()
    (out / "policy.pth").symlink_to(tmp_path / "elsewhere")
    argv = ["extract", str(tmp_path / "m.zip"), str(out)] + (["--overwrite"] if overwrite else [])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "member `policy.pth`: " in err and "is a symbolic link, and extract never writes through one" in err
    assert sorted(p.name for p in out.iterdir()) == ["policy.pth"]  # nothing written, data included
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("module", ["zipsave.sb3", "zipsave.dcp", "zipsave.rllib"])
def test_every_public_name_of_an_integration_has_an_api_entry(module):
    import importlib

    api = (DOCS / "api.rst").read_text()
    section = api[api.index(f".. module:: {module}\n") :]
    end = section.find(".. module::", 1)
    section = section if end < 0 else section[:end]
    names = importlib.import_module(module).__all__
    assert [name for name in names if not re.search(rf"::\s+{re.escape(name)}\b", section)] == []


def test_read_of_an_unknown_address_says_what_the_archive_holds(tmp_path):
    zipsave.save({"policy": torch.nn.Linear(2, 2), "x": 1}, tmp_path / "m.zip")
    expected = (
        "`nope` names no tensor and no `data` key. It holds tensor members `policy/...`, "
        "`pytorch_variables/...` and `data` keys in the top-level folder; `zipsave inspect` lists every address."
    )
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(expected)):
        zipsave.read(tmp_path / "m.zip", "nope")
