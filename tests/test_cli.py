"""The ``zipsave`` command, run as ``python -m zipsave`` on real archives."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import cli_server
import numpy as np
import pytest
import torch

import zipsave
from zipsave import cli

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = cli_server.run(list(args), env=ENV, cwd=cwd)  # `python -m zipsave`, forked (cli_server.py)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("zipsave: error: "), done.stderr
    assert done.returncode == 2
    return lines[0]


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("archives")
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    policy(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    buffer = np.zeros(20_000, dtype=np.float32)  # big enough for its own arrays/<id>.npy member
    paths = {name: folder / f"{name}.zip" for name in ("a", "same", "b")}
    state = {"policy": policy, "optim": optimizer, "learning_rate": 1e-3, "buffer": buffer, "gone": 1}
    zipsave.save(state, paths["a"])
    zipsave.save(state, paths["same"])
    with torch.no_grad():
        policy[2].bias += 0.25
    buffer[7] = 1.0
    del state["gone"]
    zipsave.save(dict(state, learning_rate=5e-4, new_key="hello", extra=torch.nn.Linear(2, 2)), paths["b"])
    return paths


# -- help, usage -------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["inspect", "read", "verify", "diff", "extract", "demo"])
def test_every_subcommand_has_help(command: str, capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as caught:
        cli.main([command, "--help"])
    assert caught.value.code == 0 and capsys.readouterr().out.startswith(f"usage: zipsave {command}")


def test_a_command_defines_only_its_own_arguments_and_help_lists_every_command(capsys: pytest.CaptureFixture):
    # a run defines its command alone (argparse's objects for all eight cost a first run 2-3 ms)
    for command in cli.COMMANDS:
        choices = cli.build_parser(command)._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        assert list(choices) == [command]
    # help, and a usage error, still see every command
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    shown = capsys.readouterr().out
    assert all(f"    {command} " in shown for command in cli.COMMANDS)
    with pytest.raises(SystemExit):
        cli.main(["inspct", "x.zip"])
    assert (
        "(choose from 'inspect', 'verify', 'read', 'sign', 'diff', 'extract', 'list', 'demo')"
        in capsys.readouterr().err
    )


def test_help_through_the_module():
    done = run("inspect", "--help")
    assert (
        done.returncode == 0 and "--json" in done.stdout and "never calls torch.load" in " ".join(done.stdout.split())
    )


def test_no_command_prints_usage_and_fails():
    done = run()
    assert done.returncode == 2 and "usage: zipsave" in done.stderr
    assert run("--version").stdout.strip() == f"zipsave {zipsave.__version__}"


def test_bad_arguments_are_a_usage_error():
    done = run("diff", "only-one.zip")
    assert done.returncode == 2 and "the following arguments are required: b" in done.stderr


# -- inspect -----------------------------------------------------------------------------------
def test_inspect_text(archives):
    done = run("inspect", archives["a"])
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{archives['a']}: zipsave archive (format 1, zipsave {zipsave.__version__}), ")
    assert any(line.split() == ["learning_rate", "float", "json", "0.001"] for line in lines)
    assert any(line.split()[:3] == ["buffer", "numpy.ndarray", "native"] for line in lines)
    assert any(line.split()[:4] == ["policy/0.weight", "float32", "(8,", "4)"] for line in lines)
    assert any(line.split()[0] == "optim/state.0.exp_avg" for line in lines if line.strip())


def test_inspect_json(archives):
    done = run("inspect", archives["a"], "--json")
    assert done.returncode == 0
    info = json.loads(done.stdout)
    assert info["layout"] == "zipsave" and info["format_version"] == 1
    assert "arrays/0.npy" in [m["name"] for m in info["members"]]
    assert {t["name"]: t["shape"] for t in info["tensors"]}["policy/2.weight"] == [2, 8]
    buffer = next(d for d in info["data"] if d["key"] == "buffer")
    assert buffer["form"] == "native" and buffer["needs_pickle"] is False


def test_inspect_errors_are_one_line(tmp_path: Path):
    assert "no such file" in one_error_line(run("inspect", tmp_path / "missing.zip"))
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip at all")
    assert "not a zip archive" in one_error_line(run("inspect", junk))
    assert "is a directory" in one_error_line(run("inspect", tmp_path))


# -- read --------------------------------------------------------------------------------------
def test_read_prints_a_tensor_and_a_data_value(archives):
    """`zipsave read` did not exist (`invalid choice: 'read'`), though `zipsave.read` does."""
    done = run("read", archives["a"], "policy/2.bias")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines()[0] == "policy/2.bias: torch.float32 (2,)"
    assert done.stdout.splitlines()[1].startswith("tensor([")
    assert run("read", archives["a"], "learning_rate").stdout == "learning_rate: 0.001\n"


def test_read_json(archives):
    bias = zipsave.read(archives["a"], "policy/2.bias")
    out = json.loads(run("read", archives["a"], "policy/2.bias", "--json").stdout)
    assert out == {
        "address": "policy/2.bias",
        "type": "Tensor",
        "dtype": "torch.float32",
        "shape": [2],
        "values": bias.tolist(),
    }
    out = json.loads(run("read", archives["a"], "learning_rate", "--json").stdout)
    assert out == {"address": "learning_rate", "type": "float", "value": 0.001}
    out = json.loads(run("read", archives["a"], "buffer", "--json").stdout)
    assert out["type"] == "ndarray" and out["shape"] == [20_000] and len(out["values"]) == 20_000


def test_read_of_a_value_json_cannot_hold_gives_its_repr(tmp_path: Path):
    zipsave.save({"pair": {(1, 2): "a"}}, tmp_path / "m.zip")
    out = json.loads(run("read", tmp_path / "m.zip", "pair", "--json").stdout)
    assert out == {"address": "pair", "type": "dict", "repr": "{(1, 2): 'a'}"}


def test_read_of_an_unknown_address_is_one_line_naming_the_nearest(archives):
    line = one_error_line(run("read", archives["a"], "policy.2.bias"))
    assert "`policy.2.bias` names no tensor and no `data` key. Did you mean `policy/2.bias`?" in line


def test_read_of_an_untrusted_value_names_the_option_that_trusts_it(tmp_path: Path):
    # the hint named the Python call's `trusted=[...]`, which the command had no way to pass
    from ipaddress import IPv4Address  # stands for a class of your own, pickled in `data`

    zipsave.save({"host": IPv4Address("10.0.0.1")}, tmp_path / "m.zip")
    line = one_error_line(run("read", tmp_path / "m.zip", "host"))
    assert line.endswith(
        "key `host`: refusing to import untrusted global `ipaddress.IPv4Address`. To allow it, pass "
        "`--trust ipaddress.IPv4Address` (which imports it) if you trust it."
    )
    done = run("read", tmp_path / "m.zip", "host", "--trust", "ipaddress.IPv4Address")
    assert (done.returncode, done.stdout.strip()) == (0, "host: IPv4Address('10.0.0.1')")
    # a global that rebuilds code keeps its own hint: the command never suggests trusting it
    with pytest.warns(zipsave.ZipsaveWarning, match="holds code that cloudpickle stores by value"):
        zipsave.save({"schedule": lambda progress: 3e-4 * progress}, tmp_path / "code.zip")
    line = one_error_line(run("read", tmp_path / "code.zip", "schedule"))
    assert "It rebuilds code stored in the archive" in line and "--trust" not in line


def test_read_never_hands_back_an_archive_name_as_an_option_to_paste(tmp_path: Path):
    # a pickle may name any text as its global; the hint suggested `--trust os; rm -rf ~.system`
    import base64

    zipsave.save({"x": 1}, tmp_path / "plain.zip")
    for module in ("os; rm -rf ~", "evil\x1b[31mpkg"):
        pickled = b"\x80\x04\x8c" + bytes([len(module)]) + module.encode() + b"\x8c\x06system\x93)\x81."
        value = {":type:": "<class 'x'>", ":serialized:": base64.b64encode(pickled).decode()}
        with zipfile.ZipFile(tmp_path / "plain.zip") as src, zipfile.ZipFile(tmp_path / "h.zip", "w") as out:
            for name in src.namelist():
                if name != "manifest.json":
                    out.writestr(name, json.dumps({"x": value}) if name == "data" else src.read(name))
        line = one_error_line(run("read", tmp_path / "h.zip", "x"))
        assert "refusing to import untrusted global" in line and "--trust" not in line and "trusted=" not in line
        assert "No module or class is named so" in line and "\x1b" not in line
        with pytest.warns(zipsave.SkippedEntryWarning, match="No module or class is named so"):
            assert zipsave.load_archive(tmp_path / "h.zip")[0] == {}


# -- verify ------------------------------------------------------------------------------------
def test_verify_ok(archives):
    done = run("verify", archives["a"])
    assert (done.returncode, done.stdout.strip()) == (0, f"{archives['a']}: OK")
    assert json.loads(run("verify", archives["a"], "--json").stdout) == {
        "archive": str(archives["a"]),
        "ok": True,
        "problems": [],
        "notes": [],
    }


SB3_ARCHIVE = Path(__file__).parent / "data" / "sb3" / "ppo_cartpole.zip"  # written by SB3: no manifest


def test_verify_without_a_manifest_checks_the_crcs_and_says_so():
    done = run("verify", SB3_ARCHIVE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == f"{SB3_ARCHIVE}: OK"
    assert "note: archive has no manifest.json" in done.stdout
    assert "every member's bytes were checked against its zip CRC-32" in done.stdout
    strict = run("verify", SB3_ARCHIVE, "--require-manifest")
    assert strict.returncode == 1 and "archive has no manifest.json" in strict.stdout


def test_verify_without_a_manifest_still_finds_a_flipped_byte(tmp_path: Path):
    broken = tmp_path / "broken.zip"
    raw = bytearray(SB3_ARCHIVE.read_bytes())
    with zipfile.ZipFile(SB3_ARCHIVE) as archive:
        info = archive.getinfo("policy.pth")
    raw[info.header_offset + 200] ^= 0xFF
    broken.write_bytes(bytes(raw))
    done = run("verify", broken)
    assert done.returncode == 1 and "member `policy.pth`" in done.stdout


def test_verify_finds_a_flipped_byte(archives, tmp_path: Path):
    broken = tmp_path / "broken.zip"
    raw = bytearray(archives["a"].read_bytes())
    with zipfile.ZipFile(archives["a"]) as archive:
        info = archive.getinfo("policy.pth")
    raw[info.header_offset + 200] ^= 0xFF  # inside the member's data, past its local header
    broken.write_bytes(bytes(raw))
    done = run("verify", broken)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == f"{broken}: 2 problems" or "problem" in done.stdout.splitlines()[0]
    assert "member `policy.pth`" in done.stdout
    report = json.loads(run("verify", broken, "--json").stdout)
    assert report["ok"] is False and any("policy.pth" in p for p in report["problems"])


def test_verify_missing_file_is_an_error(tmp_path: Path):
    assert "no such file" in one_error_line(run("verify", tmp_path / "missing.zip"))


# -- diff --------------------------------------------------------------------------------------
def test_diff_identical(archives):
    done = run("diff", archives["a"], archives["same"])
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].startswith("identical: same data and ")
    assert json.loads(run("diff", archives["a"], archives["same"], "--json").stdout)["identical"] is True


def test_diff_changes(archives):
    done = run("diff", archives["a"], archives["b"])
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == [f"--- {archives['a']}", f"+++ {archives['b']}"]
    assert "~ data    learning_rate: 0.001 -> 0.0005" in lines
    assert "~ data    buffer: <numpy.ndarray> -> <numpy.ndarray>" in lines  # content of arrays/0.npy
    assert "+ data    new_key" in lines and "- data    gone" in lines
    assert "~ tensor  policy/2.bias: max |a-b| = 0.25" in lines
    assert "+ tensor  extra/weight" in lines and "+ tensor  extra/bias" in lines
    assert not any(line.startswith("~ tensor  policy/0.") for line in lines)


def test_diff_json(archives):
    result = json.loads(run("diff", archives["a"], archives["b"], "--json").stdout)
    assert result["identical"] is False
    assert {c["name"] for c in result["data_changed"]} == {"learning_rate", "buffer"}
    assert result["data_added"] == ["new_key"] and result["data_removed"] == ["gone"]
    bias = next(c for c in result["tensors_changed"] if c["name"] == "policy/2.bias")
    assert bias["max_abs_diff"] == pytest.approx(0.25) and bias["old"] == bias["new"] == "float32[2]"
    assert sorted(result["tensors_added"]) == ["extra/bias", "extra/weight"]


def test_diff_reports_shape_changes_and_nan(tmp_path: Path):
    a, b = tmp_path / "a.zip", tmp_path / "b.zip"
    nan = float("nan")
    zipsave.save_archive(
        a, params={"m": {"w": torch.zeros(2, 3), "n": torch.tensor([nan, 1.0]), "k": torch.tensor([nan, 1.0])}}
    )
    zipsave.save_archive(
        b, params={"m": {"w": torch.zeros(3, 3), "n": torch.tensor([nan, 1.0]), "k": torch.tensor([0.0, 1.0])}}
    )
    done = run("diff", a, b)
    assert done.returncode == 1
    assert "~ tensor  m/w: float32[2, 3] -> float32[3, 3]" in done.stdout.splitlines()
    assert "~ tensor  m/k: max |a-b| = nan" in done.stdout.splitlines()
    assert not any(line.startswith("~ tensor  m/n") for line in done.stdout.splitlines())  # NaN in the same place
    result = json.loads(run("diff", a, b, "--json").stdout)
    assert next(c for c in result["tensors_changed"] if c["name"] == "m/k")["max_abs_diff"] == "nan"


def test_diff_missing_archive_is_an_error(archives, tmp_path: Path):
    assert "no such file" in one_error_line(run("diff", archives["a"], tmp_path / "nope.zip"))


# -- extract -----------------------------------------------------------------------------------
def test_extract_writes_every_member(archives, tmp_path: Path):
    out = tmp_path / "out"
    done = run("extract", archives["a"], out)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(archives["a"]) as archive:
        names = archive.namelist()
        for name in names:
            assert (out / name).read_bytes() == archive.read(name)
    assert done.stdout.splitlines() == [str(out / name) for name in names]

    again = run("extract", archives["a"], out)
    assert "exists already" in one_error_line(again) and "--overwrite" in again.stderr
    listing = json.loads(run("extract", archives["a"], out, "--overwrite", "--json").stdout)
    assert listing["files"] == [str(out / name) for name in names]


def _zip(path: Path, *members: zipfile.ZipInfo | str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for member in members:
            archive.writestr(member, b"payload")
    return path


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("../escape.txt", "unsafe member name"),
        ("/etc/absolute.txt", "unsafe member name"),
        ("C:/drive.txt", "unsafe member name"),
        ("a//b.txt", "unsafe name"),
        ("a\\b.txt", "unsafe name"),
    ],
)
def test_extract_refuses_unsafe_names(tmp_path: Path, name: str, words: str, capsys: pytest.CaptureFixture):
    # In-process (the same `main` as the command) to keep the parametrized cases fast.
    archive = _zip(tmp_path / "evil.zip", "fine.txt", zipfile.ZipInfo(name))
    out = tmp_path / "out"
    assert cli.main(["extract", str(archive), str(out)]) == 2
    line = capsys.readouterr().err
    assert line.startswith("zipsave: error: ") and line.count("\n") == 1 and words in line
    assert not (out / "fine.txt").exists()  # refused before anything was written
    assert not (tmp_path / "escape.txt").exists()


def test_extract_refuses_symlinks(tmp_path: Path):
    link = zipfile.ZipInfo("link")
    link.create_system = 3
    link.external_attr = 0o120777 << 16
    archive = _zip(tmp_path / "link.zip", link)
    assert "member `link`: is a symbolic link; refusing to extract it." in one_error_line(
        run("extract", archive, tmp_path / "out")
    )


def test_extract_never_writes_through_a_link_in_the_destination(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "sub").symlink_to(outside)
    archive = _zip(tmp_path / "a.zip", "sub/file.txt")
    assert "outside the destination" in one_error_line(run("extract", archive, out))
    assert list(outside.iterdir()) == []


def test_extract_into_a_file_says_it_is_not_a_folder(archives, tmp_path: Path):
    """It named the first member and a FileExistsError."""
    (tmp_path / "taken").write_text("x")
    line = one_error_line(run("extract", archives["a"], tmp_path / "taken"))
    assert f"cannot be extracted into `{tmp_path / 'taken'}`: it is a file, not a folder." in line
    assert "member" not in line and (tmp_path / "taken").read_text() == "x"


def test_extract_warns_about_an_edited_member(archives, tmp_path: Path):
    edited = tmp_path / "edited.zip"
    with zipfile.ZipFile(archives["a"]) as src, zipfile.ZipFile(edited, "w") as dst:
        for item in src.infolist():
            payload = src.read(item)
            dst.writestr(item, payload.replace(b"0.001", b"0.002") if item.filename == "data" else payload)
    done = run("extract", edited, tmp_path / "out")
    assert done.returncode == 0
    warning = done.stderr.splitlines()
    assert len(warning) == 1 and warning[0].startswith("zipsave: warning: ") and "member `data`" in warning[0]
    assert b"0.002" in (tmp_path / "out" / "data").read_bytes()


# -- in-process: the last-resort handler -----------------------------------------------------
def test_unexpected_exceptions_print_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    def boom(args):
        raise RuntimeError("something\nodd")

    monkeypatch.setitem(cli._RUN, "inspect", boom)
    assert cli.main(["inspect", "x.zip"]) == 2
    err = capsys.readouterr().err
    assert err == "zipsave: error: unexpected RuntimeError: something odd (please report this as a zipsave bug)\n"


def test_diff_of_one_sb3_model_saved_by_sb3_and_by_zipsave_is_same_values(tmp_path: Path):
    sb3 = pytest.importorskip("stable_baselines3")
    model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, policy_kwargs={"net_arch": [8]}, seed=0)
    model.save(tmp_path / "sb3.zip")
    zipsave.save(model, tmp_path / "zs.zip")
    done = run("diff", tmp_path / "sb3.zip", tmp_path / "zs.zip")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "= data    policy_class: same value, stored differently" in done.stdout
    assert "~ data" not in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("same values: ")
    byte_level = run("diff", tmp_path / "sb3.zip", tmp_path / "zs.zip", "--bytes")
    assert byte_level.returncode == 1 and "~ data    policy_class" in byte_level.stdout
    model.learning_rate = 1e-3  # a real change is still one
    zipsave.save(model, tmp_path / "zs2.zip")
    changed = run("diff", tmp_path / "sb3.zip", tmp_path / "zs2.zip")
    assert changed.returncode == 1 and "~ data    learning_rate: 0.0003 -> 0.001" in changed.stdout


class _NumpyEq:
    """Compares like gymnasium 0.29's spaces: ``==`` gives a numpy bool, state holds a generator."""

    def __init__(self, n: int) -> None:
        self.n = np.int64(n)
        self.rng = np.random.default_rng()

    def __eq__(self, other: object) -> Any:
        return isinstance(other, _NumpyEq) and self.n == other.n


def test_same_value_takes_a_numpy_bool_from_eq():
    from zipsave._tools._values import same_value

    assert same_value(_NumpyEq(2), _NumpyEq(2))
    assert not same_value(_NumpyEq(2), _NumpyEq(3))
