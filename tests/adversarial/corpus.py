"""The hostile payloads of the adversarial suite, by family, and where each is delivered.

A payload is one of: a pickle (delivered as a ``:serialized:`` data entry, a side pickle, an
SB3 policy file's ``data.pkl``, a ``.pth`` member's ``data.pkl`` and a DCP ``.metadata``), a
JSON data entry, or whole archive members. Payloads that would have an effect write the file
:data:`MARKER` into the worker's current directory (the sandbox).
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import pickle
import struct
import types
from typing import Any

from .asm import Emit, G, body, build, call, colliding_ints, newobj, program, raw_program

MARKER = "ZIPSAVE_ADVERSARIAL_PWNED"
TOUCH = f"touch {MARKER}"

#: SB3's doors (a model built per load: the slowest places); every payload of a sample of each
#: family goes there as well (see :func:`sb3_sample`), all others to every other place.
SB3_DOORS = frozenset({"load_cls_ppo", "ppo_load", "set_parameters"})

#: Pickle places: where a pickle payload is delivered.
PICKLE_PLACES = {
    "data": ("load", "load_archive", "read", "load_cls_ppo", "ppo_load", "set_parameters", "cli_inspect", "cli_diff"),
    "side": ("replay_buffer", "vecnormalize"),
    "policy_file": ("policy_file",),
    "pth": ("load", "load_archive", "ppo_load", "cli_inspect", "cli_verify", "dcp_load"),
    "dcp_meta": ("dcp_consolidate",),
}
JSON_PLACES = ("load", "load_archive", "read", "load_cls_ppo", "ppo_load", "restore", "cli_inspect", "cli_diff")
MEMBER_PLACES = (
    "load",
    "load_archive",
    "load_cls_ppo",
    "ppo_load",
    "set_parameters",
    "restore",
    "cli_inspect",
    "cli_verify",
    "dcp_load",
)


@dataclasses.dataclass
class Payload:
    name: str
    family: str
    pickle: bytes | None = None
    json: dict | None = None
    #: Whole members replacing the base archive's (``{"policy.pth": bytes}``); ``"policy_file"``
    #: is an SB3 policy file, ``"dcp_meta"`` a DCP ``.metadata``.
    members: dict[str, bytes] | None = None
    #: Places for a pickle payload (keys of PICKLE_PLACES); all by default.
    via: tuple[str, ...] = tuple(PICKLE_PLACES)
    #: A payload that crashed the interpreter before the fix: a worker of its own.
    crash: bool = False


def _colliding_set(n: int) -> Emit:
    ops = pickle.EMPTY_SET
    ints = colliding_ints(n)
    for start in range(0, n, 1000):
        ops += pickle.MARK + b"".join(body(i) for i in ints[start : start + 1000]) + pickle.ADDITEMS
    return Emit(ops)


def _colliding_dict(n: int) -> Emit:
    ops = pickle.EMPTY_DICT
    ints = colliding_ints(n)
    for start in range(0, n, 1000):
        ops += pickle.MARK + b"".join(body(i) + pickle.NONE for i in ints[start : start + 1000]) + pickle.SETITEMS
    return Emit(ops)


def _dag_key(levels: int = 80) -> Emit:
    """A tuple that hashes 2**levels leaves from a few hundred bytes (memo shares the halves)."""
    ops = body(1) + body(2) + pickle.TUPLE2 + pickle.MEMOIZE
    for i in range(levels):
        ops += pickle.BINGET + bytes([i]) + pickle.BINGET + bytes([i]) + pickle.TUPLE2 + pickle.MEMOIZE
    return Emit(ops)


def _doubling_lists(levels: int) -> bytes:
    """``levels`` lists, each holding the one below twice (memo indices from 1: the dict's key
    is memo 0 where ``body`` memoizes it; BINGET reads the list's own index)."""
    ops = b""
    for i in range(levels + 1):
        items = pickle.MARK + (pickle.BINGET + bytes([100 + i - 1])) * 2 + pickle.APPENDS if i else b""
        ops += pickle.EMPTY_LIST + items + pickle.PUT + str(100 + i).encode() + b"\n"
        if i < levels:
            ops += pickle.POP
    return ops


def _object_dag(levels: int, twice: Any) -> bytes:
    """``levels`` objects made by ``twice(below)``, each holding the one below twice: a few
    hundred bytes of pickle (the memo writes each once) whose ``repr`` or ``==`` (``zipsave
    diff``, SB3's note on a saved ``env``) visits 2**levels values."""
    value: Any = 0
    for _ in range(levels):
        value = twice(value)
    return pickle.dumps(value, protocol=4)


def _space_dag(levels: int) -> bytes:
    """A gymnasium ``Tuple`` space holding the one below twice, ``levels`` deep: a kilobyte of
    pickle whose comparison, ``repr`` or check of every path visits 2**levels spaces."""
    from gymnasium.spaces import Discrete, Tuple

    space: Any = Discrete(3)
    for _ in range(levels):
        space = Tuple([space, space])
    return pickle.dumps(space, protocol=4)


def _claim(op: bytes, fmt: str, length: int) -> bytes:
    """An opcode that claims ``length`` bytes follow, with only a few there."""
    return raw_program(op + struct.pack(fmt, length) + b"x" * 16)


def _rng_state(name: str) -> dict:
    import numpy as np

    return getattr(np.random, name)(1).state


def classic() -> list[Payload]:
    os_system = G("os", "system")
    out = {
        "os_system": program(call(os_system, TOUCH), 2),
        "posix_system": program(call(G("posix", "system"), TOUCH)),
        "subprocess_popen": program(call(G("subprocess", "Popen"), ["touch", MARKER])),
        "eval": program(call(G("builtins", "eval"), f"open({MARKER!r}, 'w')")),
        "exec": program(call(G("builtins", "exec"), f"open({MARKER!r}, 'w')")),
        "dunder_import": program(call(G("builtins", "__import__"), "os")),
        "importlib": program(call(G("importlib", "import_module"), "os")),
        "runpy": program(call(G("runpy", "run_path"), "/dev/null")),
        "operator_attrgetter": program(
            call(call(G("operator", "attrgetter"), "system"), call(G("builtins", "__import__"), "os"))
        ),
        "functools_partial": program(call(call(G("functools", "partial"), os_system, TOUCH))),
        "marshal": program(call(G("marshal", "loads"), b"\xe3")),
        "pydoc_locate": program(call(G("pydoc", "locate"), "os.system")),
        "code_interact": program(call(G("code", "InteractiveInterpreter"))),
        "pip_main": program(call(G("pip._internal.cli.main", "main"), ["--version"])),
        "getattr_chain": program(call(call(G("builtins", "getattr"), G("collections", "OrderedDict"), "__init__"), 1)),
        "getattr_on_allowed": program(call(G("builtins", "getattr"), G("numpy", "ndarray"), "tofile")),
        "dotted_global": program(G("collections", "OrderedDict.__init__.__globals__")),
        "copyreg_ext": raw_program(pickle.EXT1 + bytes([200])),
        "persid": raw_program(pickle.PERSID + b"x\n"),
        "binpersid": raw_program(body("x") + pickle.BINPERSID),
        "inst": b"(S'" + TOUCH.encode() + b"'\nios\nsystem\n.",
        "obj": raw_program(pickle.MARK + os_system.data + body(TOUCH) + pickle.OBJ),
        "global_opcode": b"cos\nsystem\n(S'" + TOUCH.encode() + b"'\ntR.",
        "codecs_rot13": program(call(G("_codecs", "encode"), "abc", "rot13")),
        "codecs_decode": program(call(G("codecs", "decode"), "6f73", "hex")),
        "numpy_load": program(call(G("numpy", "load"), MARKER)),
        "torch_load_from_bytes": program(
            call(G("torch.storage", "_load_from_bytes"), program(call(os_system, TOUCH), 2))
        ),
        "torch_rebuild": program(call(G("torch._utils", "_rebuild_tensor_v2"), 1, 0, (1,), (1,), False, os_system)),
        "reconstructor_os": program(call(G("copyreg", "_reconstructor"), os_system, G("builtins", "object"), None)),
        "newobj_os": program(call(G("copyreg", "__newobj__"), G("subprocess", "Popen"), ["touch", MARKER])),
    }
    import cloudpickle

    out["cloudpickle_lambda"] = cloudpickle.dumps(lambda: open(MARKER, "w"))  # noqa: SIM115
    return [Payload(name, "classic", pickle=raw) for name, raw in out.items()]


def crashes() -> list[Payload]:
    pcg = G("numpy.random._pcg64", "PCG64")
    return [
        Payload("pcg64_newobj_build", "crash", pickle=program(newobj(pcg, state=_rng_state("PCG64"))), crash=True),
        Payload(
            "pcg64dxsm_newobj_build",
            "crash",
            pickle=program(newobj(G("numpy.random._pcg64", "PCG64DXSM"), state=_rng_state("PCG64DXSM"))),
            crash=True,
        ),
        Payload(
            "pcg64_copyreg_newobj",
            "crash",
            pickle=program(build(call(G("copyreg", "__newobj__"), pcg), _rng_state("PCG64"))),
            crash=True,
        ),
        Payload(
            "generator_newobj",
            "crash",
            pickle=program(newobj(G("numpy.random._generator", "Generator"), state=_rng_state("PCG64"))),
            crash=True,
        ),
        # A dict key of tuples nested 300 000 deep: hashing it recursed in C until the stack ran out.
        Payload(
            "deep_tuple_key",
            "crash",
            pickle=raw_program(pickle.EMPTY_DICT + body(1) + pickle.TUPLE1 * 300_000 + pickle.NONE + pickle.SETITEM),
            crash=True,
        ),
        # The same tuples as a value: whatever a door does with it (compare, copy, print) must not crash.
        Payload("deep_tuple_value", "crash", pickle=raw_program(body(1) + pickle.TUPLE1 * 300_000), crash=True),
        # Values freed by freeing their items in C, with no trashcan: slices nested 300 000 deep,
        # deques 150 000 deep, and deques linked into a chain after they were built (so no check
        # as each is built can see the chain). Freeing any of them killed the process.
        Payload("deep_slice_chain", "crash", pickle=_chain("builtins", "slice", pickle.TUPLE1, 300_000), crash=True),
        Payload(
            "deep_deque_chain", "crash", pickle=_chain("collections", "deque", pickle.TUPLE1 * 2, 150_000), crash=True
        ),
        Payload("linked_deques", "crash", pickle=_linked_deques(150_000) + pickle.STOP, crash=True),
        # The same, failing before its end: what it built is let go inside the load.
        Payload("linked_deques_unfinished", "crash", pickle=_linked_deques(150_000) + b"\xff", crash=True),
    ]


def _chain(module: str, name: str, wrap: bytes, depth: int) -> bytes:
    """``name(wrap(name(wrap(... None))))``, ``depth`` calls deep: the callable is pushed
    ``depth`` times, then each call takes the value above it."""
    ops = G(module, name).data + pickle.MEMOIZE + pickle.POP + (pickle.BINGET + b"\x00") * depth + pickle.NONE
    return raw_program(ops + (wrap + pickle.REDUCE) * depth)


def _linked_deques(n: int) -> bytes:
    """``n`` empty deques, then each appended to the one before: the chain exists only once
    the pickle is read (no STOP)."""
    ops = [b"\x80\x04", G("collections", "deque").data, pickle.MEMOIZE, pickle.POP]
    for _ in range(n):
        ops += [pickle.BINGET, b"\x00", pickle.EMPTY_TUPLE, pickle.REDUCE, pickle.MEMOIZE, pickle.POP]
    for i in range(1, n):
        ops += [pickle.LONG_BINGET, struct.pack("<I", i), pickle.LONG_BINGET, struct.pack("<I", i + 1), pickle.APPEND]
        ops += [pickle.POP]
    return b"".join(ops) + pickle.LONG_BINGET + struct.pack("<I", 1)


def hangs() -> list[Payload]:
    ints = colliding_ints(20_000)
    rng = call(G("builtins", "range"), 10**18)
    out = {
        "set_additems_collide": raw_program(_colliding_set(40_000).data),
        "dict_setitems_collide": raw_program(_colliding_dict(40_000).data),
        "frozenset_collide": raw_program(pickle.MARK + b"".join(body(i) for i in ints) + pickle.FROZENSET),
        "dict_opcode_collide": raw_program(pickle.MARK + b"".join(body(i) + pickle.NONE for i in ints) + pickle.DICT),
        "set_reduce_collide": program(call(G("builtins", "set"), ints), 2),
        "ordereddict_collide": program(call(G("collections", "OrderedDict"), [(i, 0) for i in ints])),
        "counter_collide": program(call(G("collections", "Counter"), ints)),
        "dag_tuple_key": raw_program(pickle.EMPTY_DICT + _dag_key().data + pickle.NONE + pickle.SETITEM),
        # A tree a walk of every path never finishes: lists sharing the one below (2**61 paths),
        # a list inside itself, lists nested 100 000 deep (each under a key, as a state dict).
        "dag_list_paths": raw_program(pickle.EMPTY_DICT + body("x") + _doubling_lists(60) + pickle.SETITEM),
        "cyclic_list": raw_program(
            pickle.EMPTY_DICT
            + body("x")
            + pickle.EMPTY_LIST
            + pickle.MEMOIZE
            + pickle.BINGET
            + b"\x00"
            + pickle.APPEND
            + pickle.SETITEM
        ),
        "space_dag_tuple": _space_dag(30),
        # The same sharing through the other objects repr and == walk into (a data value's).
        "dag_namespace_paths": _object_dag(60, lambda x: types.SimpleNamespace(a=x, b=x)),
        "dag_deque_paths": _object_dag(60, lambda x: collections.deque([x, x])),
        "dag_slice_paths": _object_dag(40, lambda x: slice(x, x, x)),
        "deep_list_nesting": raw_program(
            pickle.EMPTY_DICT + body("x") + pickle.EMPTY_LIST * 100_000 + pickle.APPEND * 99_999 + pickle.SETITEM
        ),
        "deque_range": program(call(G("collections", "deque"), rng, 0)),
        "list_range": program(call(G("builtins", "list"), call(G("builtins", "range"), 10**9))),
        "counter_range": program(call(G("collections", "Counter"), rng)),
        "long4_huge_int": raw_program(pickle.LONG4 + struct.pack("<i", 400_000) + b"\x01" * 400_000),
        "int_hex_string": program(call(G("builtins", "int"), "f" * 400_000, 16)),
        "randomstate_ctor_deque": program(
            call(G("numpy.random._pickle", "__randomstate_ctor"), rng, G("collections", "deque"))
        ),
        "generator_ctor_deque": program(
            call(G("numpy.random._pickle", "__generator_ctor"), rng, G("collections", "deque"))
        ),
        # str(bytes, "idna"): the registry's idna decoder is quadratic (1.6 MB: over half a minute)
        "codec_idna_quadratic": program(call(G("builtins", "str"), b"xn--" + b"a" * 1_600_000, "idna")),
    }
    found = [Payload(name, "hang", pickle=raw) for name, raw in out.items()]
    found.append(Payload("dcp_shared_chunk_list", "hang", members={"dcp_meta": _dcp_shared_chunks(3000)}))
    return found


def _dcp_shared_chunks(n: int) -> bytes:
    """DCP ``.metadata`` naming one tensor record under ``n`` keys, its list naming one chunk
    ``n`` times: 35 KB whose check of every tensor's chunks took n**2 steps (about 30 s)."""
    import torch
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        TensorProperties,
        TensorStorageMetadata,
    )

    chunk = ChunkStorageMetadata(offsets=torch.Size([0]), sizes=torch.Size([0]))
    record = TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size([0]), [chunk] * n)
    return pickle.dumps(Metadata(state_dict_metadata={f"t{i}": record for i in range(n)}, storage_data={}))


def memory() -> list[Payload]:
    huge = 6 << 30
    out = {
        "bytes_6gib": program(call(G("builtins", "bytes"), huge)),
        "bytearray_6gib": program(call(G("builtins", "bytearray"), huge)),
        "numpy_void_6gib": program(call(G("numpy", "void"), huge)),
        "ndarray_newobj_huge": program(newobj(G("numpy", "ndarray"), (1 << 40,))),
        "reconstruct_huge": program(
            call(G("numpy._core.multiarray", "_reconstruct"), G("numpy", "ndarray"), (1 << 40,), b"b")
        ),
        # The same shapes spelled in numpy integers (numpy takes them), which the budget saw as
        # no shape at all: 40 GiB asked of _reconstruct, an object array's 64 GiB of pointers
        "reconstruct_numpy_int_shape": program(
            call(G("numpy._core.multiarray", "_reconstruct"), G("numpy", "ndarray"), (_numpy_int(40 << 30),), b"b")
        ),
        "ndarray_state_numpy_int_shape": _array_state((_numpy_int(1 << 33),), "O", []),
        "bytes_numpy_int_6gib": program(call(G("builtins", "bytes"), _numpy_int(huge))),
        "bytearray_numpy_int_6gib": program(call(G("builtins", "bytearray"), _numpy_int(huge))),
        "torch_size_range": program(call(G("torch", "Size"), call(G("builtins", "range"), 10**10))),
        "tuple_range": program(call(G("builtins", "tuple"), call(G("builtins", "range"), 10**10))),
        # A value stored in memo slot 2**30 - 1: C's unpickler (DCP's metadata) grew its memo to
        # twice that many slots, 16 GB from 10 bytes.
        "memo_far_slot": raw_program(pickle.NONE + pickle.LONG_BINPUT + b"\xff\xff\xff\x3f"),
        "box_constructor": program(call(G("gymnasium.spaces.box", "Box"), 0.0, 1.0, (10**6, 10**6))),
        "prelu_constructor": program(call(G("torch.nn.modules.activation", "PReLU"), 10**10)),
        "optimizer_constructor": program(call(G("torch.optim.adam", "Adam"), [])),
        "seed_sequence_pool": program(
            build(
                call(
                    G("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
                    G("numpy.random.bit_generator", "SeedSequence"),
                    65708578,
                    None,
                ),
                (5, 0, None, 10**12, ()),
            )
        ),
        "binbytes8_claim": _claim(pickle.BINBYTES8, "<Q", 40 << 30),
        "binunicode8_claim": _claim(pickle.BINUNICODE8, "<Q", 40 << 30),
        "bytearray8_claim": _claim(pickle.BYTEARRAY8, "<Q", 40 << 30),
        "long4_claim": _claim(pickle.LONG4, "<i", 2**31 - 1),
        "frame_claim": _claim(pickle.FRAME, "<Q", 40 << 30),
        # issue 35: what a BUILD state asks numpy for, sizes added up, a tensor over its storage
        "ndarray_state_object_8gib": _array_state((1 << 30,), "O8", []),
        "ndarray_state_float_8gib": _array_state((1 << 30,), "f8", b""),
        "bytes_each_within_budget": program([call(G("builtins", "bytes"), 60 << 20) for _ in range(100)]),
        "tensor_past_storage_8gib": _persistent_pickle(collections.OrderedDict(weight=_TensorRef(2 << 30))),
    }
    return [Payload(name, "memory", pickle=raw) for name, raw in out.items()]


def _numpy_int(value: int) -> Emit:
    """A numpy int64 scalar of ``value``, as numpy pickles one (``scalar(dtype, bytes)``)."""
    dtype = Emit(G("numpy", "dtype").data + body(("<i8", False, True)) + pickle.REDUCE)
    return call(G("numpy._core.multiarray", "scalar"), dtype, value.to_bytes(8, "little"))


def _array_state(shape: tuple, dtype: str, data: Any) -> bytes:
    """numpy's own pickle of an array (``_reconstruct``, then BUILD) with any state."""
    empty = call(G("numpy.core.multiarray", "_reconstruct"), G("numpy", "ndarray"), (0,), b"b")
    return program(
        build(
            empty, (1, shape, Emit(G("numpy", "dtype").data + body((dtype, False, True)) + pickle.REDUCE), False, data)
        ),
        2,
    )


def build_states() -> list[Payload]:
    discrete = G("gymnasium.spaces.discrete", "Discrete")
    od = G("collections", "OrderedDict")
    out = {
        "build_pairs_class": program(newobj(discrete, state=[("__class__", od)])),
        "build_slotstate_dict": program(newobj(discrete, state=(None, {"__dict__": {}}))),
        "build_mapping_state": program(newobj(discrete, state=call(od, [("__class__", od)]))),
        "build_dict_space_state": program(
            newobj(discrete, state=newobj(G("gymnasium.spaces.dict", "Dict"), state={"spaces": {"__class__": 1}}))
        ),
        "build_array_interface": program(
            newobj(
                discrete,
                state={"__array_interface__": {"data": (1, False), "shape": (9,), "typestr": "<f8", "version": 3}},
            )
        ),
        "build_private_mangled": program(newobj(discrete, state={"__secret": 1})),
        "module_forward_hook": program(
            newobj(
                G("torch.nn.modules.linear", "Identity"),
                state={"_forward_hooks": call(od, [(1, G("builtins", "slice"))]), "training": True},
            )
        ),
        "bit_generator_ctor_class": program(
            call(G("numpy.random._pickle", "__bit_generator_ctor"), G("torch.nn.modules.activation", "PReLU"))
        ),
        "randomstate_ctor_callable": program(
            call(G("numpy.random._pickle", "__randomstate_ctor"), "x", G("builtins", "bytes"))
        ),
        "mt19937_pos": program(
            build(
                call(G("numpy.random._pickle", "__bit_generator_ctor"), "MT19937"),
                {**_rng_state("MT19937"), "state": {"key": list(range(624)), "pos": 10**6}},
            )
        ),
        "ndarray_buffer": program(call(G("numpy", "ndarray"), (1 << 20,), "f8", b"x" * 8)),
    }
    return [Payload(name, "build", pickle=raw) for name, raw in out.items()]


def _native(body_: dict) -> dict:
    return {":type:": "<class 'object'>", ":zipsave:": body_}


def _hex(value: int) -> dict:
    return {":zipsave:": {"kind": "int", "hex": hex(value)}}


def _pickled(raw: bytes) -> dict:
    return {":type:": "<class 'function'>", ":serialized:": base64.b64encode(raw).decode()}


#: cloudpickle's function maker: refused by a default load, so a schedule's pickle that names it
#: goes on to the symbolic readers (SB3's and the RL Zoo's schedule recognisers, the audit).
_MAKE_FUNCTION = (
    pickle.SHORT_BINUNICODE + b"\x17cloudpickle.cloudpickle" + pickle.SHORT_BINUNICODE + b"\x0e_make_function"
)


def _mark_scan_pickle(n: int) -> bytes:
    """``n`` items, then ``n`` empty tuples made from a MARK above them and dropped."""
    items = pickle.NONE * n + (pickle.MARK + pickle.TUPLE + pickle.POP) * n + pickle.POP * (n - 1)
    return b"\x80\x04" + _MAKE_FUNCTION + pickle.STACK_GLOBAL + pickle.POP + items + b"."


def _far_memo_pickle() -> bytes:
    """A value stored in memo slot 2**30 - 1."""
    return b"\x80\x04" + _MAKE_FUNCTION + pickle.STACK_GLOBAL + pickle.LONG_BINPUT + b"\xff\xff\xff\x3f."


def _maker_refs_pickle(n: int) -> bytes:
    """cloudpickle's class maker, memoized, then fetched ``n`` times."""
    maker = (
        pickle.SHORT_BINUNICODE + b"\x17cloudpickle.cloudpickle" + pickle.SHORT_BINUNICODE + b"\x14_make_skeleton_class"
    )
    return b"\x80\x04" + maker + pickle.STACK_GLOBAL + pickle.MEMOIZE + (pickle.BINGET + b"\x00") * n + b"."


def json_payloads() -> list[Payload]:
    ints = colliding_ints(3_000)  # refused at the 33rd; JSON is decoded whole first, so keep it small
    big = 7**1_200_000
    return [
        Payload("json_set_collide", "hang", json=_native({"kind": "set", "items": [_hex(i) for i in ints]})),
        Payload(
            "json_frozenset_collide", "hang", json=_native({"kind": "frozenset", "items": [_hex(i) for i in ints]})
        ),
        Payload(
            "json_dict_items_collide", "hang", json=_native({"kind": "dict", "items": [[_hex(i), 0] for i in ints]})
        ),
        Payload(
            "json_ordereddict_collide",
            "hang",
            json=_native({"kind": "OrderedDict", "items": [[_hex(i), 0] for i in ints]}),
        ),
        Payload(
            "json_fraction_huge",
            "hang",
            json=_native({"kind": "fraction", "numerator": _hex(big), "denominator": _hex(big + 2)}),
        ),
        Payload("json_int_huge", "hang", json=_native({"kind": "int", "hex": hex(big)})),
        Payload("json_ref_os_system", "classic", json=_native({"kind": "ref", "path": "os:system"})),
        # A `learning_rate` pickle the SB3 doors read symbolically for the RL Zoo's schedule (and
        # `inspect` for its globals): 200 000 MARK/TUPLE pairs over 200 000 items made each look
        # for the last MARK scan the stack (minutes); one PUT to slot 2**30 - 1 (10 bytes) grew
        # a list of that many slots (16 GB, 57 s).
        Payload("sb3_learning_rate_marks", "hang", json=_pickled(_mark_scan_pickle(200_000))),
        Payload("sb3_learning_rate_memo", "memory", json=_pickled(_far_memo_pickle())),
        # Refused (a class stored by value), then named for the message: 200 000 references to
        # cloudpickle's class maker each scanned every opcode after it (hours).
        Payload("by_value_maker_refs", "hang", json=_pickled(_maker_refs_pickle(200_000))),
        # SB3's `env` entry, quoted in a note: a pickled value whose str() doubles 60 times.
        Payload(
            "sb3_env_dag",
            "hang",
            json={
                ":type:": "<class 'list'>",
                ":serialized:": base64.b64encode(raw_program(_doubling_lists(60))).decode(),
            },
        ),
        Payload(
            "json_namedtuple_os",
            "classic",
            json=_native({"kind": "namedtuple", "class": "os:system", "items": [TOUCH]}),
        ),
        Payload(
            "json_defaultdict_eval",
            "classic",
            json=_native({"kind": "defaultdict", "factory": "builtins:eval", "items": []}),
        ),
    ]


def _torch_zip(
    data_pkl: bytes, records: dict[str, bytes] | None = None, *, deflate_declared: int | None = None
) -> bytes:
    """A ``torch.save``-shaped zip holding ``data_pkl``; with ``deflate_declared`` its one
    record is a small deflate stream that declares that many bytes (what a reader allocates)."""
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parents[1] / "data" / "hostile"
    sys.path.insert(0, str(here))
    try:
        import make_hostile as mh
    finally:
        sys.path.remove(str(here))
    members = [
        mh.Member("archive/data.pkl", data_pkl),
        mh.Member("archive/byteorder", b"little"),
        mh.Member("archive/version", b"3\n"),
    ]
    for key, raw in (records or {}).items():
        members.append(
            mh.Member(f"archive/data/{key}", raw, deflate=deflate_declared is not None, declared_size=deflate_declared)
        )
    return mh.build_zip(members, manifest=False)


def member_payloads() -> list[Payload]:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(torch.zeros(4), buf, _use_new_zipfile_serialization=False)
    legacy = buf.getvalue()
    import warnings

    script = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated; old archives still hold it
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), script)
    tensor_pkl = tensor_pickle()
    bomb_pth = _torch_zip(tensor_pkl, {"0": b"\0" * (1 << 16)}, deflate_declared=4 << 30)
    return [
        Payload("pth_torchscript", "classic", members={"policy.pth": script.getvalue()}),
        Payload("pth_legacy", "classic", members={"policy.pth": legacy}),
        Payload("pth_inner_deflate_bomb", "memory", members={"policy.pth": bomb_pth}),
        Payload("policy_file_deflate_bomb", "memory", members={"policy_file": bomb_pth}),
        # Text whose shape is the attack, each well within `max_json_bytes` and the 1 MiB read of
        # `system_info.txt`: a string that never closes, scanned again from each escaped quote in
        # it (400 KB took minutes); 7 million empty lists (21 MB: 1 GB and 16 s to decode); a
        # line of spaces with no colon, which a lazy key pattern split every way (300 KB: minutes).
        Payload(
            "json_unterminated_escapes", "hang", members={"data": b"[" * 10 + b'"' + b'\\"' * 200_000 + b"[]" * 600}
        ),
        Payload("json_empty_lists", "memory", members={"data": b"[" + b"[]," * 7_000_000 + b"[]]"}),
        Payload("system_info_spaces", "hang", members={"system_info.txt": b"- a" + b" " * 300_000 + b"b\n"}),
    ]


class _TensorRef:
    """Pickles as torch's tensor rebuild of ``size`` float32 elements over storage ``0`` (16 of them)."""

    def __init__(self, size: int = 16) -> None:
        self.size = size

    def __reduce__(self) -> Any:
        import torch

        return torch._utils._rebuild_tensor_v2, (_StorageRef(), 0, (self.size,), (1,), False, collections.OrderedDict())


class _StorageRef:
    def __reduce__(self) -> Any:
        raise pickle.PicklingError("only as a persistent id")


# torch's storages are persistent ids: pickle them with a pickler that knows them.
def _persistent_pickle(obj: Any) -> bytes:
    import io

    import torch

    class P(pickle.Pickler):
        def persistent_id(self, o: Any) -> Any:
            if isinstance(o, _StorageRef):
                return ("storage", torch.FloatStorage, "0", "cpu", 16)
            return None

    buf = io.BytesIO()
    P(buf, protocol=2).dump(obj)
    return buf.getvalue()


def names_and_imports() -> list[Payload]:
    import io

    import torch

    buf = io.BytesIO()
    torch.save({"__class__.__init__.__globals__.sys": torch.zeros(1), "_zipsave_probe.__dict__": torch.zeros(1)}, buf)
    return [
        Payload("pvars_dotted_dunder", "i27a", members={"pytorch_variables.pth": buf.getvalue()}),
        Payload(
            "json_pvars_dotted",
            "i27a",
            json=_native({"kind": "ref", "path": "zipsave._trust._policy:TrustPolicy.is_trusted"}),
        ),
        Payload("init_json_venv_main", "i27a", members={"init.json": b'{"class": "venv.__main__:X", "args": {}}'}),
        Payload("sb3_env_string", "i27a", json="wave:Nope-v0"),  # type: ignore[arg-type]
        # A text codec named to str/bytes/bytearray is looked up in the codec registry, which
        # imports encodings.<name> (idna imports stringprep, hz _codecs_cn, big5hkscs _codecs_hk)
        Payload("codec_idna_import", "imports", pickle=program(call(G("builtins", "str"), b"abc", "idna"))),
        Payload("codec_newobj_str_", "imports", pickle=program(newobj(G("numpy", "str_"), b"abc", "big5hkscs"))),
        Payload(
            "codec_newobj_bytearray",
            "imports",
            pickle=program(newobj(G("builtins", "bytearray"), "abc", "hz")),
        ),
    ]


def all_payloads() -> list[Payload]:
    payloads = classic() + crashes() + hangs() + memory() + build_states() + json_payloads() + member_payloads()
    payloads += names_and_imports()
    # A .pth member's data.pkl and DCP's .metadata are read by zipsave's metadata reader, the
    # pre-scan and torch's loader, none of which calls a global: the families that attack a
    # reader's containers and lengths go there, and a few classic ones.
    for payload in payloads:
        if (
            payload.pickle is not None
            and payload.family not in ("hang", "memory")
            and payload.name not in ("os_system", "inst", "persid", "copyreg_ext", "torch_load_from_bytes")
        ):
            payload.via = ("data", "side", "policy_file")
    return payloads


def sb3_sample(payloads: list[Payload], per_family: int = 5) -> set[str]:
    """The payloads delivered to SB3's doors too: the first few of each family, every crash,
    the names-and-imports family (dotted names, init.json classes, SB3 env strings) and every
    payload aimed at an SB3 slot (``sb3_*``)."""
    seen: dict[str, int] = {}
    out = set()
    for payload in payloads:
        seen[payload.family] = seen.get(payload.family, 0) + 1
        if (
            payload.crash
            or payload.family == "i27a"
            or payload.name.startswith("sb3_")
            or seen[payload.family] <= per_family
        ):
            out.add(payload.name)
    return out


def pth_with_pickle(data_pkl: bytes) -> bytes:
    """A ``.pth`` member whose ``data.pkl`` is ``data_pkl`` (one small storage record beside it)."""
    return _torch_zip(data_pkl, {"0": b"\0" * 64})


def tensor_pickle() -> bytes:
    return _persistent_pickle(collections.OrderedDict(weight=_TensorRef()))
