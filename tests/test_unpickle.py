"""Tests for zipsave._trust: the restricted unpickler, the trust policy and the opcode audit."""

from __future__ import annotations

import collections
import copyreg
import datetime
import importlib
import importlib.metadata
import io
import os
import pathlib
import pickle
import pickletools
import re
import struct
import subprocess
import sys
import textwrap
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from zipsave import _registry
from zipsave._trust import CORE_ALLOWLIST, TrustPolicy, default_allowlist, pickle_globals, restricted_loads
from zipsave._trust import GROUPS as _GROUPS
from zipsave._trust._names import import_spelling as _import_spelling
from zipsave.exceptions import DecodeError, UnsafeGlobalError, ZipsaveError

REPO = pathlib.Path(__file__).resolve().parents[1]
DEFAULT = TrustPolicy()
PROTOCOLS = list(range(pickle.HIGHEST_PROTOCOL + 1))


class UserThing:
    """A module-level class the default policy does not know."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is UserThing and other.value == self.value

    __hash__ = None  # type: ignore[assignment]


def user_function(x: int) -> int:
    return x + 1


def make_user_thing() -> UserThing:
    return UserThing(0)


class _Call:
    """Pickles as `func(*args)`, the shape of every code-running payload."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func = func
        self.args = args

    def __reduce__(self) -> tuple:
        return self.func, self.args


# -- a tiny pickle assembler, for payloads no pickler would write -----------------------------
def _str(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw if len(raw) < 256 else b"X" + struct.pack("<I", len(raw)) + raw


def _global(module: str, name: str) -> bytes:
    return _str(module) + _str(name) + pickle.STACK_GLOBAL


def _body(obj: Any) -> bytes:
    """The opcodes that push ``obj``, without PROTO/FRAME/STOP and without memo use."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=4)
    pickler.fast = True  # no memo, so bodies can be concatenated freely
    pickler.dump(obj)
    return _strip(buf.getvalue(), drop=("PROTO", "FRAME", "STOP"))


def _strip(payload: bytes, drop: tuple = ("FRAME",), rename: dict | None = None) -> bytes:
    """Rewrite a pickle op by op: drop some opcodes, rename module strings."""
    ops = list(pickletools.genops(payload))
    out = []
    for i, (op, arg, pos) in enumerate(ops):
        raw = payload[pos : ops[i + 1][2] if i + 1 < len(ops) else len(payload)]
        if op.name in drop:
            continue
        if rename and op.name in ("SHORT_BINUNICODE", "BINUNICODE") and arg in rename:
            raw = _str(rename[arg])
        if rename and op.name == "GLOBAL":
            module, name = arg.split(" ")
            if module in rename:
                raw = b"c" + rename[module].encode() + b"\n" + name.encode() + b"\n"
        out.append(raw)
    return b"".join(out)


def _p4(*parts: bytes) -> bytes:
    return b"\x80\x04" + b"".join(parts) + pickle.STOP


def _run_isolated(tmp_path: pathlib.Path, payload: bytes, after: str = "") -> str:
    """Load ``payload`` in a fresh interpreter, so a memory-safety failure is a failed test,
    not a crashed test run. Returns what the child printed."""
    path = tmp_path / "payload.pkl"
    path.write_bytes(payload)
    code = textwrap.dedent(f"""
        import sys
        from zipsave._trust import TrustPolicy, restricted_loads
        from zipsave.exceptions import ZipsaveError
        try:
            result = restricted_loads(open(sys.argv[1], "rb").read(), TrustPolicy())
        except ZipsaveError as err:
            print(type(err).__name__, err)
        else:
            junk = [bytes(1 << 20) for _ in range(16)]  # reuse freed memory, if any was freed
            {after}
            print("loaded", repr(result)[:60])
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.stdout


def _refused(name: str) -> str:
    return re.escape(f"refusing to import untrusted global `{name}`.")


# -- hostile payloads -------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_os_system_is_refused_and_never_runs(tmp_path, protocol):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Call(os.system, f"touch {marker}"), protocol=protocol)
    name = f"{os.system.__module__}.system"  # posix.system on Linux, nt.system on Windows
    with pytest.raises(UnsafeGlobalError, match=_refused(name)) as info:
        restricted_loads(payload, DEFAULT)
    assert info.value.global_name == name
    assert not marker.exists()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subprocess_popen_is_refused_and_never_runs(tmp_path, protocol):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Call(subprocess.Popen, ["touch", str(marker)]), protocol=protocol)
    with pytest.raises(UnsafeGlobalError, match=_refused("subprocess.Popen")):
        restricted_loads(payload, DEFAULT)
    assert not marker.exists()


def test_builtins_open_is_refused_and_writes_nothing(tmp_path):
    marker = tmp_path / "written"
    # Protocol 0 by hand, so the pickle names `builtins.open` exactly as an attacker would.
    payload = b"cbuiltins\nopen\n(V" + str(marker).encode() + b"\nVw\ntR."
    with pytest.raises(UnsafeGlobalError, match=_refused("builtins.open")):
        restricted_loads(payload, DEFAULT)
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload, name",
    [
        (b"cbuiltins\ngetattr\n(Vabc\nVupper\ntR.", "builtins.getattr"),
        (b"c__builtin__\neval\n(V1+1\ntR.", "builtins.eval"),  # Python 2 spelling, mapped first
        (_p4(_global("builtins", "exec"), _body(("x = 1",)), pickle.REDUCE), "builtins.exec"),
        (_p4(_global("builtins", "__import__"), _body(("os",)), pickle.REDUCE), "builtins.__import__"),
        (_p4(_global("builtins", "type"), _body(("X", (), {})), pickle.REDUCE), "builtins.type"),
        (_p4(_global("functools", "partial"), _body((print,)), pickle.REDUCE), "functools.partial"),
        (
            _p4(_global("collections", "OrderedDict.__init__.__globals__")),
            "collections.OrderedDict.__init__.__globals__",
        ),
    ],
)
def test_dangerous_globals_are_refused(payload, name):
    with pytest.raises(UnsafeGlobalError, match=_refused(name)):
        restricted_loads(payload, DEFAULT)


def test_refused_global_inside_an_allowed_container_is_still_refused(tmp_path):
    marker = tmp_path / "pwned"
    payload = cloudpickle.dumps(collections.OrderedDict(a=[1, _Call(os.system, f"touch {marker}")]))
    with pytest.raises(UnsafeGlobalError):
        restricted_loads(payload, DEFAULT)
    assert not marker.exists()


def test_refusal_carries_where_it_happened():
    payload = pickle.dumps(_Call(os.system, "true"))
    name = f"{os.system.__module__}.system"
    expected = f"archive `m.zip`, member `data`, key `policy_kwargs`: refusing to import untrusted global `{name}`."
    with pytest.raises(UnsafeGlobalError, match=re.escape(expected)) as info:
        restricted_loads(payload, DEFAULT, key="policy_kwargs", member="data", archive="m.zip")
    err = info.value
    assert (err.key, err.member, err.archive, err.global_name) == ("policy_kwargs", "data", "m.zip", name)
    # A global that reaches the OS is never suggested for `trusted=`.
    assert "trusted=" not in str(err) and "run arbitrary code" in str(err)


def test_ordinary_refusal_suggests_the_three_opt_ins():
    payload = pickle.dumps(UserThing.__new__(UserThing))
    with pytest.raises(UnsafeGlobalError) as info:
        restricted_loads(payload, DEFAULT, key="k")
    text = str(info.value)
    assert f"`trusted=[{info.value.global_name!r}]`" in text
    assert "custom_objects=" in text and "allow_pickle=True" in text


def test_cloudpickle_lambda_is_refused_by_default_and_loads_with_allow_pickle():
    payload = cloudpickle.dumps(lambda x: x + 1)
    with pytest.raises(UnsafeGlobalError) as info:
        restricted_loads(payload, DEFAULT)
    name = info.value.global_name
    assert name.startswith("cloudpickle.") and name in pickle_globals(payload)
    assert str(info.value).startswith(f"refusing to import untrusted global `{name}`.")
    assert "trusted=" not in str(info.value)  # trusting cloudpickle's code builders = running code
    assert restricted_loads(payload, TrustPolicy(allow_pickle=True))(1) == 2


def test_closure_is_refused_even_when_its_module_is_trusted():
    def make_adder(n: int) -> Any:
        return lambda x: x + n

    payload = cloudpickle.dumps(make_adder(2))
    policy = TrustPolicy.make(trusted=[f"{__name__}."])
    with pytest.raises(UnsafeGlobalError, match=re.escape("refusing to import untrusted global `cloudpickle.")):
        restricted_loads(payload, policy)
    assert restricted_loads(payload, TrustPolicy(allow_pickle=True))(1) == 3


def test_local_names_are_refused_with_a_hint_that_helps():
    payload = _p4(_global(__name__, "make.<locals>.inner"))
    policy = TrustPolicy.make(trusted=[f"{__name__}."])
    with pytest.raises(UnsafeGlobalError, match=re.escape("It is defined inside a function (or is a lambda)")):
        restricted_loads(payload, policy)


def test_trusted_prefix_does_not_reach_through_imported_modules(tmp_path):
    marker = tmp_path / "pwned"
    # This test module imports `os`, so `<this module>.os.system` is os.system.
    payload = _p4(_global(__name__, "os.system"), _body((f"touch {marker}",)), pickle.REDUCE)
    policy = TrustPolicy.make(trusted=[f"{__name__}.*"])
    expected = f"It matches the trusted prefix `{__name__}.`, but `os` is a module imported there"
    with pytest.raises(UnsafeGlobalError, match=re.escape(expected)):
        restricted_loads(payload, policy)
    assert not marker.exists()


@pytest.mark.parametrize(
    "qualname, reason",
    [
        ("UserThing.__init__", "it reaches a dunder attribute"),
        ("DEFAULT", "it is a TrustPolicy object, not a class or function"),
        ("Any", "it is defined in `typing`"),
    ],
)
def test_trusted_prefix_admits_only_classes_and_functions_defined_under_it(qualname, reason):
    policy = TrustPolicy.make(trusted=[f"{__name__}."])
    with pytest.raises(UnsafeGlobalError, match=re.escape(reason)):
        policy.resolve(__name__, qualname)
    # Naming it exactly is the documented way to allow it anyway.
    assert TrustPolicy.make(trusted=[f"{__name__}.{qualname}"]).resolve(__name__, qualname) is not None


def test_build_cannot_modify_an_imported_class():
    payload = _p4(_global("gymnasium.spaces.box", "Box"), _body((None, {"zz_planted": 1})), pickle.BUILD)
    expected = "BUILD would modify `gymnasium.spaces.box.Box` itself, which is shared by the whole program."
    with pytest.raises(DecodeError, match=re.escape(expected)):
        restricted_loads(payload, DEFAULT)
    assert not hasattr(spaces.Box, "zz_planted")


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"__array_interface__": {"data": (1, False)}}, "BUILD sets the attribute(s) `__array_interface__`"),
        ((None, {"__array__": 1}), "BUILD sets the attribute(s) `__array__`"),
        (({"__class__": 1}, None), "BUILD sets the attribute(s) `__class__`"),
        ({"__private": 1}, "BUILD sets the attribute(s) `__private`"),
        ({1: 2}, "BUILD sets the attribute(s) 1 on"),
        # Shapes that pickle's BUILD or a class's __setstate__ would also accept: refused whole.
        ([("__array_interface__", 1)], "BUILD gives a `Discrete` instance a list as state"),
        (({"n": 1}, [("__class__", 1)]), "BUILD gives a `Discrete` instance a list as state"),
        (collections.OrderedDict(__class__=1), "BUILD gives a `Discrete` instance a OrderedDict as state"),
        ((None, {"n": 3}), "BUILD sets 'n' on a `Discrete` instance, which are not its slots"),
    ],
)
def test_build_refuses_protocol_attributes(state, expected):
    payload = _p4(
        _global("gymnasium.spaces.discrete", "Discrete"), _body(()), pickle.NEWOBJ, _body(state), pickle.BUILD
    )
    with pytest.raises(DecodeError, match=re.escape(expected)):
        restricted_loads(payload, DEFAULT)


def test_only_imported_globals_may_be_called():
    # An empty ReLU (NEWOBJ) is allowed; calling the ReLU *instance* is not.
    payload = _p4(_global("torch.nn.modules.activation", "ReLU"), _body(()), pickle.NEWOBJ, _body((1,)), pickle.REDUCE)
    expected = "REDUCE calls a ReLU object that the pickle did not import by name"
    with pytest.raises(DecodeError, match=re.escape(expected)):
        restricted_loads(payload, DEFAULT)


@pytest.mark.parametrize("name", ["torch.nn.modules.activation.PReLU", "gymnasium.spaces.box.Box"])
def test_python_classes_are_never_called(name):
    # Their constructors build networks and arrays of any size; pickles create them empty.
    module, _, qualname = name.rpartition(".")
    payload = _p4(_global(module, qualname), _body((10**12,)), pickle.REDUCE)
    with pytest.raises(DecodeError, match=re.escape(f"REDUCE calls the constructor of `{name}`")):
        restricted_loads(payload, DEFAULT)


def test_copyreg_reconstructor_needs_imported_classes():
    instance = _global("torch.nn.modules.activation", "ReLU") + _body(()) + pickle.NEWOBJ
    payload = _p4(
        _global("copyreg", "_reconstructor"),
        pickle.MARK,
        _global("collections", "OrderedDict"),
        instance,
        pickle.NONE,
        pickle.TUPLE,
        pickle.REDUCE,
    )
    with pytest.raises(
        DecodeError, match=re.escape("copyreg._reconstructor needs classes the pickle imported by name")
    ):
        restricted_loads(payload, DEFAULT)


def test_codecs_encode_is_latin1_only():
    assert (
        restricted_loads(_p4(_global("_codecs", "encode"), _body(("\xff", "latin1")), pickle.REDUCE), DEFAULT)
        == b"\xff"
    )
    payload = _p4(_global("_codecs", "encode"), _body(("abc", "rot13")), pickle.REDUCE)
    with pytest.raises(DecodeError, match=re.escape("not for encoding 'rot13'")):
        restricted_loads(payload, DEFAULT)


def test_persistent_ids_are_refused():
    payload = _p4(_body("storage/0"), pickle.BINPERSID)
    with pytest.raises(DecodeError, match=re.escape("persistent id 'storage/0'")):
        restricted_loads(payload, DEFAULT)


def test_copyreg_extensions_go_through_the_policy():
    code = 0x7A5E
    copyreg.add_extension("os", "system", code)
    try:
        payload = b"\x80\x02" + pickle.EXT2 + struct.pack("<H", code) + b"(V\ntR."
        assert pickle_globals(payload) == [f"copyreg extension {code}"]
        with pytest.raises(UnsafeGlobalError, match=_refused("os.system")):
            restricted_loads(payload, DEFAULT)
    finally:
        copyreg.remove_extension("os", "system", code)
    with pytest.raises(DecodeError, match=re.escape(f"copyreg extension code {code}, which is not registered")):
        restricted_loads(payload, DEFAULT)


def test_ndarray_over_a_raw_buffer_is_refused(tmp_path):
    # An object array laid over attacker bytes dereferences them as pointers.
    payload = _p4(_global("numpy", "ndarray"), _body(((1,), "O", b"A" * 8)), pickle.REDUCE)
    out = _run_isolated(tmp_path, payload, after="print(result[0])")
    assert out.startswith("DecodeError REDUCE calls `numpy.ndarray` with a buffer")


def test_forged_dtype_flags_are_refused(tmp_path):
    # A dtype whose state hides an object field: _frombuffer would accept it, and reading the
    # field would dereference 0x4141414141414141.
    forged = (
        _global("numpy", "dtype")
        + _body(("V16", False, True))
        + pickle.REDUCE
        + _body((3, "|", None, ("a",), {"a": (np.dtype("O"), 0)}, 16, 1, 0))
        + pickle.BUILD
    )
    payload = _p4(
        _global("numpy._core.numeric", "_frombuffer"),
        pickle.MARK,
        _body(b"A" * 16),
        forged,
        _body((1,)),
        _body("C"),
        pickle.TUPLE,
        pickle.REDUCE,
    )
    out = _run_isolated(tmp_path, payload, after="print(result['a'])")
    assert out.startswith("DecodeError numpy dtype state is not self-consistent")


def test_array_state_never_frees_memory_under_a_view(tmp_path):
    # A = _reconstruct(...) filled by BUILD; B = _frombuffer(A, ...); BUILD A with a smaller
    # state. numpy's setstate would free A's buffer while B still points into it.
    payload = _p4(
        _global("numpy._core.multiarray", "_reconstruct"),
        _body((np.ndarray, (0,), b"b")),
        pickle.REDUCE,
        _body((1, (1 << 20,), np.dtype("u1"), False, bytes(1 << 20))),
        pickle.BUILD,
        pickle.MEMOIZE,
        _global("numpy._core.numeric", "_frombuffer"),
        pickle.MARK,
        pickle.BINGET + b"\x00",
        _body(np.dtype("u1")),
        _body((1 << 20,)),
        _body("C"),
        pickle.TUPLE,
        pickle.REDUCE,
        pickle.BINGET + b"\x00",
        _body((1, (3,), np.dtype("u1"), False, b"abc")),
        pickle.BUILD,
        pickle.TUPLE2,
    )
    out = _run_isolated(tmp_path, payload, after="print(int(result[0].sum()) >= 0, bytes(result[1]))")
    assert out.splitlines()[0] == "True b'abc'"


def test_builtin_dtype_singleton_is_not_mutated():
    payload = _p4(
        _global("numpy", "dtype"),
        _body(("f8", False, False)),
        pickle.REDUCE,
        _body((3, ">", None, None, None, -1, -1, 0)),
        pickle.BUILD,
    )
    assert restricted_loads(payload, DEFAULT) == np.dtype(">f8")
    assert np.dtype("f8").byteorder == "="


@pytest.mark.parametrize(
    "flags", [("f8", 2, True), ("f8", False, [1]), ("f8", "yes", False), ("f8", 0.0, 1), ("f8", 0, 1, 0)]
)
def test_dtype_flags_numpy_never_pickles_are_refused(flags):
    # numpy asks for the truth of any other object; its pickles pass two bools, or two C ints
    payload = _p4(_global("numpy", "dtype"), _body(flags), pickle.REDUCE)
    with pytest.raises(ZipsaveError, match=re.escape("other `align`/`copy` flags than numpy pickles")):
        restricted_loads(payload, DEFAULT)


@pytest.mark.parametrize("flags", [("f4", False, True), ("f4", 0, 1), ("<i8", 0, 1)])
def test_dtype_flags_of_every_numpy_are_accepted(flags):
    # (spec, 0, 1): numpy 1.x's `dtype.__reduce__` (the RL Zoo's SAC Pendulum-v1 and HER FetchReach-v1
    # agents); (spec, False, True): what numpy pickles today
    payload = _p4(_global("numpy", "dtype"), _body(flags), pickle.REDUCE)
    assert restricted_loads(payload, DEFAULT) == np.dtype(flags[0])
    assert pickle.loads(pickle.dumps(np.dtype(flags[0]))) == np.dtype(flags[0])


@pytest.mark.parametrize(
    "name, edit, expected",
    [
        ("MT19937", lambda s: s["state"].update(pos=10**7), "MT19937 state/pos is 10000000, outside 0..624"),
        ("Philox", lambda s: s.update(buffer_pos=-5), "Philox buffer_pos is -5, outside 0..4"),
    ],
)
def test_bit_generator_positions_are_bounded(name, edit, expected):
    state = getattr(np.random, name)(0).state
    edit(state)
    payload = _p4(
        _global("numpy.random._pickle", "__bit_generator_ctor"),
        _body((name,)),
        pickle.REDUCE,
        _body(state),
        pickle.BUILD,
    )
    with pytest.raises(DecodeError, match=re.escape(f"random generator state is out of range: {expected}.")):
        restricted_loads(payload, DEFAULT)


def test_build_of_an_untrusted_type_is_refused():
    # A trusted factory may return an object of a type nobody trusted; its state stays unset.
    payload = _p4(_global(__name__, "make_user_thing"), _body(()), pickle.REDUCE, _body({"value": 1}), pickle.BUILD)
    policy = TrustPolicy.make(trusted=make_user_thing)
    expected = f"BUILD sets the state of a `{__name__}.UserThing` object, which is not an allowlisted type."
    with pytest.raises(DecodeError, match=re.escape(expected)):
        restricted_loads(payload, policy)


@pytest.mark.parametrize(
    "payload",
    [b"", b"garbage", pickle.dumps([1, 2, 3])[:-3], b"\x80\x04\x93.", b"\x80\x02N\x88\x87."],
)
def test_malformed_payloads_raise_decode_error(payload):
    with pytest.raises(DecodeError, match=re.escape("cannot unpickle the value (")):
        restricted_loads(payload, DEFAULT)
    with pytest.raises(DecodeError, match=re.escape("cannot unpickle the value (")):
        restricted_loads(payload, TrustPolicy(allow_pickle=True))


# -- round trips under the default policy -----------------------------------------------------
def _spaces() -> list[gym.Space]:
    made = [
        spaces.Box(low=-1.0, high=2.0, shape=(3, 2), dtype=np.float32, seed=1),
        spaces.Box(low=np.array([0, -np.inf]), high=np.array([1, np.inf]), dtype=np.float64, seed=2),
        spaces.Box(0, 255, (4, 4, 3), dtype=np.uint8, seed=3),
        spaces.Discrete(5, start=-2, seed=4),
        spaces.MultiDiscrete([3, 4, 2], seed=5),
        spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[1, 1], [0, 0]]), seed=6),
        spaces.MultiBinary([2, 3], seed=7),
        spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "id": spaces.Discrete(3)}, seed=8),
        spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(3)), seed=9),
        spaces.Text(min_length=1, max_length=6, charset="abc", seed=10),
        spaces.Sequence(spaces.Discrete(4), seed=11),
        spaces.Sequence(spaces.Box(0, 1, (2,)), stack=True, seed=12),
        spaces.Graph(node_space=spaces.Box(0, 1, (2,)), edge_space=spaces.Discrete(3), seed=13),
    ]
    if hasattr(spaces, "OneOf"):  # gymnasium 0.29 has none (tests/test_spaces.py: loading one there)
        made.append(spaces.OneOf((spaces.Discrete(2), spaces.Box(0, 1, (2,))), seed=14))
    for space in made:
        space.sample()  # advance the generators so their state is not the seed's
    return made


def _assert_same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
@pytest.mark.parametrize("space", _spaces(), ids=lambda s: type(s).__name__)
def test_gymnasium_spaces_round_trip(space, protocol):
    payload = cloudpickle.dumps(space, protocol=protocol)
    loaded = restricted_loads(payload, DEFAULT)
    assert type(loaded) is type(space)
    assert loaded == space
    # The generator came back in the same state: both draw the same samples.
    _assert_same(loaded.sample(), space.sample())


def test_graph_instance_round_trips():
    instance = spaces.GraphInstance(nodes=np.zeros((2, 3)), edges=np.array([1]), edge_links=np.array([[0, 1]]))
    _assert_same(restricted_loads(cloudpickle.dumps(instance), DEFAULT), instance)


_ARRAYS = [
    np.arange(12).astype(dtype).reshape(3, 4)
    for dtype in [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "longdouble",
        "complex64",
        "complex128",
        ">f8",
        "<i2",
    ]
] + [
    np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1),
    np.array(3.5),
    np.zeros((0, 4), dtype=np.float32),
    np.array(["a", "bcd"]),
    np.array([b"x", b"yz"]),
    np.array(["2024-01-01", "NaT"], dtype="datetime64[ns]"),
    np.array([1, -2], dtype="timedelta64[s]"),
    np.array([1, "two", None, (3,)], dtype=object),
    np.zeros(3, dtype=[("pos", "<f4", (2,)), ("id", ">i8"), ("tag", "S3")]),
    np.zeros(2, dtype=np.dtype([("a", "i1"), ("b", "f8")], align=True)),
    # StringDType came with numpy 2.0 (the lowest stack has numpy 1.23)
    *(
        [np.array(["x", "yy"], dtype=np.dtypes.StringDType())]
        if hasattr(getattr(np, "dtypes", None), "StringDType")
        else []
    ),
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("array", _ARRAYS, ids=lambda a: str(a.dtype))
def test_numpy_arrays_round_trip(array, protocol):
    loaded = restricted_loads(cloudpickle.dumps(array, protocol=protocol), DEFAULT)
    expected = pickle.loads(pickle.dumps(array, protocol=protocol))  # what plain pickle gives
    assert type(loaded) is np.ndarray
    assert loaded.dtype == expected.dtype and loaded.shape == expected.shape
    if array.dtype.kind == "O":
        assert loaded.tolist() == array.tolist()
    else:
        np.testing.assert_array_equal(loaded, array)


@pytest.mark.parametrize(
    "value",
    [
        np.float32(1.5),
        np.int64(-3),
        np.uint8(7),
        np.bool_(True),
        np.complex64(1j),
        np.str_("s"),
        np.bytes_(b"b"),
        np.datetime64("2020-01-01"),
        np.timedelta64(5, "ms"),
        np.longdouble(2.5),
        np.dtype("f4"),
        np.dtype(">i8"),
        np.dtype("U3"),
        np.dtype("M8[us]"),
        np.dtype([("a", "O"), ("b", "f4", (2,))]),
        np.float32,
        np.int64,
        np.bool_,
        # numpy.dtypes came with numpy 1.25, StringDType with 2.0 (the lowest stack has numpy 1.23)
        *([np.dtypes.Float32DType] if hasattr(np, "dtypes") else []),
        *([np.dtypes.StringDType()] if hasattr(getattr(np, "dtypes", None), "StringDType") else []),
    ],
    ids=repr,
)
@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_numpy_scalars_dtypes_and_types_round_trip(value, protocol):
    loaded = restricted_loads(cloudpickle.dumps(value, protocol=protocol), DEFAULT)
    assert type(loaded) is type(value) and loaded == value


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.random.default_rng(42),
        lambda: np.random.Generator(np.random.PCG64DXSM(1)),
        lambda: np.random.Generator(np.random.MT19937(2)),
        lambda: np.random.Generator(np.random.Philox(3)),
        lambda: np.random.Generator(np.random.SFC64(4)),
        lambda: np.random.RandomState(5),
        lambda: np.random.MT19937(6),
        lambda: np.random.SeedSequence(7),
    ],
    ids=["PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64", "RandomState", "bare-MT19937", "SeedSequence"],
)
@pytest.mark.parametrize("protocol", [2, 5])
def test_numpy_random_state_round_trips(make, protocol):
    original = make()
    if hasattr(original, "random"):
        original.random(3)  # mid-stream state, not the seed's
    loaded = restricted_loads(cloudpickle.dumps(original, protocol=protocol), DEFAULT)
    assert type(loaded) is type(original)
    if isinstance(original, np.random.SeedSequence):
        np.testing.assert_array_equal(loaded.generate_state(4), original.generate_state(4))
    elif hasattr(original, "random"):
        np.testing.assert_array_equal(loaded.random(5), original.random(5))
    else:
        np.testing.assert_array_equal(loaded.random_raw(5), original.random_raw(5))


@pytest.mark.parametrize(
    "value",
    [
        collections.deque([1, 2, 3], maxlen=5),
        collections.deque(["a"]),
        collections.OrderedDict([("b", 1), ("a", (2, 3))]),
        collections.defaultdict(list, {"x": [1]}),
        collections.Counter("abca"),
        {1, 2, frozenset({3})},
        complex(1, -2),
        bytearray(b"\x00\xff"),
        b"\x00\xffbytes",
        range(2, 10, 3),
        slice(1, None, 2),
        float("nan"),
        [Ellipsis, NotImplemented, None],
        datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        datetime.timedelta(days=2, seconds=3),
        pathlib.PurePosixPath("logs/run1"),
        pathlib.Path("logs") / "run1",
        torch.float32,
        torch.bfloat16,
        torch.device("cpu"),
        torch.Size([2, 3]),
        {"activation_fn": torch.nn.ReLU, "optimizer_class": torch.optim.Adam, "net_arch": [64, 64]},
        {"activation_fn": torch.nn.Tanh, "optimizer_class": torch.optim.RMSprop},
    ],
    ids=lambda v: type(v).__name__,
)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stdlib_and_torch_values_round_trip(value, protocol):
    loaded = restricted_loads(cloudpickle.dumps(value, protocol=protocol), DEFAULT)
    assert type(loaded) is type(value)
    if isinstance(value, float):
        assert np.isnan(loaded)
    elif isinstance(value, collections.deque):
        assert loaded == value and loaded.maxlen == value.maxlen
    elif isinstance(value, collections.defaultdict):
        assert loaded == value and loaded.default_factory is list
    else:
        assert loaded == value


@pytest.mark.parametrize(
    "cls",
    [
        torch.nn.ReLU,
        torch.nn.Tanh,
        torch.nn.ELU,
        torch.nn.LeakyReLU,
        torch.nn.GELU,
        torch.nn.SiLU,
        torch.nn.Sigmoid,
        torch.nn.Softplus,
        torch.nn.Mish,
        torch.nn.Identity,
        torch.optim.Adam,
        torch.optim.AdamW,
        torch.optim.SGD,
        torch.optim.RMSprop,
        torch.optim.Adagrad,
    ],
)
def test_torch_classes_load_as_the_same_class(cls):
    assert restricted_loads(cloudpickle.dumps(cls), DEFAULT) is cls


def test_activation_module_instance_round_trips():
    loaded = restricted_loads(cloudpickle.dumps(torch.nn.LeakyReLU(0.3)), DEFAULT)
    assert isinstance(loaded, torch.nn.LeakyReLU) and loaded.negative_slope == 0.3


# -- numpy 1.x archives -----------------------------------------------------------------------
_NUMPY1 = {
    "numpy._core.multiarray": "numpy.core.multiarray",
    "numpy._core.numeric": "numpy.core.numeric",
}


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize(
    "value",
    [np.arange(6.0).reshape(2, 3), np.array([1, "a"], dtype=object), np.float32(2.5), np.int64(7)],
    ids=repr,
)
def test_numpy1_core_names_load_on_numpy2(value, protocol):
    payload = _strip(pickle.dumps(value, protocol=protocol), rename=_NUMPY1)
    assert b"numpy.core." in payload and b"numpy._core" not in payload
    loaded = restricted_loads(payload, DEFAULT)  # -W error: the numpy.core shim would warn
    assert type(loaded) is type(value)
    np.testing.assert_array_equal(np.asarray(loaded, dtype=object), np.asarray(value, dtype=object))
    found = pickle_globals(payload)
    assert any(name.startswith("numpy._core.") for name in found)
    assert not any(name.startswith("numpy.core.") for name in found)


def test_numpy1_spelling_resolves_to_the_installed_object():
    installed = importlib.import_module("numpy._core.multiarray" if np.__version__ >= "2" else "numpy.core.multiarray")
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        assert DEFAULT.is_trusted(module, "_reconstruct")
        assert DEFAULT.resolve(module, "_reconstruct") is installed._reconstruct


def test_numpy2_bool_is_the_numpy_scalar_type_on_every_numpy():
    # numpy 1.20-1.23 kept `numpy.bool` as a deprecated alias of the builtin bool; numpy 2's
    # `numpy.bool` is numpy's own boolean scalar type, as `numpy.bool_` is on every numpy.
    assert DEFAULT.resolve("numpy", "bool") is np.bool_
    loaded = restricted_loads(pickle.dumps(np.dtype(np.bool_), protocol=2), DEFAULT)
    assert loaded == np.dtype(np.bool_)


def test_numpy2_names_are_imported_from_numpy_core_on_numpy1(monkeypatch):
    monkeypatch.setattr(np, "__version__", "1.26.4")
    assert _import_spelling("numpy._core.multiarray") == "numpy.core.multiarray"
    assert _import_spelling("numpy.random._pickle") == "numpy.random._pickle"
    monkeypatch.setattr(np, "__version__", "2.4.0")
    assert _import_spelling("numpy._core.multiarray") == "numpy._core.multiarray"


# -- trust ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "trusted",
    [
        UserThing,
        [UserThing],
        f"{__name__}.UserThing",
        f"{__name__}:UserThing",
        [f"{__name__}.*"],
        (f"{__name__}.",),
        sys.modules[__name__],
    ],
    ids=["class", "list-of-class", "dotted", "colon", "star", "prefix", "module"],
)
@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_trusted_lets_a_user_class_through(trusted, protocol):
    payload = cloudpickle.dumps({"thing": UserThing([1, 2])}, protocol=protocol)
    with pytest.raises(UnsafeGlobalError, match=_refused(f"{__name__}.UserThing")):
        restricted_loads(payload, DEFAULT)
    assert restricted_loads(payload, TrustPolicy.make(trusted=trusted)) == {"thing": UserThing([1, 2])}


def test_trusted_function_by_object_and_by_name():
    payload = cloudpickle.dumps(user_function)
    for trusted in (user_function, f"{__name__}:user_function"):
        assert restricted_loads(payload, TrustPolicy.make(trusted=trusted)) is user_function
    with pytest.raises(UnsafeGlobalError, match=_refused(f"{__name__}.user_function")):
        restricted_loads(payload, TrustPolicy.make(trusted=f"{__name__}.UserThing"))


def test_make_normalises_every_spelling():
    policy = TrustPolicy.make(
        trusted=["pkg.mod:Name", "pkg.mod.Name", "pkg.sub.*", "other.", collections.OrderedDict, pathlib]
    )
    assert policy.trusted == ("pkg.mod.Name", "pkg.sub.", "other.", "collections.OrderedDict", "pathlib.")
    assert TrustPolicy.make(trusted="a.b").trusted == ("a.b",)  # one string is one entry
    assert TrustPolicy.make(trusted=None).trusted == ()
    assert TrustPolicy(trusted=("x.y:Z",)) == TrustPolicy.make(trusted="x.y.Z")  # direct construction too
    assert TrustPolicy.make(trusted=policy.trusted) == policy  # idempotent


@pytest.mark.parametrize(
    "trusted, error, message",
    [
        ("*", ValueError, "`trusted` entry '*' is not a global name"),
        ("", ValueError, "`trusted` entry '' is not a global name"),
        ("Name", ValueError, "`trusted` entry 'Name' is not a global name"),
        ("pkg:", ValueError, "`trusted` entry 'pkg:' is not of the form 'pkg.mod:Name'."),
        ("bad name.*", ValueError, "`trusted` entry 'bad name.*' is not a package prefix"),
        ("m.f.<locals>.g", ValueError, "names a local object"),
        ([3], TypeError, "`trusted` entries must be names, classes, functions or modules; got int."),
    ],
)
def test_make_rejects_unusable_entries(trusted, error, message):
    with pytest.raises(error, match=re.escape(message)):
        TrustPolicy.make(trusted=trusted)


def test_local_class_cannot_be_trusted_by_object():
    class Local:
        pass

    expected = f"cannot trust `{__name__}.{Local.__qualname__}`. It is defined inside a function"
    with pytest.raises(ValueError, match=re.escape(expected)):
        TrustPolicy.make(trusted=Local)


def test_allow_pickle_must_be_a_bool():
    with pytest.raises(TypeError, match=re.escape("`allow_pickle` must be True or False, got 'no'.")):
        TrustPolicy.make(allow_pickle="no")  # type: ignore[arg-type]


def test_is_trusted_never_imports():
    assert "zz_not_imported_mod" not in sys.modules
    policy = TrustPolicy.make(trusted=["zz_not_imported_mod."])
    assert policy.is_trusted("zz_not_imported_mod", "Thing")
    assert not DEFAULT.is_trusted("zz_not_imported_mod", "Thing")
    assert TrustPolicy(allow_pickle=True).is_trusted("zz_not_imported_mod", "Thing")
    assert "zz_not_imported_mod" not in sys.modules


def test_untrusted_names_are_refused_before_import():
    with pytest.raises(UnsafeGlobalError, match=_refused("zz_not_imported_mod.Thing")):
        restricted_loads(b"czz_not_imported_mod\nThing\n.", DEFAULT)
    assert "zz_not_imported_mod" not in sys.modules


def test_trusted_but_missing_globals_are_decode_errors():
    policy = TrustPolicy.make(trusted=["zz_missing_mod.Thing", "collections.NoSuchThing"])
    with pytest.raises(
        DecodeError, match=re.escape("cannot import module `zz_missing_mod` for global `zz_missing_mod.Thing`")
    ):
        policy.resolve("zz_missing_mod", "Thing", key="k")
    with pytest.raises(DecodeError, match=re.escape("module `collections` has no attribute `NoSuchThing`")):
        restricted_loads(b"ccollections\nNoSuchThing\n.", policy)


# -- the allowlist ----------------------------------------------------------------------------
# Every handler's names, not only those of the integrations this process happened to import.
_EVERY_NAME = CORE_ALLOWLIST.union(*(handler.allowlist for handler in _registry.handlers()))
_OTHER_VERSIONS = (
    {name for name in _EVERY_NAME if name.startswith("pathlib._local.")} if sys.version_info < (3, 13) else set()
)


# Names that an archive written on a newer stack may hold, by the releases that lack them
# (from, up to but not including): on such an installed release they cannot resolve (and
# must not: the test proves the reason).
_NEWER_THAN_INSTALLED = [
    ("numpy.dtypes.StringDType", "numpy", "0", "2.0"),
    ("numpy._core._internal._convert_to_stringdtype_kwargs", "numpy", "0", "2.0"),
    ("numpy.dtypes.", "numpy", "0", "1.25"),
    ("gymnasium.spaces.oneof.OneOf", "gymnasium", "0", "1.0"),
    ("rl_zoo3.utils.SimpleLinearSchedule", "rl_zoo3", "0", "2.7"),
]


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _newer_than_installed(name: str) -> str | None:
    for prefix, package, lacking_from, since in _NEWER_THAN_INSTALLED:
        if name == prefix or (prefix.endswith(".") and name.startswith(prefix)):
            try:
                installed = importlib.metadata.version(package.replace("_", "-"))
            except importlib.metadata.PackageNotFoundError:
                return None  # the handler's allowlist is empty then
            lacking = _release(lacking_from) <= _release(installed) < _release(since)
            return f"{package} {installed} (lacks it from {lacking_from} until {since})" if lacking else None
    return None


def _resolves(name: str) -> bool:
    # Try each split, as a pickle could; one of them must import cleanly.
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module, qualname = ".".join(parts[:i]), ".".join(parts[i:])
        try:
            DEFAULT.resolve(module, qualname)
            return True
        except DecodeError:
            continue
    return False


@pytest.mark.parametrize("name", sorted(_EVERY_NAME - _OTHER_VERSIONS))
def test_every_allowlisted_name_resolves(name):
    older = _newer_than_installed(name)
    if older is None:
        assert _resolves(name), f"{name} does not resolve"
    else:  # a name of a later release: it must be missing here for exactly that reason
        assert not _resolves(name), f"{name} resolves on {older}: drop it from _NEWER_THAN_INSTALLED"


@pytest.mark.parametrize(
    "name",
    [
        "builtins.getattr",
        "builtins.setattr",
        "builtins.delattr",
        "builtins.eval",
        "builtins.exec",
        "builtins.open",
        "builtins.compile",
        "builtins.__import__",
        "builtins.globals",
        "builtins.vars",
        "builtins.type",
        "builtins.print",
        "os.system",
        "posix.system",
        "subprocess.Popen",
        "functools.partial",
        "operator.attrgetter",
        "pickle.loads",
        "numpy.load",
        "numpy.fromfile",
        "numpy.memmap",
        "numpy.ma.core._mareconstruct",
        "torch.load",
        "torch.storage._load_from_bytes",
        "torch._utils._rebuild_tensor_v2",
    ],
)
def test_dangerous_names_are_not_allowlisted(name):
    assert name not in default_allowlist()
    assert name not in _EVERY_NAME
    assert not DEFAULT.is_trusted(*name.rsplit(".", 1))


def test_allowlist_is_the_union_of_its_groups():
    assert default_allowlist() >= frozenset().union(*_GROUPS.values())
    assert set(_GROUPS) >= {"builtins", "numpy", "gymnasium", "torch"}


# -- the audit --------------------------------------------------------------------------------
_REAL = [
    "builtins.complex",
    "collections.OrderedDict",
    "gymnasium.spaces.discrete.Discrete",
    "numpy._core.multiarray.scalar",
    "numpy.dtype",
]
_PY2 = ["_codecs.encode", "builtins.set"]  # bytes and sets need globals before protocol 3/4


@pytest.mark.parametrize(
    "protocol, expected",
    [
        (0, _REAL + _PY2 + ["builtins.object", "copyreg._reconstructor"]),
        (1, _REAL + _PY2 + ["builtins.object", "copyreg._reconstructor"]),
        (2, _REAL + _PY2),
        (3, _REAL + ["builtins.set"]),
        (4, _REAL),
        (5, _REAL),
    ],
)
def test_pickle_globals_of_real_pickles(protocol, expected):
    # Protocols 0-2 spell builtins `__builtin__` and copyreg `copy_reg`, with GLOBAL; 4-5 use
    # STACK_GLOBAL with module strings memoized and fetched again by BINGET (two Discretes).
    value = [collections.OrderedDict(a=1), {1, 2}, complex(1, 2), spaces.Discrete(3), spaces.Discrete(4)]
    found = pickle_globals(pickle.dumps(value, protocol=protocol))
    assert found == sorted(expected)
    assert all(DEFAULT.is_trusted(*name.rsplit(".", 1)) for name in found)


def test_pickle_globals_follows_memoized_strings_and_never_imports():
    put = pickle.MEMOIZE
    payload = _p4(
        _str("zz_not_imported_mod"),
        put,
        _str("Thing"),
        put,
        pickle.STACK_GLOBAL,
        pickle.BINGET + b"\x00",
        _str("Other"),
        pickle.STACK_GLOBAL,
        pickle.LONG_BINGET + struct.pack("<I", 0),
        pickle.BINGET + b"\x01",
        pickle.STACK_GLOBAL,
        pickle.TUPLE3,
    )
    assert pickle_globals(payload) == ["zz_not_imported_mod.Other", "zz_not_imported_mod.Thing"]
    # Text PUT/GET and LONG_BINPUT feeding STACK_GLOBAL, then protocol 0's GLOBAL and INST.
    text = (
        b"\x80\x04(Vzz_a_mod\np3\nVName\n\x93g3\nVOther\nr\x09\x00\x00\x00\x93j\x09\x00\x00\x00\x94"
        b"czz_other_mod\nName\n(izz_third_mod\nCls\nt."
    )
    assert pickle_globals(text) == ["zz_a_mod.Name", "zz_a_mod.Other", "zz_other_mod.Name", "zz_third_mod.Cls"]
    assert not {"zz_not_imported_mod", "zz_a_mod", "zz_other_mod", "zz_third_mod"} & set(sys.modules)


def test_pickle_globals_reports_computed_names():
    # str("os") makes the module name at run time; the audit cannot know it, and says so.
    payload = _p4(_global("builtins", "str"), _body(("os",)), pickle.REDUCE, _str("system"), pickle.STACK_GLOBAL)
    assert pickle_globals(payload) == ["<STACK_GLOBAL with a computed name>", "builtins.str"]
    with pytest.raises(UnsafeGlobalError, match=_refused("os.system")):
        restricted_loads(payload, DEFAULT)


def test_pickle_globals_spells_names_as_the_policy_does():
    # numpy 1.x's numpy.core, and Python 2's copy_reg and __builtin__, as the unpickler maps them.
    payload = _strip(pickle.dumps(np.arange(3), protocol=2), rename=_NUMPY1)
    assert b"numpy.core.multiarray" in payload and b"c_codecs" in payload
    assert pickle_globals(payload) == [
        "_codecs.encode",
        "numpy._core.multiarray._reconstruct",
        "numpy.dtype",
        "numpy.ndarray",
    ]
    assert b"copy_reg" in pickle.dumps(UserThing(1), protocol=0)
    assert pickle_globals(pickle.dumps(UserThing(1), protocol=0)) == [
        "builtins.object",
        "copyreg._reconstructor",
        f"{__name__}.UserThing",
    ]


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"", "malformed pickle near byte 0:"),
        (b"garbage", "malformed pickle near byte"),
        (pickle.dumps({"a": 1}, protocol=4)[:-1], "malformed pickle near byte"),
        (b"\x80\x04\x93.", "malformed pickle: STACK_GLOBAL at byte 2 pops from a stack that is too short."),
        (b"\x80\x04h\x05.", "malformed pickle: BINGET at byte 2 reads memo slot 5, never set."),
        (b"\x80\x041.", "malformed pickle: POP_MARK at byte 2 has no MARK to pop to."),
        (b"\x80\x04\x94.", "malformed pickle: MEMOIZE at byte 2 has nothing to store."),
    ],
)
def test_pickle_globals_raises_decode_error_on_garbage(payload, message):
    with pytest.raises(DecodeError, match=re.escape(message)):
        pickle_globals(payload)


def test_build_cannot_modify_an_enum_member():
    # Calling an allowlisted Enum returns its shared member; state must not be set on it.
    payload = _p4(
        _global("stable_baselines3.common.type_aliases", "TrainFrequencyUnit"),
        _body(("step",)),
        pickle.REDUCE,
        _body({"_value_": "episode"}),
        pickle.BUILD,
    )
    with pytest.raises(DecodeError, match=re.escape("BUILD would modify `a TrainFrequencyUnit object` itself")):
        restricted_loads(payload, DEFAULT)
    from stable_baselines3.common.type_aliases import TrainFrequencyUnit

    assert TrainFrequencyUnit.STEP.value == "step"


# -- numpy Generator pickles of every numpy -------------------------------------------------
_GEN_CTOR = _global("numpy.random._pickle", "__generator_ctor")
_BITGEN_CTOR = _global("numpy.random._pickle", "__bit_generator_ctor")


def _generator_pickle(*args: bytes) -> bytes:
    # (ctor, args) REDUCE, then BUILD with the bit generator's state, as numpy writes it
    state = np.random.Generator(np.random.PCG64(5)).bit_generator.state
    return (
        b"\x80\x04"
        + _GEN_CTOR
        + pickle.MARK
        + b"".join(args)
        + pickle.TUPLE
        + pickle.REDUCE
        + _body(state)
        + pickle.BUILD
        + pickle.STOP
    )


@pytest.mark.parametrize("form", ["numpy<1.25: (name,)", "numpy 1.25-1.26: (name, ctor)"])
def test_generator_pickles_of_every_numpy_load_on_this_one(form):
    args = [_body("PCG64")] + ([_BITGEN_CTOR] if "ctor" in form else [])
    loaded = restricted_loads(_generator_pickle(*args), DEFAULT)
    assert isinstance(loaded, np.random.Generator)
    assert loaded.random() == np.random.Generator(np.random.PCG64(5)).random()


def test_generator_pickle_of_this_numpy_loads():
    gen = np.random.Generator(np.random.PCG64(9))
    gen.random()
    loaded = restricted_loads(pickle.dumps(gen, protocol=4), DEFAULT)
    assert loaded.random() == gen.random()


def test_generator_ctor_refuses_a_helper_the_pickle_did_not_import():
    payload = _generator_pickle(_body("PCG64"), _body(3))
    with pytest.raises(DecodeError, match="takes numpy's bit-generator helper as its second argument, got a int"):
        restricted_loads(payload, DEFAULT)


# -- tensors pickled by plain pickle (torch's helpers, guarded) ---------------------------------
def _storage_bytes(t: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    torch.save(t.untyped_storage(), buffer, _use_new_zipfile_serialization=False)
    return buffer.getvalue()


def test_a_plainly_pickled_tensor_loads_through_the_guarded_helpers():
    # What torch.Tensor.__reduce_ex__ writes (SB3 ARS's `weights` in `data`).
    weights = torch.arange(6.0).reshape(2, 3)
    out = restricted_loads(cloudpickle.dumps({"w": weights, "p": torch.nn.Parameter(weights)}), DEFAULT)
    assert torch.equal(out["w"], weights) and isinstance(out["p"], torch.nn.Parameter)
    assert torch.equal(out["p"].data, weights) and out["p"].requires_grad


def test_a_storage_payload_that_is_not_weights_only_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    inner = pickle.dumps(_Call(os.system, f"touch {marker}"), protocol=2)
    payload = pickle.dumps(_Call(torch.storage._load_from_bytes, inner), protocol=2)
    with pytest.raises(DecodeError, match="does not load with weights_only|is not a readable torch storage"):
        restricted_loads(payload, DEFAULT)
    assert not marker.exists()


class _Tensor:
    """Pickles as `_rebuild_tensor_v2(storage, offset, size, stride, grad, hooks)`."""

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __reduce__(self) -> tuple:
        storage = _Call(torch.storage._load_from_bytes, _storage_bytes(torch.arange(4.0)))
        return torch._utils._rebuild_tensor_v2, (storage, *self.args)


@pytest.mark.parametrize(
    "args",
    [
        (0, (4,), (1,), False, collections.OrderedDict([(0, print)])),  # a backward hook: a callable
        (0, (4,), (1,), False, collections.OrderedDict(), {"a": 1}),  # metadata sets internals
        (-1, (4,), (1,), False, collections.OrderedDict()),
        (2, (4,), (1,), False, collections.OrderedDict()),  # past the end of the storage
    ],
    ids=["hooks", "metadata", "negative-offset", "out-of-bounds"],
)
def test_a_tensor_rebuild_with_arguments_a_saved_tensor_never_has_is_refused(args):
    with pytest.raises((DecodeError, UnsafeGlobalError)):
        restricted_loads(pickle.dumps(_Tensor(*args), protocol=2), DEFAULT)


@pytest.mark.parametrize(
    "target, attribute",
    [(collections.OrderedDict, "__init__"), (np.dtype, "mro"), (collections.OrderedDict, "fromkeys")],
)
def test_getattr_reaches_only_trusted_names_below_imported_globals(target, attribute):
    # Protocols < 4 pickle a nested name as getattr(owner, "name"); the stand-in allows exactly
    # what a protocol-4 pickle naming `owner.name` would need: that name trusted.
    payload = pickle.dumps(_Call(getattr, target, attribute), protocol=2)
    with pytest.raises(UnsafeGlobalError, match=re.escape("`builtins.getattr`")) as info:
        restricted_loads(payload, DEFAULT)
    assert f"{target.__name__}.{attribute}" in str(info.value)
    trusted = TrustPolicy(trusted=[f"{target.__module__}.{target.__qualname__}.{attribute}"])
    if not attribute.startswith("__"):
        assert restricted_loads(payload, trusted) == getattr(target, attribute)


def test_getattr_on_a_value_the_pickle_built_is_refused():
    payload = pickle.dumps(_Call(getattr, "abc", "upper"), protocol=2)
    with pytest.raises(UnsafeGlobalError, match=re.escape("`builtins.getattr`")):
        restricted_loads(payload, DEFAULT)


def test_an_untrusted_owner_of_a_trusted_name_is_never_handed_to_the_pickle():
    # `BasePolicy` is not trusted but `BasePolicy._dummy_schedule` is: the global answers an
    # Owner stand-in that only getattr accepts; calling it, or keeping it, builds nothing.
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.policies import BasePolicy

    nested = pickle.dumps(BasePolicy._dummy_schedule, protocol=2)  # getattr(BasePolicy, "_dummy_schedule")
    assert restricted_loads(nested, DEFAULT) is BasePolicy._dummy_schedule
    payload = pickle.dumps(_Call(BasePolicy, 1), protocol=2)  # a call of the owner itself
    with pytest.raises((DecodeError, UnsafeGlobalError)):
        restricted_loads(payload, DEFAULT)
    with pytest.raises(UnsafeGlobalError, match=re.escape("`stable_baselines3.common.policies.BasePolicy`")):
        restricted_loads(pickle.dumps(BasePolicy, protocol=2), DEFAULT)  # the owner kept as a value


# -- issue 27: C types without __init__, dtype state layouts, lengths, bounded calls ---------------
@pytest.mark.parametrize("how", ["NEWOBJ", "copyreg.__newobj__"])
def test_a_bit_generator_made_without_init_is_refused_before_its_state_is_set(tmp_path, how):
    # numpy's PCG64 sets its C state up in __init__; __new__ alone then BUILD wrote through NULL.
    pcg = _global("numpy.random._pcg64", "PCG64")
    made = (
        pcg + _body(()) + pickle.NEWOBJ
        if how == "NEWOBJ"
        else (_global("copyreg", "__newobj__") + pcg + pickle.TUPLE1 + pickle.REDUCE)
    )
    payload = _p4(made, _body(np.random.PCG64(1).state), pickle.BUILD)
    out = _run_isolated(tmp_path, payload)
    assert f"DecodeError {how} creates `numpy.random._pcg64.PCG64` without `__init__`" in out, out


def test_a_datetime_dtype_state_without_its_unit_is_refused(tmp_path):
    # numpy's setter dereferences the missing unit metadata (a fuzzer's find).
    state = (3, "<", None, None, None, -1, -1, 0)
    payload = _p4(_global("numpy", "dtype"), _body(("m8", False, True)), pickle.REDUCE, _body(state), pickle.BUILD)
    out = _run_isolated(tmp_path, payload)
    assert "numpy dtype state does not fit its dtype: expected a 9-tuple of version 4" in out, out


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (_p4(pickle.BYTEARRAY8 + struct.pack("<Q", 40 << 30)), "BYTEARRAY8 claims 42949672960 bytes"),
        (_p4(_global("builtins", "bytes"), _body((6 << 30,)), pickle.REDUCE), "`builtins.bytes(6442450944)` asks for"),
        (
            _p4(
                _global("collections", "deque"),
                _global("builtins", "range"),
                _body((10**18,)),
                pickle.REDUCE,
                pickle.TUPLE1,
                pickle.REDUCE,
            ),
            "`collections.deque` given a range asks for 1000000000000000000",
        ),
        (
            _p4(_global("numpy", "dtype"), _body(("(100000000000,)f8",)), pickle.REDUCE),
            "a pickled dtype names its kind",
        ),
        (
            _p4(
                _global("numpy.random._pickle", "__randomstate_ctor"),
                _body("MT19937"),
                _global("builtins", "bytes"),
                pickle.TUPLE2,
                pickle.REDUCE,
            ),
            "takes numpy's bit-generator helper as its second argument",
        ),
        (_p4(pickle.LONG4 + struct.pack("<i", 20_000) + b"\x01" * 20_000), "an integer in the pickle has 159993 bits"),
    ],
    ids=["bytearray8-claim", "bytes-6gib", "deque-range", "dtype-text", "randomstate-ctor-callable", "long4-int"],
)
def test_what_a_pickle_asks_for_is_bounded(payload, expected):
    with pytest.raises(ZipsaveError, match=re.escape(expected)):
        restricted_loads(payload, DEFAULT)


@pytest.mark.parametrize("name", ["a\x1b]0;title\x07", "b\u202ec", "c\x9b31m", "d\u2066"])
def test_an_attribute_name_holds_no_character_a_terminal_acts_on(name):
    # A namespace's repr shows its attribute names as they are: print(model) wrote the escape
    # sequence (here: set the window title) or bidi override of a pickled name to the terminal.
    import types

    with pytest.raises(ZipsaveError, match="sets the attribute"):
        restricted_loads(pickle.dumps(types.SimpleNamespace(**{name: 1})), DEFAULT)
    assert restricted_loads(pickle.dumps(types.SimpleNamespace(**{"dest-with dash": 1})), DEFAULT)


@pytest.mark.parametrize("protocol", range(6))
def test_a_namespace_is_built_from_state_not_from_call_arguments(protocol):
    # From Python 3.13 `SimpleNamespace(mapping)` sets the mapping's names as attributes, which
    # BUILD's name check never saw: `namespace(a\x1bb=1)` loaded there and printed raw.
    import types

    value = types.SimpleNamespace(a=1, b=[2])
    assert restricted_loads(pickle.dumps(value, protocol=protocol), TrustPolicy()) == value
    called = b"\x80\x04\x8c\x05types\x94\x8c\x0fSimpleNamespace\x94\x93\x94}\x94\x8c\x03a\x1bb\x94K\x01s\x85\x94R\x94."
    with pytest.raises(ZipsaveError, match="called with arguments"):
        restricted_loads(called, TrustPolicy())
