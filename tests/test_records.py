"""The public records a first load, inspect or diff builds (``Limits``, ``TrustPolicy``,
``LoadReport``, ``SkippedEntry``; ``ArchiveMember``, ``DataEntry``, ``TensorInfo``,
``ComponentInfo``, ``ArchiveInfo``; ``Change``, ``ArchiveDiff``) have their dataclass methods
written out by hand: each is compared here with a reference built by a real
``@dataclasses.dataclass`` with the same fields."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import pickle
from collections import OrderedDict
from typing import Any

import pytest

import zipsave
from zipsave._core._inplace import _plain_object
from zipsave._record import record
from zipsave._tools._diff_records import ArchiveDiff as RealArchiveDiff
from zipsave._tools._diff_records import Change as RealChange
from zipsave._trust import TrustPolicy as RealTrustPolicy

# -- the references: what the decorator generated before the methods were written out ---------
# Named as the real classes so that their reprs (which use `__qualname__`) read the same.


@dataclasses.dataclass(frozen=True)
class Limits:
    max_members: int = 100_000
    max_member_bytes: int = 1 << 40
    max_total_bytes: int = 1 << 42
    max_json_bytes: int = 512 << 20
    max_json_depth: int = 500
    max_compression_ratio: float = 200.0
    alloc_floor: int = 64 << 20
    alloc_ratio: float = 16.0
    max_model_bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class SkippedEntry:
    member: str
    key: str | None
    type_hint: str | None
    cause: str


@dataclasses.dataclass(frozen=True)
class TrustPolicy:
    allow_pickle: bool = False
    trusted: tuple = ()
    references: tuple = ()

    __post_init__ = RealTrustPolicy.__post_init__  # normalises `trusted`, checks `allow_pickle`


@dataclasses.dataclass
class LoadReport:
    archive: str | None = None
    skipped: list[SkippedEntry] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    signature: Any = None


@dataclasses.dataclass(frozen=True)
class ArchiveMember:
    name: str
    size: int
    compressed_size: int
    compression: str
    sha256: str | None


@dataclasses.dataclass(frozen=True)
class DataEntry:
    component: str
    key: str
    type: str
    form: str
    summary: str
    globals: tuple[str, ...] = ()
    untrusted: tuple[str, ...] = ()
    rebuilt: bool = False


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    member: str
    key: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclasses.dataclass(frozen=True)
class ComponentInfo:
    name: str
    cls: str | None


@dataclasses.dataclass(frozen=True, repr=False)
class ArchiveInfo:
    archive: str
    layout: str
    zipsave_version: str | None
    format_version: int | None
    sb3_version: str | None
    system_info: dict[str, str]
    members: tuple[ArchiveMember, ...]
    components: tuple[ComponentInfo, ...]
    data: tuple[DataEntry, ...]
    tensors: tuple[TensorInfo, ...]
    manifest_digest: str | None
    notes: tuple[str, ...]
    verified: bool | None = None
    signature: str | None = None

    # its text form, as the real one prints it (that one's own tests check the words)
    total_size = zipsave.ArchiveInfo.total_size
    pickled = zipsave.ArchiveInfo.pickled
    __str__ = __repr__ = zipsave.ArchiveInfo.__str__


@dataclasses.dataclass(frozen=True)
class Change:
    name: str
    old: str
    new: str
    max_abs_diff: float | None = None


@dataclasses.dataclass(frozen=True)
class ArchiveDiff:
    a: str
    b: str
    data_changed: tuple[Change, ...]
    data_added: tuple[str, ...]
    data_removed: tuple[str, ...]
    tensors_changed: tuple[Change, ...]
    tensors_added: tuple[str, ...]
    tensors_removed: tuple[str, ...]
    tensors_same: int
    data_stored_differently: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


_ENTRY = ("data", "lr", "float", "boom")
_MEMBER = ("policy.pth", 1500, 900, "deflated", "ab" * 32)
_DATA = ("", "lr", "float", "json", "0.0003")
_TENSOR = ("policy.pth", "0.weight", "float32", (2, 3), 24)
_INFO = (
    "model.zip",
    "zipsave",
    "1.0",
    2,
    None,
    {"OS": "Linux"},
    (zipsave.ArchiveMember(*_MEMBER), zipsave.ArchiveMember("data", 10, 10, "stored", None)),
    (zipsave.ComponentInfo("", None), zipsave.ComponentInfo("learner", "a.b:C")),
    (zipsave.DataEntry(*_DATA), zipsave.DataEntry("learner", "f", "x.Y", "pickle", "?", ("x.Y",), ("x.Y",))),
    (zipsave.TensorInfo(*_TENSOR),),
    "cd" * 32,
    ("a note",),
)
_DIFF = ("a.zip", "b.zip", (RealChange("lr", "0.1", "0.2"),), ("x",), ("y",), (), (), ("policy/0.bias",), 3)

#: (real class, reference class, argument sets: (args, kwargs))
CASES = [
    (
        zipsave.Limits,
        Limits,
        [
            ((), {}),
            ((5,), {}),
            ((1, 2, 3, 4, 5, 6.0, 7, 8.0, 9), {}),
            ((1, 2), {"max_json_bytes": 4 << 30, "max_model_bytes": 10}),
            ((), {"alloc_ratio": 1.5}),
        ],
    ),
    (
        zipsave.SkippedEntry,
        SkippedEntry,
        [
            (_ENTRY, {}),
            (("policy.pth",), {"key": None, "type_hint": None, "cause": "no"}),
            ((), dict(zip(("member", "key", "type_hint", "cause"), _ENTRY))),
        ],
    ),
    (
        RealTrustPolicy,
        TrustPolicy,
        [
            ((), {}),
            ((True,), {}),
            ((False, ["collections.OrderedDict", "mypkg.layers.*"]), {}),
            ((), {"trusted": "a.b:C", "references": (("builtins.int", int),)}),
        ],
    ),
    (
        zipsave.LoadReport,
        LoadReport,
        [
            ((), {}),
            (("a.zip",), {}),
            (("a.zip", [zipsave.SkippedEntry(*_ENTRY)], ["a note"], None), {}),
            ((), {"notes": ["n"], "signature": "someone"}),
            ((None, None, None), {}),
        ],
    ),
    (
        zipsave.ArchiveMember,
        ArchiveMember,
        [
            (_MEMBER, {}),
            (_MEMBER[:4] + (None,), {}),
            ((), dict(zip(("name", "size", "compressed_size"), _MEMBER)) | {"compression": "stored", "sha256": None}),
        ],
    ),
    (
        zipsave.DataEntry,
        DataEntry,
        [
            (_DATA, {}),
            (_DATA, {"globals": ("a.B", "c.D"), "untrusted": ("c.D",)}),
            (_DATA[:4] + ("1.0", ("a.B",)), {}),
            ((), dict(zip(("component", "key", "type", "form", "summary"), _DATA))),
        ],
    ),
    (
        zipsave.TensorInfo,
        TensorInfo,
        [(_TENSOR, {}), (("p.pth", "state.0.step"), {"dtype": "int64", "shape": (), "nbytes": 8})],
    ),
    (zipsave.ComponentInfo, ComponentInfo, [(("", None), {}), (("learner",), {"cls": "a.b:C"})]),
    (
        zipsave.ArchiveInfo,
        ArchiveInfo,
        [
            (_INFO, {}),
            (_INFO, {"verified": True, "signature": "signed by someone"}),
            (
                _INFO[:5],
                dict(zip(("system_info", "members", "components", "data", "tensors"), _INFO[5:10]))
                | {"manifest_digest": None, "notes": (), "verified": False},
            ),
        ],
    ),
    (
        RealChange,
        Change,
        [
            (("lr", "0.1", "0.2"), {}),
            (("policy/0.weight", "(2, 3)", "(2, 3)", 0.5), {}),
            (("w",), {"old": "a", "new": "b", "max_abs_diff": math.inf}),
        ],
    ),
    (
        RealArchiveDiff,
        ArchiveDiff,
        [
            (_DIFF, {}),
            (_DIFF, {"data_stored_differently": ("z",), "notes": ("edited",)}),
            (_DIFF[:8], {"tensors_same": 0}),
        ],
    ),
]
PAIRS = [(real, ref) for real, ref, _ in CASES]
BUILDS = [(real, ref, args, kwargs) for real, ref, calls in CASES for args, kwargs in calls]
#: (real class, reference class, arguments of one instance) for each frozen class
FROZEN = [(real, ref, calls[0][0]) for real, ref, calls in CASES if ref.__dataclass_params__.frozen]  # type: ignore[attr-defined]


def _values(obj: Any) -> tuple:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


def _changed(obj: Any, which: int) -> Any:
    """``obj`` with field ``which`` set to a value it does not hold, through ``dataclasses.replace``."""
    name = dataclasses.fields(obj)[which].name
    old = getattr(obj, name)
    value = not old if name == "allow_pickle" else "changed" if old is None or isinstance(old, str) else ("changed",)
    return dataclasses.replace(obj, **{name: value})


@pytest.mark.parametrize(("real", "ref", "args", "kwargs"), BUILDS)
def test_construction_repr_and_equality(real, ref, args, kwargs):
    obj, want = real(*args, **kwargs), ref(*args, **kwargs)
    assert type(obj) is real
    assert _values(obj) == _values(want)
    assert repr(obj) == repr(want)
    assert obj == real(*args, **kwargs) and not (obj != real(*args, **kwargs))
    for which in (0, -1):
        assert obj != _changed(obj, which) and not (obj == _changed(obj, which))
        assert want != _changed(want, which) and repr(_changed(obj, which)) == repr(_changed(want, which))
        assert type(_changed(obj, which)) is real
    # Only instances of exactly the same class compare by value.
    assert obj != want and obj.__eq__(want) is NotImplemented and obj.__eq__(_values(obj)) is NotImplemented
    sub = type("Sub", (real,), {})(*args, **kwargs)
    assert repr(sub) == repr(type("Sub", (ref,), {})(*args, **kwargs))  # the subclass's name
    assert obj != sub and sub != obj and ref(*args, **kwargs) != type("Sub", (ref,), {})(*args, **kwargs)


@pytest.mark.parametrize(("real", "ref", "args", "kwargs"), BUILDS)
def test_hash_pickle_copy_and_asdict(real, ref, args, kwargs):
    obj, want = real(*args, **kwargs), ref(*args, **kwargs)
    if ref.__hash__ is None:
        assert real.__hash__ is None
        with pytest.raises(TypeError, match="unhashable type"):
            hash(obj)
    elif any(isinstance(value, dict) for value in _values(want)):  # ArchiveInfo's system_info
        for target in (obj, want):
            with pytest.raises(TypeError, match="unhashable type: 'dict'"):
                hash(target)
    else:
        assert hash(obj) == hash(want) == hash(_values(want))
    back = pickle.loads(pickle.dumps(obj))
    assert type(back) is real and back == obj and repr(back) == repr(want)
    for copied in (copy.copy(obj), copy.deepcopy(obj)):
        assert type(copied) is real and copied == obj
    assert dataclasses.asdict(obj) == dataclasses.asdict(want)
    assert dataclasses.astuple(obj) == dataclasses.astuple(want)


@pytest.mark.parametrize(("real", "ref"), PAIRS)
def test_fields_signature_and_dataclass_parameters(real, ref):
    assert dataclasses.is_dataclass(real) and dataclasses.is_dataclass(real.__new__(real))
    got = [
        (f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash)
        for f in dataclasses.fields(real)
    ]
    want = [
        (f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash)
        for f in dataclasses.fields(ref)
    ]
    assert got == want
    assert real.__match_args__ == ref.__match_args__ == tuple(f.name for f in dataclasses.fields(ref))
    # Frozen as before: a frozen dataclass may still subclass a frozen one (and a restore does
    # not fill a frozen instance in place, `_core._inplace`).
    assert real.__dataclass_params__.frozen is ref.__dataclass_params__.frozen
    signature, reference = inspect.signature(real), inspect.signature(ref)
    assert [(p.name, p.kind, repr(p.default)) for p in signature.parameters.values()] == [
        (p.name, p.kind, repr(p.default)) for p in reference.parameters.values()
    ]


@pytest.mark.parametrize(("real", "ref"), PAIRS)
def test_wrong_arguments_are_refused_as_before(real, ref):
    count = len(dataclasses.fields(ref))
    for args, kwargs in [
        ((None,) * (count + 1), {}),
        ((), {"nonsense": 1}),
        ((1,), {dataclasses.fields(ref)[0].name: 1}),
    ]:
        with pytest.raises(TypeError):
            ref(*args, **kwargs)
        with pytest.raises(TypeError):
            real(*args, **kwargs)


def test_required_fields_and_checks_in_post_init():
    with pytest.raises(TypeError, match="cause"):
        zipsave.SkippedEntry("data", None, None)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="cause"):
        SkippedEntry("data", None, None)  # type: ignore[call-arg]
    for cls in (RealTrustPolicy, TrustPolicy):
        with pytest.raises(TypeError, match="must be True or False"):
            cls(allow_pickle="no")
        assert cls(trusted="collections:OrderedDict").trusted == ("collections.OrderedDict",)
        assert dataclasses.replace(cls(), trusted=["a.b.*"]).trusted == ("a.b.",)


def test_default_lists_are_fresh_and_explicit_values_are_kept():
    one, two = zipsave.LoadReport(), zipsave.LoadReport()
    one.skipped.append(zipsave.SkippedEntry(*_ENTRY))
    one.notes.append("x")
    assert two.skipped == [] and two.notes == [] and one.skipped is not two.skipped
    given: list[str] = []
    assert zipsave.LoadReport(notes=given).notes is given
    assert zipsave.LoadReport(skipped=None).skipped is None and LoadReport(skipped=None).skipped is None
    one.archive = "b.zip"  # not frozen
    assert one.archive == "b.zip" and one.ok is False and two.ok is True


def test_recursive_repr_as_dataclass_writes_it():
    report, reference = zipsave.LoadReport(), LoadReport()
    report.notes.append(report)  # type: ignore[arg-type]
    reference.notes.append(reference)  # type: ignore[arg-type]
    assert repr(report) == repr(reference) == "LoadReport(archive=None, skipped=[], notes=[...], signature=None)"


@pytest.mark.parametrize(("real", "ref", "args"), FROZEN)
@pytest.mark.parametrize("name", ["first", "nonfield"])
def test_frozen_instances_refuse_writes_with_dataclass_messages(real, ref, args, name):
    obj, want = real(*args), ref(*args)
    attr = dataclasses.fields(ref)[0].name if name == "first" else "extra"
    for target in (obj, want):
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"^cannot assign to field '{attr}'$"):
            setattr(target, attr, 1)
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"^cannot delete field '{attr}'$"):
            delattr(target, attr)
    assert _values(obj) == _values(want)
    # A subclass may set attributes that are not fields, as before, but no field.
    sub, sub_ref = type("Sub", (real,), {})(*args), type("Sub", (ref,), {})(*args)
    for target in (sub, sub_ref):
        if name == "nonfield":
            target.extra = 1
            assert target.extra == 1
        else:
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{attr}'"):
                setattr(target, attr, 1)


@pytest.mark.parametrize(("real", "ref", "args"), FROZEN)
def test_dataclass_subclasses_follow_the_frozen_rules(real, ref, args):
    for base in (real, ref):
        sub = dataclasses.dataclass(frozen=True)(
            type("Sub", (base,), {"__annotations__": {"extra": "int"}, "extra": 0})
        )
        assert [f.name for f in dataclasses.fields(sub)][-1] == "extra"
        with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
            dataclasses.dataclass(type("Loose", (base,), {}))


def test_match_statement_uses_the_fields():
    match zipsave.SkippedEntry(*_ENTRY):
        case zipsave.SkippedEntry(member, key, type_hint, cause):
            assert (member, key, type_hint, cause) == _ENTRY
        case _:
            pytest.fail("the positional pattern did not match")

    match zipsave.TensorInfo(*_TENSOR), RealChange("w", "a", "b"):
        case zipsave.TensorInfo(member, key, dtype, shape, nbytes), RealChange(name, old, new, max_abs_diff):
            assert (member, key, dtype, shape, nbytes) == _TENSOR and (name, old, new, max_abs_diff) == (
                "w",
                "a",
                "b",
                None,
            )
        case _:
            pytest.fail("the positional pattern did not match")


def test_archive_info_text_html_and_json_forms():
    info, reference = zipsave.ArchiveInfo(*_INFO), ArchiveInfo(*_INFO)
    assert zipsave.ArchiveInfo.__repr__ is zipsave.ArchiveInfo.__str__
    assert repr(info) == str(info) == str(reference) and str(info).startswith("model.zip: zipsave archive (format 2")
    assert "a.b:C" in info._repr_html_() and info._repr_html_().startswith("<div class='zipsave-archive-info'>")
    want = dataclasses.asdict(reference)
    want["data"][0].update(name="lr", needs_pickle=False, trusted=True)
    want["data"][1].update(name="learner/f", needs_pickle=True, trusted=False)
    want["tensors"][0]["name"] = "policy/0.weight"
    assert info.to_dict() == want
    assert info.total_size == 1510 and info.pickled == (info.data[1],)


def test_trust_policy_stays_sealed_and_frozen():
    policy = RealTrustPolicy.make(trusted=["collections.OrderedDict"]).with_references(
        [OrderedDict, OrderedDict.fromkeys]
    )
    assert policy.references == (("collections.OrderedDict", OrderedDict),) and type(policy) is RealTrustPolicy
    for name in ("__init__", "__setattr__", "__delattr__", "__eq__", "__hash__", "__post_init__", "trusted"):
        with pytest.raises(AttributeError, match="cannot be changed"):
            setattr(RealTrustPolicy, name, lambda *a: None)
        with pytest.raises(AttributeError, match="cannot be changed"):
            delattr(RealTrustPolicy, name)
    for name in ("trusted", "references", "allow_pickle", "is_trusted", "_match"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(policy, name, ("os.",))
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(policy, name)
    assert not policy.is_trusted("os", "system") and policy.trusted == ("collections.OrderedDict",)


# -- the frozen `__setattr__`/`__delattr__`, written out by `_record.record` -------------------
# What `frozen=True` generates (CPython's `_frozen_get_del_attr`) refuses every name on an
# instance of exactly the decorated class and a field's name on any instance, and hands the rest
# to the next class; a subclass is a plain class, a frozen dataclass or one with its own hooks.


class _Marking:
    """A base further down the MRO with hooks of its own, which a write handed on reaches."""

    def __setattr__(self, name, value):
        object.__setattr__(self, name, ("marked", value))

    def __delattr__(self, name):
        object.__setattr__(self, name, "deleted")


def _subclasses(base: type) -> dict[str, type]:
    plain = type("Sub", (base,), {})
    data: Any = dataclasses.dataclass(frozen=True)(
        type("Data", (base,), {"__annotations__": {"added": "int"}, "added": 0})
    )

    class Hooked(base):  # type: ignore[valid-type, misc]
        def __setattr__(self, name, value):
            super().__setattr__(name, value)

        def __delattr__(self, name):
            super().__delattr__(name)

    return {
        "class": base,
        "plain": plain,
        "plain-of-plain": type("SubSub", (plain,), {}),
        "dataclass": data,
        "plain-of-dataclass": type("AfterData", (data,), {}),
        "hooked": Hooked,
        "mixed": type("Mixed", (base, _Marking), {}),
    }


def _writes(obj: Any, first: str, last: str) -> list:
    """What each of a run of writes and deletions does to ``obj``: the error, or the value after."""
    outcomes: list = []
    steps = [("set", first), ("set", last), ("set", "extra"), ("set", "added"), ("set", "__class__")]
    steps += [("del", "extra"), ("del", "extra"), ("del", first), ("del", "added"), ("del", "missing")]
    for op, name in steps:
        try:
            if op == "set":
                setattr(obj, name, type(obj) if name == "__class__" else ("written",))
            else:
                delattr(obj, name)
        except Exception as err:
            outcomes.append((op, name, type(err), str(err)))
        else:
            value = getattr(obj, name, "<gone>")
            outcomes.append((op, name, "done", value.__name__ if isinstance(value, type) else value))
    return outcomes


@pytest.mark.parametrize(("real", "ref", "args"), FROZEN)
@pytest.mark.parametrize(
    "kind", ["class", "plain", "plain-of-plain", "dataclass", "plain-of-dataclass", "hooked", "mixed"]
)
def test_frozen_writes_match_the_decorator_on_instances_and_subclasses(real, ref, args, kind):
    obj, want = _subclasses(real)[kind](*args), _subclasses(ref)[kind](*args)
    first, last = dataclasses.fields(ref)[0].name, dataclasses.fields(ref)[-1].name
    assert _writes(obj, first, last) == _writes(want, first, last)
    assert vars(obj) == vars(want) and type(obj).__name__ == type(want).__name__


@pytest.mark.parametrize(("real", "ref", "args"), FROZEN)
def test_frozen_methods_sit_on_the_class_as_generated_ones_do(real, ref, args):
    for name in ("__setattr__", "__delattr__"):
        method, generated = real.__dict__[name], ref.__dict__[name]
        assert method.__qualname__ == generated.__qualname__ == f"{ref.__qualname__}.{name}"
        assert method.__module__ == real.__module__ and generated.__module__ == ref.__module__
        assert list(inspect.signature(method).parameters) == list(inspect.signature(generated).parameters)
    # `_core._inplace` fills a user's object in place, but leaves a frozen dataclass whole.
    assert not _plain_object(real(*args)) and not _plain_object(ref(*args))


def _build(decorator: Any, bases: tuple, namespace: dict) -> Any:
    """What ``decorator`` makes of a fresh class: its generated methods' behaviour, or the error."""
    try:
        cls = decorator(type("Made", bases, {"__annotations__": {"x": "int"}, "x": 0} | namespace))
    except Exception as err:
        return type(err), str(err)
    obj = cls.__new__(cls)
    object.__setattr__(obj, "x", 1)
    return (
        sorted(name for name in vars(cls) if name.startswith("__") and callable(vars(cls)[name])),
        repr(cls.__dataclass_params__),
        "__hash__" in vars(cls) and cls.__hash__ is None,
        _writes(obj, "x", "x"),
    )


@dataclasses.dataclass
class _Loose:
    y: int = 0


@dataclasses.dataclass(frozen=True)
class _Stiff:
    y: int = 0


@pytest.mark.parametrize(
    "options",
    [
        {"frozen": True, "init": False, "repr": False, "eq": False},
        {"frozen": True},
        {"frozen": True, "init": False, "eq": False, "unsafe_hash": True},
        {"frozen": True, "init": False, "repr": False, "eq": False, "slots": True},
        {"frozen": False, "init": False, "repr": False, "eq": False},
        {"init": False},
    ],
)
@pytest.mark.parametrize(
    ("bases", "namespace"),
    [
        ((), {}),
        ((_Stiff,), {}),
        ((_Loose,), {}),
        ((_Marking,), {}),
        ((), {"__setattr__": lambda self, name, value: None}),
        ((), {"__delattr__": lambda self, name: None}),
    ],
    ids=["plain", "frozen-base", "loose-base", "hooked-base", "own-setattr", "own-delattr"],
)
def test_record_makes_what_the_decorator_makes(options, bases, namespace):
    assert _build(record(**options), bases, namespace) == _build(dataclasses.dataclass(**options), bases, namespace)
