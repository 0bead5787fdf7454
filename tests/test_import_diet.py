"""A first call imports only what it uses: the modules a first save, load, restore and inspect
of a plain torch archive import in a fresh interpreter stay inside a known set, so the import
diet of issue 37 does not rot. A module that joins the set must be one the call needs; the
set is the place to say so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# zipsave's own modules that a first restore, load, load_archive or inspect may import.
LOAD_MODULES = frozenset(
    {
        "zipsave._lazy",
        "zipsave._version",
        "zipsave.exceptions",
        "zipsave._api",
        "zipsave._api._load",
        "zipsave._archive",
        "zipsave._archive._crc",
        "zipsave._archive._destination",
        "zipsave._archive._files",
        "zipsave._archive._handlers",
        "zipsave._archive._limits",
        "zipsave._archive._reader",
        "zipsave._archive._source",
        "zipsave._archive._views",
        "zipsave._archive._zipfmt",
        "zipsave._bounds",
        "zipsave._booleans",  # a bool array or tensor is checked where it is built
        "zipsave._items",  # so is every array's items
        "zipsave._codec",
        "zipsave._codec._arrays",
        "zipsave._codec._decode",
        "zipsave._codec._pickling",
        "zipsave._core",
        "zipsave._core._address",
        "zipsave._core._apply",
        "zipsave._core._build",
        "zipsave._core._classes",
        "zipsave._core._collect",
        "zipsave._core._component",
        "zipsave._core._folders",
        "zipsave._core._inplace",
        "zipsave._core._modes",
        "zipsave._core._optim_state",  # a saved optimizer state is checked against its parameters
        "zipsave._core._options",
        "zipsave._core._parts",
        "zipsave._core._patterns",
        "zipsave._core._report",
        "zipsave._core._app_state",
        "zipsave._core._members",
        "zipsave._core._session",
        "zipsave._format",
        "zipsave._json",
        "zipsave._registry",
        "zipsave._distributions",  # the registry's one listing of sys.path (and system info's)
        "zipsave._system_info",
        "zipsave._tensors",
        "zipsave._tensors._arena",
        "zipsave._tensors._prefault",
        "zipsave._tensors._pth_meta",
        "zipsave._tensors._pth_read",
        "zipsave._tensors._pth_records",
        "zipsave._tensors._device",
        "zipsave._tensors._tree",
        "zipsave._tools",
        "zipsave._tools._check",
        "zipsave._tools._inspect",
        "zipsave._tools._known",
        "zipsave._tools._records",
        "zipsave._tools._render",
        "zipsave._trust",
        "zipsave._trust._allowlist",
        "zipsave._trust._audit",
        "zipsave._trust._names",
        "zipsave._trust._nesting",
        "zipsave._trust._policy",
        "zipsave._trust._bounded",
        "zipsave._trust._sealed",
        "zipsave._trust._substitutes",
        # the strict zip reader, the one check of every value returned, the one printer
        "zipsave._archive._structure",
        "zipsave._invariants",
        "zipsave._tensors._invariants",
        "zipsave._printable",
        "zipsave._record",
        "zipsave._calls",
        "zipsave._tensors._pth_refs",
        "zipsave._tensors._pth_vocab",
        "zipsave._tensors._pth_dtypes",  # torch's names as fixed tables: the reader needs no torch
        "zipsave._trust._torch_calls",
        # the sign extra's package only: its modules load when `trust=` is given
        "zipsave._sign",
    }
)
# Other modules (not imported by ``import torch``) that such a call may import: orjson for the
# JSON members (it imports zoneinfo), ISA-L's CRC-32, and the codec of zip names.
OTHER_MODULES = ("orjson", "zoneinfo", "_zoneinfo", "isal", "encodings.")
# What none of them may import: the unpickler and the space codec (only for values that need
# them), the integrations, gymnasium, the HTML and number modules of rare values, the
# background saver, and what ``ctypes.util`` and ``importlib.metadata``'s scan would bring.
NEVER = (
    "zipsave._trust._unpickler",
    "zipsave._codec._spaces",
    "zipsave._codec._space_decode",
    "zipsave.sb3",
    "zipsave.rllib",
    "zipsave.dcp",
    "zipsave._api._background",
    "zipsave._tools._diff",
    "gymnasium",
    "stable_baselines3",
    "cloudpickle",
    "html",
    "decimal",
    "fractions",
    "numpy.random",
    "ctypes.util",
    "sysconfig",
    "model_signing",
    "sigstore",
    "OpenSSL",
)
# What a plain load (no `trust=`, `mmap=`, URL, `progress=` or device target, a member zipsave's
# own reader reads) never imports either: the sign extra's modules, the torch.load fallback, the
# mmap and staging readers, fsspec transfers and the progress bar; no exclude globs without
# `exclude=`.
NEVER_ON_LOAD = (
    "zipsave._sign",
    "zipsave._tensors._pth_fallback",
    "zipsave._tensors._pth_mmap",
    "zipsave._tensors._staging",
    "zipsave._tensors._pth_write",  # saving; the device rule a load needs is `_tensors._device`
    "zipsave._archive._remote",
    "zipsave._archive._progress",
    "zipsave._optional",
    "zipsave._core._patterns",
)

# What reading an app-state archive (no ``init.json``, nothing to construct) never imports:
# the modules that build objects or restore into live ones, and the readers of values the
# archive does not hold (arrays, pickles) or of a report nobody asked for (system info).
NEVER_ON_PLAIN_READ = (
    "zipsave._core._build",
    "zipsave._core._apply",
    "zipsave._core._address",
    "zipsave._core._inplace",
    "zipsave._core._classes",
    "zipsave._core._component",
    "zipsave._core._modes",
    "zipsave._core._app_state",
    "zipsave._core._collect",
    "zipsave._codec._arrays",
    "zipsave._codec._numeric",  # fractions, decimals, random generators: none in a plain archive
    "zipsave._codec._pickling",
    "zipsave._system_info",
    "zipsave._trust._torch_calls",
    "zipsave._trust._policy",  # no pickled value, no import path: the default policy is not built
    "zipsave._trust._allowlist",
    "zipsave._registry",  # no handler is asked about a folder saved from a dict
    "zipsave._distributions",  # so no entry point is listed either
    "zipsave._codec._decode",  # `data` holds no list or object to decode: numbers decode to themselves
    "zipsave._items",
    "zipsave._booleans",
)
# What inspecting an archive that holds no pickled value, without ``verify=True``, never
# imports: the byte check, the pickle audit, the unpickler's stand-ins, legacy torch calls and
# the trust policy.
NEVER_ON_INSPECT = (
    "zipsave._tensors._device",  # inspect builds no tensor: no device, no torch object
    "zipsave._tools._check",
    "zipsave._trust._audit",
    "zipsave._trust._substitutes",
    "zipsave._trust._torch_calls",
    "zipsave._trust._policy",  # asked only when a data entry names a global
    "zipsave._trust._allowlist",
    "zipsave._registry",  # the folder was saved from a dict: no integration is involved
)
# What restoring an app state in place never imports: constructing objects and their modes.
NEVER_ON_RESTORE = (
    "zipsave._core._classes",
    "zipsave._core._component",
    "zipsave._core._modes",
    "zipsave._core._address",  # names are resolved only on objects, not in an app-state dict
    "zipsave._registry",  # no handler is asked about a dict or about torch's own objects
    "zipsave._distributions",
    "zipsave._system_info",
    "zipsave._trust._torch_calls",
    "zipsave._trust._policy",
    "zipsave._trust._allowlist",
)

# What a first plain save (a dict of a module, an optimizer and numbers; no `background=`,
# `progress=`, `sign=` or component) never imports: the background saver and its progress
# bar, the helpers of values JSON does not hold as they are (arrays, pickles, spaces, tensors
# in `data`), the pickle audit, the glob rules, train/eval modes and the sign extra.
NEVER_ON_PLAIN_SAVE = (
    "zipsave._sign",
    "zipsave._api._background",
    "zipsave._archive._progress",
    "zipsave._optional",
    "zipsave._codec._arrays",
    "zipsave._codec._pickling",
    "zipsave._codec._space_kinds",
    "zipsave._invariants",
    "zipsave._json",  # the reader of JSON and its bounds: a save writes with `_json_write`
    "zipsave._bounds",
    "zipsave._trust",
    "zipsave._core._modes",
    "zipsave._core._address",
    "zipsave._core._patterns",
    "zipsave._registry",  # a dict is app state: no handler is asked to claim it or its torch objects
)

_SCRIPT = r"""
import json, sys, torch
model = torch.nn.Linear(3, 3)
optimizer = torch.optim.Adam(model.parameters())
model(torch.ones(1, 3)).sum().backward()
optimizer.step()
path, verb = sys.argv[1], sys.argv[2]
before = set(sys.modules)
import zipsave
if verb == "save":
    zipsave.save({"model": model, "optimizer": optimizer}, path)
elif verb == "save_values":
    zipsave.save({"model": model, "optimizer": optimizer, "step": 1, "lr": 3e-4, "name": "run"}, path)
elif verb == "restore":
    zipsave.restore({"model": model, "optimizer": optimizer}, path)
else:
    getattr(zipsave, verb)(path)
print(json.dumps(sorted(set(sys.modules) - before)))
print(json.dumps(getattr(sys.modules.get("zipsave._registry"), "_entry_points_listed", False)))
"""


def _first_call(path: str, verb: str, *, listed: list[bool] | None = None) -> list[str]:
    """The modules a first ``verb`` imported; ``listed`` gets whether it listed handler entry points."""
    out = subprocess.run([sys.executable, "-c", _SCRIPT, path, verb], capture_output=True, text=True, check=True)
    *_, modules, scanned = out.stdout.splitlines()
    if listed is not None:
        listed.append(json.loads(scanned))
    return json.loads(modules)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("diet") / "plain.zip")
    _first_call(path, "save")
    return path


@pytest.mark.parametrize("verb", ["restore", "load", "load_archive", "inspect"])
def test_a_first_load_imports_only_what_it_uses(archive, verb):
    imported = _first_call(archive, verb)
    ours = {m for m in imported if m.startswith("zipsave.")}
    assert sorted(ours - LOAD_MODULES) == []
    others = [m for m in imported if not m.startswith("zipsave") and not m.startswith(OTHER_MODULES)]
    assert others == []
    assert [m for m in imported if m.startswith(NEVER + NEVER_ON_LOAD)] == []
    assert "zipsave._tensors._pth_read" in ours or verb == "inspect"  # the call did read tensors
    never = {
        "load": NEVER_ON_PLAIN_READ,
        "load_archive": NEVER_ON_PLAIN_READ,
        "restore": NEVER_ON_RESTORE,
        "inspect": NEVER_ON_INSPECT,
    }
    assert sorted(ours.intersection(never.get(verb, ()))) == []
    assert "orjson" not in imported  # small JSON members parse, and inspect writes, with Python's json
    assert [m for m in imported if m.split(".")[0] == "isal"] == []  # zlib checksums a small archive
    # small members are read whole into fresh memory: no arena, no prefaulting thread
    assert sorted(ours.intersection({"zipsave._tensors._arena", "zipsave._tensors._prefault"})) == []
    assert "encodings.cp437" not in imported  # names are ASCII or flagged UTF-8


@pytest.mark.parametrize("verb", ["load", "load_archive"])
def test_a_first_load_of_numbers_and_strings_imports_no_value_decoder(tmp_path, verb):
    # `data` of {"step": 1, "lr": 3e-4, "name": "run"}: each JSON scalar is its own value.
    path = str(tmp_path / "values.zip")
    _first_call(path, "save_values")
    imported = _first_call(path, verb)
    assert "zipsave._api._load" in imported  # the call did load
    assert sorted(set(imported).intersection(NEVER_ON_PLAIN_READ)) == []


@pytest.mark.parametrize("verb", ["restore", "load", "load_archive", "inspect"])
def test_a_first_call_on_app_state_lists_no_handler_entry_points(archive, verb):
    # The manifest lists the folder as saved from a dict, and `restore` fills a dict: no handler
    # is asked about either, so the 2-3 ms of listing every distribution's entry points is not paid.
    listed: list[bool] = []
    _first_call(archive, verb, listed=listed)
    assert listed == [False]


def test_a_first_save_imports_no_space_codec_gymnasium_or_unpickler(tmp_path):
    imported = _first_call(str(tmp_path / "fresh.zip"), "save")
    assert "zipsave._archive._writer" in imported
    assert [m for m in imported if m.startswith(NEVER)] == []


@pytest.mark.parametrize("verb", ["save", "save_values"])
def test_a_first_plain_save_imports_no_background_saver_progress_bar_or_rare_value_helpers(tmp_path, verb):
    imported = _first_call(str(tmp_path / "plain.zip"), verb)
    assert "zipsave._tensors._pth_write" in imported  # the call did write tensors
    assert (
        sorted(
            m for m in imported if m in NEVER_ON_PLAIN_SAVE or m.startswith(tuple(n + "." for n in NEVER_ON_PLAIN_SAVE))
        )
        == []
    )
    # `data`, `init.json` and the manifest are small: written by `_json_write.pretty_json`, and orjson
    # (4-5 ms with the zoneinfo and sysconfig it imports) is not imported
    assert sorted(m for m in imported if m.startswith(("orjson", "zoneinfo", "sysconfig"))) == []
    assert [m for m in imported if m.split(".")[0] == "isal"] == []  # zlib checksums a small archive


# What the command imports for ``zipsave inspect``, ``read``, ``verify`` and ``diff`` of
# archives, beyond what the same call from Python imports: its own modules. Never the demo
# (gymnasium and a trained agent), the checkpoint manager (and with it the whole save side) or
# the sign extra's modules without a signer option.
CLI_MODULES = frozenset({"zipsave.cli", "zipsave._cli_parser", "zipsave._cli_sign", "zipsave._cli_hints"})
NEVER_ON_CLI = (
    "zipsave._demo",
    "zipsave._manager",
    "zipsave._api._save",
    "zipsave._core._write",
    "zipsave._archive._writer",
    "zipsave._sign.",
    "gymnasium",
)

_CLI_SCRIPT = r"""
import contextlib, io, json, sys, torch
args = json.loads(sys.argv[1])
before = set(sys.modules)
import zipsave.cli
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = zipsave.cli.main(args)
print(json.dumps({"code": code, "out": out.getvalue(), "imported": sorted(set(sys.modules) - before)}))
"""


def _command(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CLI_SCRIPT, json.dumps(args)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "args",
    [("inspect",), ("verify",), ("read", "model/weight"), ("diff", "SELF")],
    ids=lambda a: " ".join(a),
)
def test_the_command_imports_for_an_archive_what_the_call_does(archive, args):
    command = [args[0], archive, *("" if a == "SELF" else a for a in args[1:])]
    done = _command(*[a if a else archive for a in command])
    assert done["code"] == 0, done["out"]
    assert done["out"].strip()  # it did report on the archive
    imported = done["imported"]
    ours = {m for m in imported if m.startswith("zipsave.")}
    allowed = LOAD_MODULES | CLI_MODULES | {"zipsave._tools._read", "zipsave._tools._verify", "zipsave._tools._diff"}
    allowed |= {
        "zipsave._tools._diff_records",
        "zipsave._tools._values",
        "zipsave._tools._shown",
        "zipsave._tensors._npy",
        "zipsave._archive._crc_pool",  # `read` imports `_npy`, and with it the mapped members' check
    }
    assert sorted(ours - allowed) == []
    assert [m for m in imported if m.startswith(NEVER_ON_CLI)] == []


def test_the_command_still_finds_checkpoint_directories(tmp_path):
    done = _command("list", str(tmp_path))  # not a manager's directory: an error, said in one line
    assert done["code"] == 2
    script = (
        "import torch, zipsave\n"
        "m = zipsave.CheckpointManager(__import__('sys').argv[1])\n"
        "m.save(1, {'w': torch.ones(2)})\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "run")], check=True)
    listed = _command("list", str(tmp_path / "run"))
    assert listed["code"] == 0 and "1 checkpoint" in listed["out"]
    refused = subprocess.run(
        [sys.executable, "-m", "zipsave", "inspect", str(tmp_path / "run")], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "checkpoint directory of a CheckpointManager" in refused.stderr
