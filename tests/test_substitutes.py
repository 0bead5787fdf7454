"""The restricted unpickler's stand-ins (``StorageType`` for ``torch.FloatStorage`` and kin,
``Owner`` for an untrusted global with a trusted name below it) are handed to a hostile pickle:
it cannot change one, neither through the unpickler's opcodes nor, were those let through,
through what pickle itself does with a state. They keep the frozen dataclass's behaviour they
had: messages, repr, equality, hash, copies."""

from __future__ import annotations

import copy
import dataclasses
import io
import pickle
import re
from typing import Any

import pytest
import torch

from zipsave._trust import TrustPolicy, restricted_loads
from zipsave._trust._substitutes import Owner, StorageType
from zipsave.exceptions import DecodeError, UnsafeGlobalError


# What they were: the references their behaviour is compared with.
@dataclasses.dataclass(frozen=True)
class _FrozenStorageType:
    dtype: Any


@dataclasses.dataclass(frozen=True)
class _FrozenOwner:
    module: str
    qualname: str


# -- a tiny pickle assembler, for payloads no pickler would write -----------------------------
def _str(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def _global(module: str, name: str) -> bytes:
    return _str(module) + _str(name) + pickle.STACK_GLOBAL


def _payload(body: bytes) -> bytes:
    return pickle.PROTO + b"\x04" + body + pickle.STOP


_STORAGE = _global("torch", "FloatStorage")
_OWNER = _global("json.decoder", "JSONDecoder")  # untrusted, with a trusted name below it
_OWNER_POLICY = TrustPolicy(trusted=["json.decoder.JSONDecoder.decode"])
_DICT_STATE = pickle.EMPTY_DICT + _str("dtype") + _str("module") + pickle.SETITEM  # {"dtype": "module"}
_SLOT_STATE = pickle.NONE + _DICT_STATE + pickle.TUPLE2  # (None, {...}): pickle sets these by setattr
#: Every opcode that changes the object on top of the stack in place.
_IN_PLACE = {
    "BUILD (dict)": (_DICT_STATE + pickle.BUILD, "BUILD"),
    "BUILD (slots)": (_SLOT_STATE + pickle.BUILD, "BUILD"),
    "SETITEM": (_str("dtype") + _str("x") + pickle.SETITEM, "SETITEM"),
    "SETITEMS": (pickle.MARK + _str("dtype") + _str("x") + pickle.SETITEMS, "SETITEMS"),
    "APPEND": (_str("x") + pickle.APPEND, "APPEND"),
    "APPENDS": (pickle.MARK + _str("x") + pickle.APPENDS, "APPENDS"),
    "ADDITEMS": (pickle.MARK + _str("x") + pickle.ADDITEMS, "ADDITEMS"),
}


def test_a_pickle_gets_the_stand_ins_it_names():
    assert restricted_loads(_payload(_STORAGE), TrustPolicy()) == StorageType(torch.float32)
    getattr_ = _global("builtins", "getattr") + _OWNER + _str("decode") + pickle.TUPLE2 + pickle.REDUCE
    assert restricted_loads(_payload(getattr_), _OWNER_POLICY).__qualname__ == "JSONDecoder.decode"
    with pytest.raises(UnsafeGlobalError, match=re.escape("`json.decoder.JSONDecoder`")):
        restricted_loads(_payload(_OWNER), _OWNER_POLICY)  # an owner kept as a value is refused


@pytest.mark.parametrize("op", sorted(_IN_PLACE))
@pytest.mark.parametrize(
    ("global_", "name", "policy"),
    [(_STORAGE, "torch.FloatStorage", TrustPolicy()), (_OWNER, "json.decoder.JSONDecoder", _OWNER_POLICY)],
    ids=["StorageType", "Owner"],
)
def test_no_opcode_changes_a_stand_in_in_place(op, global_, name, policy):
    body, opname = _IN_PLACE[op]
    with pytest.raises(DecodeError, match=re.escape(f"{opname} would modify `{name}` itself")):
        restricted_loads(_payload(global_ + body), policy)


@pytest.mark.parametrize("attribute", ["__setattr__", "__dict__", "__class__", "__reduce__", "dtype"])
def test_getattr_reaches_nothing_of_a_stand_in(attribute):
    payload = _payload(_global("builtins", "getattr") + _STORAGE + _str(attribute) + pickle.TUPLE2 + pickle.REDUCE)
    with pytest.raises(UnsafeGlobalError, match=re.escape("`builtins.getattr`")):
        restricted_loads(payload, TrustPolicy())


def test_a_stand_in_cannot_be_called():
    with pytest.raises(DecodeError, match="not callable"):
        restricted_loads(_payload(_STORAGE + _str("x") + pickle.TUPLE1 + pickle.REDUCE), TrustPolicy())


class _Plain(pickle._Unpickler):  # type: ignore[name-defined]
    """pickle's own pure-Python unpickler, no checks, answering ``x.Stand`` with ``stand``."""

    def __init__(self, payload: bytes, stand: Any) -> None:
        super().__init__(io.BytesIO(payload))
        self.stand = stand

    def find_class(self, module: str, name: str) -> Any:
        return self.stand if (module, name) == ("x", "Stand") else super().find_class(module, name)


@pytest.mark.parametrize("state", [_DICT_STATE, _SLOT_STATE], ids=["dict", "slots"])
@pytest.mark.parametrize("make", [lambda: StorageType(torch.float32), lambda: Owner("json.decoder", "JSONDecoder")])
def test_the_second_lock_pickles_own_build_cannot_change_one_either(state, make):
    # Were the unpickler's checks passed, pickle's BUILD would write a dict state into
    # `__dict__` (there is none) and a slot state through `setattr` (refused).
    stand = make()
    before = copy.copy(stand)
    with pytest.raises((AttributeError, dataclasses.FrozenInstanceError)):
        _Plain(_payload(_global("x", "Stand") + state + pickle.BUILD), stand).load()
    assert stand == before and not hasattr(stand, "__dict__") and not hasattr(type(stand), "__setstate__")
    # The frozen dataclass they were let a dict state through, into its `__dict__`.
    reference = _FrozenStorageType(torch.float32)
    if state is _DICT_STATE:
        assert _Plain(_payload(_global("x", "Stand") + state + pickle.BUILD), reference).load().dtype == "module"


@pytest.mark.parametrize(
    ("stand", "reference"),
    [
        (StorageType(torch.float32), _FrozenStorageType(torch.float32)),
        (Owner("json.decoder", "JSONDecoder"), _FrozenOwner("json.decoder", "JSONDecoder")),
    ],
    ids=["StorageType", "Owner"],
)
def test_frozen_as_the_dataclass_was(stand, reference):
    fields = [f.name for f in dataclasses.fields(reference)]
    for name in (*fields, "extra", "__class__"):
        for target in (stand, reference):
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"^cannot assign to field '{name}'$"):
                setattr(target, name, 1)
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"^cannot delete field '{name}'$"):
                delattr(target, name)
    with pytest.raises(TypeError):
        vars(stand)
    values = tuple(getattr(stand, name) for name in fields)
    assert values == tuple(getattr(reference, name) for name in fields)
    assert repr(stand).replace(type(stand).__qualname__, "X") == repr(reference).replace(
        type(reference).__qualname__, "X"
    )
    assert hash(stand) == hash(reference) == hash(values)
    same, other = type(stand)(*values), type(stand)(*values[:-1], "changed")
    assert stand == same and not stand != same and stand != other and stand != reference and stand != values
    for copied in (copy.copy(stand), copy.deepcopy(stand), pickle.loads(pickle.dumps(stand))):
        assert type(copied) is type(stand) and copied == stand and copied is not stand
