"""What new users put in a ``Saveable`` and do to its archive: values of many kinds, RNG
states, LR schedulers, user classes (refused by default with a fix named), and archives that
were re-zipped, hand-edited or lost a member, through the API and the CLI."""

from __future__ import annotations

import dataclasses
import decimal
import fractions
import json
import random
import re
import shutil
import subprocess
import sys
import typing
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import torch
from gymnasium import spaces

import zipsave
from zipsave import cli
from zipsave._codec import Decoder, Encoder
from zipsave._tools import diff, verify
from zipsave._trust import TrustPolicy

HERE = __name__


# -- user classes, importable so a `trusted=` entry can name them --------------------------
@dataclasses.dataclass
class Inner:
    a: int = 1
    b: list = dataclasses.field(default_factory=lambda: [1, 2])


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: float = 0.5
    inner: Inner = dataclasses.field(default_factory=Inner)


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a, self.b = 1, (2, 3)

    def __eq__(self, other: object) -> bool:
        return type(other) is Slotted and (other.a, other.b) == (self.a, self.b)


class WithState:
    def __init__(self) -> None:
        self.x, self.cache = 3, object()

    def __getstate__(self) -> dict:
        return {"x": self.x}

    def __setstate__(self, state: dict) -> None:
        self.x, self.cache = state["x"], None

    def __eq__(self, other: object) -> bool:
        return type(other) is WithState and other.x == self.x


class Pair(typing.NamedTuple):
    a: int
    b: str = "x"


class Holder(zipsave.Saveable):
    def __init__(self, tag: str = "t") -> None:
        self.tag = tag


def _seeded_torch() -> torch.Generator:
    gen = torch.Generator().manual_seed(3)
    torch.rand(4, generator=gen)
    return gen


def _seeded_random() -> random.Random:
    rng = random.Random(4)
    rng.gauss(0, 1)  # gauss_next is part of the state
    return rng


def _state(value: Any) -> Any:
    """What two values must share to be equal, for kinds that have no ``==``."""
    if isinstance(value, torch.Generator):
        return (str(value.device), value.get_state().tolist())
    if isinstance(value, random.Random):
        return value.getstate()
    if isinstance(value, np.generic):
        return (value.dtype, value.tobytes())
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _save_load(tmp_path: Path, value: Any, **load_kwargs: Any) -> Any:
    holder = Holder()
    holder.v = value
    holder.save(tmp_path / "m.zip")
    return getattr(Holder.load(tmp_path / "m.zip", **load_kwargs), "v", "<missing>")


# -- values that load with no trust at all ---------------------------------------------------
NATIVE = {
    "fraction": fractions.Fraction(1, 3),
    "fraction-huge": fractions.Fraction(-(10**40), 7),
    "decimal": decimal.Decimal("1.10"),
    "decimal-negative-zero": decimal.Decimal("-0"),
    "decimal-infinity": decimal.Decimal("-Infinity"),
    "decimal-exponent": decimal.Decimal("9.99E+39455"),  # the largest exponents zipsave reads
    "decimal-negative-exponent": decimal.Decimal("-1E-39456"),
    "random": _seeded_random(),
    "torch-generator": _seeded_torch(),
    "datetime64-ns": np.datetime64("2020-01-01T00:00:00.123456789"),
    "datetime64-nat-ns": np.datetime64("NaT", "ns"),
    "datetime64-ps": np.datetime64(5, "ps"),
    "timedelta64-ns": np.timedelta64(-7, "ns"),
    "in-a-dict": {"when": np.datetime64(1, "ns"), "rate": fractions.Fraction(2, 3), 7: decimal.Decimal("2.5")},
}


@pytest.mark.parametrize("value", NATIVE.values(), ids=NATIVE.keys())
def test_values_round_trip_without_trust(tmp_path, value):
    back = _save_load(tmp_path, value)
    assert type(back) is type(value)
    if isinstance(value, dict):
        assert {k: _state(v) for k, v in back.items()} == {k: _state(v) for k, v in value.items()}
        assert [type(v) for v in back.values()] == [type(v) for v in value.values()]
    else:
        assert _state(back) == _state(value)
    entry = next(e for e in zipsave.inspect(tmp_path / "m.zip").data if e.key == "v")
    assert entry.form == "native"


def test_restored_generators_draw_the_same_numbers(tmp_path):
    holder = Holder()
    holder.torch_rng, holder.py_rng = _seeded_torch(), _seeded_random()
    holder.save(tmp_path / "m.zip")
    back = Holder.load(tmp_path / "m.zip")
    assert torch.equal(torch.rand(5, generator=back.torch_rng), torch.rand(5, generator=holder.torch_rng))
    assert [back.py_rng.gauss(0, 1) for _ in range(3)] == [holder.py_rng.gauss(0, 1) for _ in range(3)]


def test_zipsave_0_2_integer_form_of_a_datetime64_ns_still_loads():
    body = {":zipsave:": {"kind": "numpy_scalar", "dtype": "<M8[ns]", "value": 1577836800123456789}}
    back = Decoder(TrustPolicy()).decode_entry("when", body)
    assert back == np.datetime64("2020-01-01T00:00:00.123456789") and back.dtype == np.dtype("M8[ns]")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "fraction", "numerator": 1, "denominator": 0}, "a non-zero integer `denominator`"),
        ({"kind": "fraction", "numerator": 1.5, "denominator": 2}, "expected an integer `numerator`"),
        ({"kind": "decimal", "value": "1.2.3"}, "expected a decimal literal, found '1.2.3'."),
        (
            {
                "kind": "random",
                "version": 3,
                "state": {"kind": "ndarray", "dtype": "<i8", "shape": [1], "values": [2**40]},
                "gauss_next": None,
            },
            "expected the random.Random `state` to be a 1-d uint32 array.",
        ),
        (
            {
                "kind": "random",
                "version": 3,
                "state": {"kind": "ndarray", "dtype": "<u4", "shape": [2], "values": [1, 2]},
                "gauss_next": None,
            },
            "invalid random.Random state",
        ),
        (
            {
                "kind": "random",
                "version": 3,
                "state": {"kind": "ndarray", "dtype": "<u4", "shape": [0], "values": []},
                "gauss_next": "x",
            },
            "expected `gauss_next` to be a float or null, found str.",
        ),
        (
            {
                "kind": "torch_generator",
                "device": "cpu",
                "state": {"kind": "ndarray", "dtype": "<u1", "shape": [2], "values": [1, 2]},
            },
            "cannot restore the torch.Generator",
        ),
        ({"kind": "numpy_scalar", "dtype": "<M8[ns]", "value": 1.5}, "to be an integer count, found float."),
    ],
    ids=[
        "zero-denominator",
        "float-numerator",
        "bad-decimal",
        "wide-word",
        "short-state",
        "bad-gauss",
        "short-generator",
        "float-ns",
    ],
)
def test_malformed_new_forms_are_decode_errors(body, message):
    with pytest.raises(zipsave.DecodeError, match=re.escape(message)):
        Decoder(TrustPolicy()).decode_entry("k", {":zipsave:": body})


# -- user classes: refused by default, with the fix named -------------------------------------
USER = {
    "dataclass": Inner(),
    "frozen-nested-dataclass": Frozen(),
    "slots": Slotted(),
    "getstate": WithState(),
    "typing-namedtuple": Pair(1),
}


@pytest.mark.parametrize("value", USER.values(), ids=USER.keys())
def test_user_classes_are_skipped_with_the_fix_named_then_load_when_trusted(tmp_path, value):
    name = f"{HERE}.{type(value).__qualname__}"
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("skipped key `v` of member `data`")) as caught:
        assert _save_load(tmp_path, value) == "<missing>"
    assert f"pass `trusted=['{name}']`" in str(caught[0].message)
    back = _save_load(tmp_path, value, trusted=[f"{HERE}."])
    assert type(back) is type(value) and back == value


# -- torch objects a user keeps on the instance -----------------------------------------------
class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.norm = torch.nn.BatchNorm1d(2)
        self.register_buffer("count", torch.zeros(2))
        self.register_buffer("scratch", torch.ones(2), persistent=False)


SCHEDULERS = {
    "step": lambda opt: torch.optim.lr_scheduler.StepLR(opt, 2, 0.5),
    "cosine": lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10),
    "one-cycle": lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[0.1, 0.2], total_steps=20),
    "sequential": lambda opt: torch.optim.lr_scheduler.SequentialLR(
        opt, [torch.optim.lr_scheduler.LinearLR(opt), torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)], milestones=[2]
    ),
    "plateau": lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt),
}


class Trainer(zipsave.Saveable):
    def __init__(self, schedule: str = "step") -> None:
        torch.manual_seed(0)
        self.net = Net()
        self.opt = torch.optim.AdamW(
            [
                {"params": self.net.lin.parameters(), "lr": 1e-3},
                {"params": self.net.norm.parameters(), "lr": 1e-2, "weight_decay": 0.0},
            ]
        )
        self.sched = SCHEDULERS[schedule](self.opt)

    def train(self, steps: int) -> Trainer:
        for _ in range(steps):
            loss = self.net.norm(self.net.lin(torch.randn(4, 3))).sum()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.sched.step(1.0) if isinstance(
                self.sched, torch.optim.lr_scheduler.ReduceLROnPlateau
            ) else self.sched.step()
            self.net.count += 1
        return self


@pytest.mark.parametrize("schedule", SCHEDULERS, ids=SCHEDULERS.keys())
def test_param_groups_schedulers_and_buffers_round_trip(tmp_path, schedule):
    trainer = Trainer(schedule).train(3)
    trainer.save(tmp_path / "t.zip")
    back = Trainer.load(tmp_path / "t.zip")
    assert back.net.state_dict().keys() == trainer.net.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(back.net.state_dict().values(), trainer.net.state_dict().values()))
    assert back.net.count.tolist() == [3.0, 3.0]
    assert [g["lr"] for g in back.opt.param_groups] == [g["lr"] for g in trainer.opt.param_groups]
    assert str(back.sched.state_dict()) == str(trainer.sched.state_dict())
    assert getattr(back.sched, "optimizer", back.opt) is back.opt
    torch.manual_seed(1)
    back.train(2)
    torch.manual_seed(1)
    trainer.train(2)
    assert torch.equal(back.net.lin.weight, trainer.net.lin.weight)


def test_loose_tensors_keep_dtype_layout_and_shared_storage(tmp_path):
    holder = Holder()
    holder.base = torch.arange(12.0)
    holder.view = holder.base[2:6]
    holder.loose = {
        "bf16": torch.ones(3, dtype=torch.bfloat16),
        3: torch.tensor([1 + 2j]),
        "t": torch.arange(6).reshape(2, 3).t(),
    }
    holder.sparse = torch.eye(3).to_sparse()
    holder.meta = (torch.float16, torch.device("cpu"), torch.Size([2, 3]))
    holder.save(tmp_path / "m.zip")
    back = Holder.load(tmp_path / "m.zip")
    for key, value in holder.loose.items():
        assert back.loose[key].dtype == value.dtype and torch.equal(back.loose[key], value)
    assert back.sparse.layout == torch.sparse_coo and torch.equal(back.sparse.to_dense(), torch.eye(3))
    assert back.meta == holder.meta and type(back.meta[2]) is torch.Size
    back.base[3] = 100.0
    assert back.view[1] == 100.0  # still a view of `base`


SPACES = {
    "box-inf": spaces.Box(-np.inf, np.inf, (2, 3), np.float32),
    "discrete-start": spaces.Discrete(4, start=-1),
    "multi-discrete-nd-start": spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[1, 1], [0, 0]])),
    "text-non-ascii": spaces.Text(8, charset="αβγ"),
    "sequence-of-dict": spaces.Sequence(spaces.Dict({"a": spaces.Discrete(2)})),
}


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_spaces_on_an_instance_round_trip(tmp_path, space):
    back = _save_load(tmp_path, space)
    assert type(back) is type(space) and back == space


# -- saving: what cannot be written is said plainly ------------------------------------------
def test_a_reference_cycle_is_named_with_its_path(tmp_path):
    loop: dict = {"a": {"b": [1]}}
    loop["a"]["b"].append(loop)
    holder = Holder()
    holder.graph = loop
    with pytest.raises(
        zipsave.EncodeError,
        match=re.escape("key `graph`: holds a reference cycle (a container inside itself) at `a.b.1`"),
    ):
        holder.save(tmp_path / "m.zip")
    assert not (tmp_path / "m.zip").exists()


def test_json_too_deep_to_write_is_an_encode_error_naming_the_key(tmp_path):
    deep: list = []
    for _ in range(300):
        deep = [deep]
    holder = Holder()
    holder.deep = deep
    with pytest.raises(
        zipsave.EncodeError, match=re.escape("member `data`, key `deep`: is nested too deeply to write as JSON")
    ) as err:
        holder.save(tmp_path / "m.zip")
    assert "exclude=['deep']" in str(err.value)


def test_a_missing_archive_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape("no such file (also tried with a `.zip` suffix).")) as err:
        zipsave.load(tmp_path / "nope")
    assert isinstance(err.value, zipsave.ArchiveNotFoundError) and err.value.errno == 2


# -- archives as people handle them -----------------------------------------------------------
class Model(zipsave.Saveable):
    def __init__(self, learning_rate: float = 0.1) -> None:
        torch.manual_seed(0)
        self.learning_rate = learning_rate
        self.gamma = 0.99
        self.net = torch.nn.Linear(2, 2)
        self.table = np.arange(20000.0)  # large enough for an arrays/ member


@pytest.fixture
def saved(tmp_path) -> Path:
    path = tmp_path / "model.zip"
    Model().save(path)
    return path


def _rezip(src: Path, out: Path, *, folders: bool = False, edit: Any = None, drop: str | None = None) -> Path:
    """Unpack-and-repack as a zip tool does: deflate, optional folder entries, one member edited or dropped."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            if name == drop:
                continue
            if folders and "/" in name:
                zout.writestr(name.rsplit("/", 1)[0] + "/", b"")
            raw = zin.read(name)
            zout.writestr(name, edit(raw) if edit and name == "data" else raw)
    return out


def test_rezipped_with_folder_entries_loads_verifies_and_inspects_clean(saved, tmp_path, recwarn):
    out = _rezip(saved, tmp_path / "again.zip", folders=True)
    assert "arrays/" in zipfile.ZipFile(out).namelist()
    back = Model.load(out)
    assert np.array_equal(back.table, np.arange(20000.0))
    assert not recwarn.list
    notes: list[str] = []
    assert verify(out, notes=notes) == []
    assert notes == ["folder entry `arrays/` (added by a zip tool) holds nothing; ignored."]
    assert zipsave.inspect(out).notes == ()


def test_zip_command_line_tool_round_trip(saved, tmp_path):
    if shutil.which("zip") is None:
        pytest.skip("the `zip` command is not installed")
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(saved).extractall(unpacked)
    subprocess.run(["zip", "-qr", str(tmp_path / "cli.zip"), "."], cwd=unpacked, check=True)
    assert verify(tmp_path / "cli.zip") == []
    assert Model.load(tmp_path / "cli.zip").gamma == 0.99


def _edit_gamma(raw: bytes) -> bytes:
    data = json.loads(raw)
    data["gamma"] = 0.5
    return json.dumps(data, indent=4).encode()


def test_hand_edited_data_loads_the_edit_with_a_warning(saved, tmp_path):
    edited = _rezip(saved, tmp_path / "edited.zip", edit=_edit_gamma)
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("member `data` differs from manifest.json")):
        assert Model.load(edited).gamma == 0.5


def test_diff_shows_a_hand_edit_with_a_note(saved, tmp_path, capsys):
    edited = _rezip(saved, tmp_path / "edited.zip", edit=_edit_gamma)
    result = diff(saved, edited)
    assert [(c.name, c.old, c.new) for c in result.data_changed] == [("gamma", "0.99", "0.5")]
    assert len(result.notes) == 1 and "member `data`: differs from manifest.json" in result.notes[0]
    assert result.notes[0].endswith("It was edited after saving.")
    assert cli.main(["diff", str(saved), str(edited)]) == 1
    out = capsys.readouterr().out
    assert "~ data    gamma: 0.99 -> 0.5" in out and "  note: archive `" in out


def test_a_deleted_array_member_is_named_once(saved, tmp_path):
    broken = _rezip(saved, tmp_path / "broken.zip", drop="arrays/0.npy")
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("`arrays/0.npy` is listed in manifest.json but missing")):
        with pytest.raises(zipsave.IntegrityError) as err:
            Model.load(broken)
    message = str(err.value)
    assert "member `arrays/0.npy`: is missing from the archive (removed or renamed after saving?)." in message
    assert "Zip directory" not in message and "exclude=['table']" in message


def test_a_deleted_state_dict_member_is_named(saved, tmp_path):
    broken = _rezip(saved, tmp_path / "broken.zip", drop="net.pth")
    with pytest.warns(
        zipsave.ZipsaveWarning, match=re.escape("member `net.pth` is listed in manifest.json but missing")
    ):
        with pytest.raises(
            zipsave.ParameterMismatchError, match=re.escape("manifest.json lists ['net'] too, missing from the archive")
        ):
            Model.load(broken)


@pytest.mark.parametrize(
    "name", ["model", "dir with space/mödel 1.zip", "model.bin"], ids=["no-suffix", "non-ascii", "other-suffix"]
)
def test_paths_people_use(saved, tmp_path, name):
    target = tmp_path / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(saved, target)
    assert Model.load(target).gamma == 0.99


def test_saving_to_a_path_whose_folder_is_missing_creates_it(tmp_path):
    Model().save(tmp_path / "new" / "folder" / "m.zip")
    assert Model.load(tmp_path / "new" / "folder" / "m.zip").gamma == 0.99


def test_saving_over_an_open_archive_leaves_the_reader_intact(saved):
    with zipfile.ZipFile(saved) as old:
        model = Model()
        model.gamma = 0.5
        model.save(saved)
        assert json.loads(old.read("data"))["gamma"] == 0.99  # the open file is the old one
    assert Model.load(saved).gamma == 0.5


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not a zip archive, or truncated"),
        (b"hello", "not a zip archive, or truncated"),
        (None, "is a directory, not a zip archive."),
    ],
    ids=["empty", "text", "directory"],
)
def test_not_an_archive(tmp_path, content, message, capsys):
    path = tmp_path / "thing.zip"
    path.mkdir() if content is None else path.write_bytes(content)
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(message)):
        zipsave.load(path)
    assert cli.main(["inspect", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_new_native_forms_are_deterministic():
    for value in (fractions.Fraction(1, 3), decimal.Decimal("1.10"), _seeded_random(), _seeded_torch()):
        a = orjson.dumps(Encoder().encode_entry("k", value)[":zipsave:"])
        b = orjson.dumps(Encoder().encode_entry("k", value)[":zipsave:"])
        assert a == b


def test_a_class_from_a_script_is_refused_with_how_to_make_it_loadable(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import dataclasses, sys, zipsave\n"
        "@dataclasses.dataclass\n"
        "class Config:\n"
        "    lr: float = 0.1\n"
        "class Algo(zipsave.Saveable):\n"
        "    def __init__(self):\n"
        "        self.config = Config()\n"
        "Algo().save(sys.argv[1])\n"
    )
    subprocess.run([sys.executable, str(script), str(tmp_path / "m.zip")], check=True, timeout=300)
    with pytest.warns(zipsave.SkippedEntryWarning) as caught:
        assert _save_load_path(tmp_path / "m.zip") == "<missing>"
    message = str(caught[0].message)
    assert "skipped key `config` of member `data` (type <class '__main__.Config'>)" in message
    assert message.endswith(
        "The value holds `__main__.Config`, which cloudpickle stored as code, not by import path (it does so for "
        "a class defined in `__main__` (a script or notebook), inside a function, or in a module it could not "
        "import), so `trusted=` cannot admit it. Pass the value with `custom_objects={'config': ...}` (built with the "
        "class imported), or define the class in an importable module and save again; `allow_pickle=True` only if "
        "you trust the archive completely."
    )


def _save_load_path(path: Path) -> Any:
    return getattr(Holder.load(path), "config", "<missing>")  # the script's class is not importable here


@pytest.mark.parametrize(
    ("below", "tail"), [("m.zip", "."), ("x/y/m.zip", ", so `{base}/x/y` cannot be made.")], ids=["direct", "deeper"]
)
def test_saving_below_a_file_names_the_file(tmp_path, below, tail):
    (tmp_path / "afile").write_text("not a folder")
    base = tmp_path / "afile"
    with pytest.raises(
        zipsave.StorageError, match=re.escape(f"`{base}` is a file, not a folder{tail.format(base=base)}")
    ) as err:
        Model().save(base / below)
    assert err.value.errno == 20 and (tmp_path / "afile").read_text() == "not a folder"


def _rngs(seed: int) -> dict[str, Any]:
    return {
        "torch": torch.Generator().manual_seed(seed),
        "python": random.Random(seed),
        "numpy": np.random.default_rng(seed),
        "legacy": np.random.RandomState(seed),
    }


def _draw(rngs: dict[str, Any]) -> list[float]:
    return [
        float(torch.rand(1, generator=rngs["torch"])),
        rngs["python"].random(),
        float(rngs["numpy"].random()),
        float(rngs["legacy"].random_sample()),
    ]


def test_restore_puts_generator_state_into_the_live_generators(tmp_path):
    saved = _rngs(1)
    _draw(saved)
    zipsave.save(dict(saved, step=3), tmp_path / "s.zip")
    live = _rngs(2)
    held = dict(live)  # what a DataLoader or an environment would hold
    state = dict(live, step=0)
    zipsave.restore(state, tmp_path / "s.zip")
    assert all(state[k] is held[k] for k in held) and state["step"] == 3
    assert _draw(held) == _draw(saved)


class Seeded(zipsave.Saveable):
    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.sampler = {"rng": self.rng}  # another holder of the same generator


def test_load_keeps_generators_shared_with_what_the_constructor_built(tmp_path):
    agent = Seeded(5)
    agent.rng.random()
    agent.save(tmp_path / "a.zip", exclude=["sampler"])  # rebuilt by the constructor on load
    back = Seeded.load(tmp_path / "a.zip")
    assert back.sampler["rng"] is back.rng
    assert back.sampler["rng"].random() == agent.rng.random()


def test_a_generator_of_another_kind_is_replaced(tmp_path):
    zipsave.save({"rng": np.random.Generator(np.random.PCG64(1))}, tmp_path / "s.zip")
    state = {"rng": np.random.Generator(np.random.MT19937(2))}
    zipsave.restore(state, tmp_path / "s.zip")
    assert type(state["rng"].bit_generator) is np.random.PCG64
    assert state["rng"].random() == np.random.Generator(np.random.PCG64(1)).random()


def test_diff_compares_generators_by_state_and_shows_short_values(tmp_path):
    zipsave.save(
        {"rng": random.Random(1), "rate": fractions.Fraction(1, 3), "gen": torch.Generator().manual_seed(1)},
        tmp_path / "a.zip",
    )
    zipsave.save(
        {"rng": random.Random(2), "rate": fractions.Fraction(1, 4), "gen": torch.Generator().manual_seed(1)},
        tmp_path / "b.zip",
    )
    result = diff(tmp_path / "a.zip", tmp_path / "b.zip")
    assert [(c.name, c.old, c.new) for c in result.data_changed] == [
        ("rng", "<random.Random>", "<random.Random>"),
        ("rate", "Fraction(1, 3)", "Fraction(1, 4)"),
    ]
    assert diff(tmp_path / "a.zip", tmp_path / "a.zip").identical


def test_diff_names_a_space_whose_generator_state_differs(tmp_path):
    import gymnasium as gym

    one, other = gym.spaces.Box(-1, 1, (2,)), gym.spaces.Box(-1, 1, (2,))
    one.seed(1)
    other.seed(2)
    assert one == other  # gymnasium compares the bounds only
    zipsave.save({"space": one}, tmp_path / "a.zip")
    zipsave.save({"space": other}, tmp_path / "b.zip")
    result = diff(tmp_path / "a.zip", tmp_path / "b.zip")
    assert result.data_stored_differently == ()
    [change] = result.data_changed
    assert change.name == "space" and change.old.startswith("RNG state ") and change.new.startswith("RNG state ")
    assert change.old != change.new
    other.seed(1)
    zipsave.save({"space": other}, tmp_path / "c.zip")
    assert diff(tmp_path / "a.zip", tmp_path / "c.zip").identical


def test_a_simple_namespace_is_pickled_by_its_name_and_loads_safely(tmp_path):
    # cloudpickle writes the class as `cloudpickle.cloudpickle._builtin_type('SimpleNamespace')`:
    # the save warned that the value "holds code that cloudpickle stores by value", and a safe
    # load skipped it, though `types.SimpleNamespace` is on the allowlist
    import base64
    import types

    import cloudpickle

    config = types.SimpleNamespace(lr=3e-4, layers=[64, 64], name="run")
    zipsave.save({"config": config, "nested": {"inner": types.SimpleNamespace(a=1)}}, tmp_path / "ns.zip")
    back = zipsave.load(tmp_path / "ns.zip")
    assert back["config"] == config and back["nested"]["inner"] == types.SimpleNamespace(a=1)
    entry = next(e for e in zipsave.inspect(tmp_path / "ns.zip").data if e.key == "config")
    assert entry.globals == ("types.SimpleNamespace",) and entry.trusted
    stored = json.loads(zipfile.ZipFile(tmp_path / "ns.zip").read("data"))
    assert cloudpickle.loads(base64.b64decode(stored["config"][":serialized:"])) == config  # as SB3 reads it
