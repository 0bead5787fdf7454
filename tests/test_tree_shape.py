"""The shape of a tensor member's tree: what a pickle's memo can make of it (a container shared
by many keys, a container inside itself, nesting thousands deep) is refused before any walker
visits it, and the sharing that real state dicts hold (tied weights, one config dict under two
keys) loads as ``torch.load`` gives it."""

from __future__ import annotations

import collections
import io
import pickle
import zipfile

import pytest
import torch

import zipsave
from zipsave._invariants import MAX_TREE_DEPTH, check_structure, check_tree


def _archive_with_pickle(tmp_path, data_pkl: bytes):
    """A zipsave archive whose ``m.pth`` holds ``data_pkl`` (without manifest.json, as SB3's
    archives have none, so only the tree's shape can refuse it)."""
    buf = io.BytesIO()
    torch.save({"a": 1}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as inner:
        members = {n: inner.read(n) for n in inner.namelist()}
    members[next(n for n in members if n.endswith("data.pkl"))] = data_pkl
    pth = io.BytesIO()
    with zipfile.ZipFile(pth, "w") as z:
        for name, raw in members.items():
            z.writestr(name, raw)
    return _archive_with_pth(tmp_path, pth.getvalue())


def _archive_with_pth(tmp_path, pth: bytes):
    """A zipsave archive whose ``m.pth`` member is ``pth``, without manifest.json."""
    path = tmp_path / "a.zip"
    zipsave.save({"m": torch.nn.Linear(2, 2)}, path)
    with zipfile.ZipFile(path) as z:
        items = {n: z.read(n) for n in z.namelist() if n != "manifest.json"}
    items["m.pth"] = pth
    with zipfile.ZipFile(path, "w") as z:
        for name, raw in items.items():
            z.writestr(name, raw)
    return path


def _doubling_lists(levels: int) -> bytes:
    """``levels`` lists, each holding the one below twice: a few hundred bytes, 2**levels paths."""
    ops = pickle.EMPTY_LIST + pickle.MEMOIZE + pickle.POP
    for i in range(levels):
        ops += pickle.EMPTY_LIST + pickle.MARK + (pickle.BINGET + bytes([i])) * 2 + pickle.APPENDS
        ops += pickle.MEMOIZE + pickle.POP
    ops += pickle.BINGET + bytes([levels])
    return b"\x80\x04" + pickle.EMPTY_DICT + pickle.SHORT_BINUNICODE + b"\x01x" + ops + pickle.SETITEM + pickle.STOP


DOORS = {
    "load": lambda p: zipsave.load(p),
    "load_archive": lambda p: zipsave.load_archive(p),
    "read": lambda p: zipsave.read(p, "m/x"),
}


@pytest.mark.parametrize("door", DOORS)
def test_shared_containers_that_multiply_paths_are_refused(tmp_path, door):
    path = _archive_with_pickle(tmp_path, _doubling_lists(60))
    with pytest.raises(
        zipsave.ZipsaveError, match=r"shares containers so that walking its \d+ values would visit"
    ) as info:
        DOORS[door](path)
    assert "m.pth" in str(info.value)


@pytest.mark.parametrize("door", DOORS)
def test_a_container_inside_itself_is_refused(tmp_path, door):
    cycle = b"\x80\x04" + pickle.EMPTY_LIST + pickle.MEMOIZE + pickle.BINGET + b"\x00" + pickle.APPEND + pickle.STOP
    path = _archive_with_pickle(tmp_path, cycle)
    with pytest.raises(zipsave.ZipsaveError, match=r"holds a container that contains itself \(a cycle\)"):
        DOORS[door](path)


def _nested_lists(depth: int) -> bytes:
    return b"\x80\x02" + pickle.EMPTY_LIST * depth + pickle.APPEND * (depth - 1) + pickle.STOP


@pytest.mark.parametrize("depth", [MAX_TREE_DEPTH + 1, 100_000])
def test_nesting_past_the_tree_depth_is_refused(tmp_path, depth):
    path = _archive_with_pickle(tmp_path, _nested_lists(depth))
    with pytest.raises(zipsave.ArchiveFormatError, match=f"nests containers deeper than {MAX_TREE_DEPTH} levels"):
        zipsave.load(path)


def test_nesting_at_the_tree_depth_loads_as_torch_load_gives_it(tmp_path):
    value: list = []
    for _ in range(MAX_TREE_DEPTH - 1):
        value = [value]
    torch.save({"deep": value, "w": torch.arange(3.0)}, tmp_path / "t.pt")
    zipsave.save({"m": torch.load(tmp_path / "t.pt")}, tmp_path / "a.zip")
    loaded = zipsave.load(tmp_path / "a.zip")["m"]
    assert loaded["deep"] == value and torch.equal(loaded["w"], torch.arange(3.0))


def test_sharing_real_state_dicts_hold_loads(tmp_path):
    # Tied weights (one tensor under two keys), one config dict and one tuple under several
    # keys (Adam's `betas` shared by param groups built from one default): all load.
    weight = torch.randn(4, 3)
    config = {"lr": 0.1, "betas": (0.9, 0.999)}
    state = {"enc": weight, "dec": weight, "groups": [config, config, config], "betas": config["betas"]}
    zipsave.save({"m": state}, tmp_path / "a.zip")
    loaded = zipsave.load(tmp_path / "a.zip")["m"]
    assert torch.equal(loaded["enc"], weight) and torch.equal(loaded["dec"], weight)
    assert loaded["groups"] == [config] * 3 and loaded["betas"] == (0.9, 0.999)


def test_check_structure_counts_the_visits_of_a_walk():
    leaf = [1, 2]
    shared = {"a": leaf, "b": leaf}  # keys are visited too: paths spell them
    assert check_structure(shared) is shared  # 2 keys + 2 lists of 2: under the floor
    # Doubling lists past the floor: refused for how many paths they make, not their size.
    value: list = [0]
    for _ in range(19):
        value = [value, value]
    with pytest.raises(zipsave.ArchiveLimitError, match=r"walking its 39 values would visit 1572863"):
        check_structure(value)
    # The same number of visits with no sharing is a big tree, not an amplified one.
    assert check_structure([[0] * 1000 for _ in range(600)]) is not None


def test_check_structure_looks_into_keys():
    key: tuple = (1,)
    for _ in range(20):
        key = (key, key)  # a tuple whose str() spells 2**20 leaves from 21 distinct tuples
    with pytest.raises(zipsave.ArchiveLimitError, match="shares containers"):
        check_structure({key: 1})


def test_check_tree_refuses_a_cycle_before_walking_it():
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(zipsave.ArchiveFormatError, match="contains itself"):
        check_tree({"x": cyclic})
    ordered = collections.OrderedDict(a=torch.ones(2))
    assert check_tree(ordered) is ordered


@pytest.mark.parametrize("verify", [False, True])
def test_inspect_lists_the_refused_member_in_its_notes(tmp_path, verify):
    path = _archive_with_pickle(tmp_path, _doubling_lists(60))
    info = zipsave.inspect(path, verify=verify)
    assert any("m.pth" in note and "shares containers" in note for note in info.notes), info.notes


# -- gymnasium spaces a pickle builds: checked once each, sharing bounded, no space inside itself --
def _doubling_tuples(levels: int):
    from gymnasium.spaces import Discrete, Tuple

    space = Discrete(3)
    for _ in range(levels):
        space = Tuple([space, space])
    return space


def test_a_space_sharing_its_parts_to_multiply_paths_is_refused():
    from zipsave._trust import TrustPolicy, restricted_loads

    raw = pickle.dumps(_doubling_tuples(30), protocol=4)  # a kilobyte; its repr would spell 2**30 spaces
    with pytest.raises(zipsave.DecodeError, match="its parts are shared so that a walk of its 83 values would visit"):
        restricted_loads(raw, TrustPolicy())


def test_spaces_that_share_parts_as_real_code_does_load(tmp_path):
    from gymnasium.spaces import Box, Discrete, Tuple

    from zipsave._trust import TrustPolicy, restricted_loads

    shared = Tuple([Discrete(2)] * 1000 + [Box(-1.0, 1.0, (3,))] * 3)
    assert restricted_loads(pickle.dumps(shared, protocol=4), TrustPolicy()) == shared
    small = _doubling_tuples(8)  # 511 spaces from 9: under the floor
    assert restricted_loads(pickle.dumps(small, protocol=4), TrustPolicy()) == small


def test_a_space_inside_itself_is_refused():
    from gymnasium.spaces import Dict, Discrete

    from zipsave._trust import TrustPolicy, restricted_loads
    from zipsave._trust._space_check import space_problem

    space = Dict({"a": Discrete(2)})
    space.spaces["self"] = space
    with pytest.raises(zipsave.DecodeError, match="the Dict holds itself"):
        restricted_loads(pickle.dumps(space, protocol=4), TrustPolicy())
    loop: list = []
    loop.append(loop)
    other = Discrete(2)
    other.__dict__["extra"] = loop
    assert space_problem(other) == "Discrete.extra holds itself"
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    other.__dict__["extra"] = deep
    assert space_problem(other) == "spaces are nested more than 64 deep"


# -- keys: Python hashes a tuple by recursing in C, with no guard -----------------------------
def test_a_key_of_deeply_nested_tuples_is_refused_before_it_is_hashed():
    # In a child process: before the bound, hashing this key overflowed the C stack (SIGSEGV).
    import subprocess
    import sys

    code = (
        "import pickle, zipsave\n"
        "from zipsave._trust import TrustPolicy, restricted_loads\n"
        "raw = b'\\x80\\x04}K\\x01' + b'\\x85' * 300_000 + b'Ns.'\n"
        "try:\n"
        "    restricted_loads(raw, TrustPolicy())\n"
        "except zipsave.ArchiveLimitError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "nests tuples and slices more than 100 deep" in out.stdout  # the key's tuples, refused as built


def test_the_key_guard_refuses_a_deep_key_built_elsewhere():
    from zipsave._bounds import MAX_KEY_DEPTH, KeyGuard

    key: tuple = (1,)
    for _ in range(MAX_KEY_DEPTH):
        key = (key,)
    with pytest.raises(zipsave.ArchiveLimitError, match="a set member or dict key nests tuples more than 100 deep"):
        KeyGuard(1 << 20).add({}, key)
    KeyGuard(1 << 20).add({}, key[0])  # at the bound


def test_keys_nested_within_the_bound_load():
    from zipsave._bounds import MAX_KEY_DEPTH
    from zipsave._trust import TrustPolicy, restricted_loads

    key: tuple = (1,)
    for _ in range(MAX_KEY_DEPTH - 1):
        key = (key,)
    assert restricted_loads(pickle.dumps({key: 2}), TrustPolicy()) == {key: 2}  # 100 tuples deep
    assert restricted_loads(pickle.dumps({frozenset([key[0]]): 3}), TrustPolicy()) == {frozenset([key[0]]): 3}
    with pytest.raises(zipsave.ArchiveLimitError, match="nests tuples (and slices )?more than"):
        restricted_loads(pickle.dumps({(key,): 2}), TrustPolicy())
    with pytest.raises(zipsave.ArchiveLimitError, match="nests tuples (and slices )?more than"):
        restricted_loads(pickle.dumps({frozenset([key])}), TrustPolicy())


def test_a_shared_container_is_listed_once_however_many_keys_hold_it(monkeypatch):
    # Linear in the distinct values: 1 000 references to one list list it once (a listing per
    # reference would be quadratic: 100 000 references to 100 000 items, 10**10).
    import zipsave._invariants as invariants

    listed: list[int] = []
    real = invariants._frame
    monkeypatch.setattr(invariants, "_frame", lambda value, *how: listed.append(len(value)) or real(value, *how))
    shared = list(range(100))
    assert check_structure([shared] * 1000) is not None  # 101 001 visits: under the floor
    assert sorted(listed) == [100, 1000]
    listed.clear()
    with pytest.raises(zipsave.ArchiveLimitError, match="walking its 2000 values would visit 1001001"):
        check_structure([list(range(1000))] * 1000)
    assert sorted(listed) == [1000, 1000]


def test_the_space_check_lists_a_shared_container_once(monkeypatch):
    from gymnasium.spaces import Discrete

    import zipsave._trust._space_check as space_check

    walked: list[int] = []
    real = space_check._walk
    monkeypatch.setattr(
        space_check, "_walk", lambda owner, pairs, *rest: walked.append(len(pairs)) or real(owner, pairs, *rest)
    )
    space = Discrete(2)
    space.__dict__["extra"] = [list(range(10))] * 200
    assert space_check.space_problem(space) is None  # 2 000 visits: under the floor
    assert walked.count(200) == 1 and walked.count(10) == 1  # each list once, not 200 times


# -- one tensor under many keys: one object, as torch.load gives it, built and checked once ----
def test_a_tensor_under_many_keys_is_one_tensor_built_and_checked_once(tmp_path, monkeypatch):
    import zipsave._invariants as invariants

    weight = torch.arange(6.0).reshape(2, 3)
    buf = io.BytesIO()
    torch.save({"x": [weight] * 1000, "enc": weight, "dec": weight}, buf)
    path = _archive_with_pth(tmp_path, buf.getvalue())
    checked: list[str] = []
    real = invariants.check_tensor
    monkeypatch.setattr(invariants, "check_tensor", lambda t, *, key="": checked.append(key) or real(t, key=key))
    loaded = zipsave.load(path)["m"]
    theirs = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    assert all(t is loaded["enc"] for t in loaded["x"]) and loaded["dec"] is loaded["enc"]
    assert all(t is theirs["enc"] for t in theirs["x"])  # what torch.load gives
    assert torch.equal(loaded["enc"], weight)
    assert len(checked) == 1  # not 1 002 times


@pytest.mark.parametrize("mmap", [False, True])
def test_a_tensor_under_many_keys_costs_no_path_for_each_key(tmp_path, mmap):
    """A 400 KB ``data.pkl`` naming one tensor under 200 000 keys (2 bytes a key) took about 470
    bytes a key in the walks' paths (94 MB); the load now holds what ``torch.load`` holds."""
    import tracemalloc

    weight = torch.arange(4.0)
    buf = io.BytesIO()
    torch.save({"x": [weight] * 200_000}, buf)
    path = _archive_with_pth(tmp_path, buf.getvalue())
    tracemalloc.start()
    try:
        loaded = zipsave.load(path, mmap=mmap)["m"]["x"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(loaded) == 200_000 and all(t is loaded[0] for t in loaded)  # one object, as torch.load gives
    assert torch.equal(loaded[0], weight)
    assert peak < 40 * 200_000, f"{peak} bytes traced at the peak"  # was about 470 a key


def test_walk_holds_only_the_path_it_is_on():
    from zipsave._invariants import walk

    tree = {"a": [1, {"b": (2, 3)}], "c": {4, 5}, "d": 6}
    assert [p for p, _ in walk(tree)] == ["", "a", "a.0", "a.1", "a.1.b", "a.1.b.0", "a.1.b.1", "c", "c.0", "c.1", "d"]
    items = walk({"x": list(range(100_000))})
    assert next(items) == ("", {"x": list(range(100_000))})
    next(items)  # "x": the list
    frame = items.gi_frame
    assert frame is not None and next(items) == ("x.0", 0)
    held = [v for v in frame.f_locals.values() if isinstance(v, list)]
    assert all(len(v) <= 2 for v in held), "walk listed a container's items"  # the stack: one frame a level


def test_a_mismatch_under_many_keys_names_the_first_and_counts_the_rest(tmp_path):
    saved = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(10)])
    path = tmp_path / "s.zip"
    zipsave.save({"net": saved}, path)
    live = {"net": torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(10)])}
    with pytest.raises(zipsave.ParameterMismatchError) as info:
        zipsave.restore(live, path)
    message = str(info.value)
    assert "20 saved tensor(s) do not fit" in message
    assert "`0.weight`: saved shape (3, 3), expected (4, 4)" in message
    assert message.count("saved shape") == 8 and "and 12 more" in message


# -- tuples nested in tuples, as values -----------------------------------------------------
def _nested_tuples(depth: int) -> bytes:
    return b"\x80\x04" + pickle.BININT1 + b"\x01" + pickle.TUPLE1 * depth + pickle.STOP


def _archive_with_serialized(tmp_path, raw: bytes):
    import base64
    import json

    path = tmp_path / "v.zip"
    zipsave.save({"lr": 0.1, "m": torch.nn.Linear(1, 1)}, path)
    with zipfile.ZipFile(path) as z:
        items = {n: z.read(n) for n in z.namelist() if n != "manifest.json"}
    data = json.loads(items["data"])
    data["lr"] = {":type:": "<class 'tuple'>", ":serialized:": base64.b64encode(raw).decode()}
    items["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, raw_member in items.items():
            z.writestr(name, raw_member)
    return path


def test_a_value_of_tuples_nested_past_the_bound_is_skipped_not_handed_back(tmp_path):
    """Hashing a tuple recurses in C without a guard: the value zipsave handed back killed the
    caller that hashed it (SIGSEGV at 300 000 levels, 300 KB of pickle)."""
    from zipsave._bounds import MAX_KEY_DEPTH

    path = _archive_with_serialized(tmp_path, _nested_tuples(300_000))
    with pytest.warns(
        zipsave.SkippedEntryWarning, match=rf"`lr`.*nests tuples and slices more than {MAX_KEY_DEPTH} deep"
    ):
        loaded = zipsave.load(path)
    assert "lr" not in loaded and isinstance(loaded["m"], dict)


def test_tuples_nested_to_the_bound_load_and_hash(tmp_path):
    from zipsave._bounds import MAX_KEY_DEPTH

    loaded = zipsave.load(_archive_with_serialized(tmp_path, _nested_tuples(MAX_KEY_DEPTH)))
    value, depth = loaded["lr"], 0
    while isinstance(value, tuple):
        value, depth = value[0], depth + 1
    assert depth == MAX_KEY_DEPTH and value == 1
    assert hash(loaded["lr"]) == hash(pickle.loads(_nested_tuples(MAX_KEY_DEPTH)))
    with pytest.warns(zipsave.SkippedEntryWarning, match="nests tuples"):
        zipsave.load(_archive_with_serialized(tmp_path, _nested_tuples(MAX_KEY_DEPTH + 1)))


def test_the_depth_of_shared_and_called_tuples_is_found_once():
    import collections as co

    from zipsave._bounds import MAX_KEY_DEPTH
    from zipsave._trust import TrustPolicy, restricted_loads
    from zipsave._trust._nesting import Nesting
    from zipsave.exceptions import ArchiveLimitError

    # A tuple under a million keys (the memo) is looked at once, not once per key.
    inner = tuple(range(1000))
    raw = pickle.dumps([(inner, inner)] * 3 + [tuple([inner] * 200)], protocol=4)  # within the sharing bound
    assert restricted_loads(raw, TrustPolicy())[3][199] == inner
    depths = Nesting()
    seen = []
    real = depths._scan
    depths._scan = lambda t: seen.append(t) or real(t)
    wide = tuple([inner] * 100_000)
    depths.built(wide)
    depths.built((wide, wide))
    assert id(inner) in depths._depths and id(wide) in depths._depths  # each looked at once, then known
    assert seen == []  # no walk: every tuple below was built (and kept) before the one above
    # A chain of tuples made by calls (a namedtuple's class, as NEWOBJ and REDUCE build it) counts too.
    value: object = 1
    for _ in range(MAX_KEY_DEPTH + 1):
        value = co.namedtuple("P", "a")(value)  # noqa: PYI024
    with pytest.raises(ArchiveLimitError, match="nests tuples"):
        Nesting().built(value)


# -- values freed in C: slices, deques, defaultdicts, object arrays ---------------------------
def _freed_in_c_chain(kind: str, depth: int):
    import numpy as np

    value = None
    for _ in range(depth):
        if kind == "deque":
            value = collections.deque([value])
        elif kind == "defaultdict":
            value = collections.defaultdict(None, {1: value})
        elif kind == "object_array":
            array = np.empty(1, dtype=object)
            array[0] = value
            value = array
        elif kind == "slice":
            value = slice(value)
        elif kind == "structured_array":  # its records' object fields hold the next
            array = np.empty(1, dtype=[("next", object), ("n", np.int32)])
            array[0] = (value, 1)
            value = array
    return value


@pytest.mark.parametrize("kind", ["deque", "defaultdict", "object_array", "slice", "structured_array"])
def test_values_freed_in_c_load_to_the_bound_and_are_refused_past_it(kind):
    """Freeing these recurses in C with no trashcan: 150 000 deques nested (1 MB of pickle)
    killed the process that freed them, the load's own included (tests/adversarial)."""
    from zipsave._trust import TrustPolicy, restricted_loads
    from zipsave._trust._nesting import MAX_DEPTH

    loaded = restricted_loads(pickle.dumps(_freed_in_c_chain(kind, MAX_DEPTH), protocol=4), TrustPolicy())
    depth = 0
    while loaded is not None:
        if kind == "structured_array":
            loaded = loaded[0]["next"]
        else:
            loaded = loaded.stop if kind == "slice" else loaded[1] if kind == "defaultdict" else loaded[0]
        depth += 1
    assert depth == MAX_DEPTH
    raw = pickle.dumps(_freed_in_c_chain(kind, MAX_DEPTH + 1), protocol=4)
    with pytest.raises(zipsave.ArchiveLimitError, match=f"nests .* more than {MAX_DEPTH} deep"):
        restricted_loads(raw, TrustPolicy())


def test_values_freed_in_c_that_real_code_pickles_load():
    import numpy as np

    from zipsave._trust import TrustPolicy, restricted_loads

    shared = collections.deque([1, 2])
    value = {
        "queues": collections.deque([collections.deque([shared, shared]), shared]),
        "counts": collections.defaultdict(list, {"a": [1], "b": [collections.deque([3])]}),
        "ragged": np.array([np.zeros(2), np.ones(3), None], dtype=object),
        "window": (slice(0, 10, 2), slice(None)),
    }
    loaded = restricted_loads(pickle.dumps(value, protocol=4), TrustPolicy())
    assert loaded["queues"] == value["queues"] and loaded["queues"][0][0] is loaded["queues"][1]
    assert loaded["counts"] == value["counts"] and loaded["counts"].default_factory is list
    assert [None if x is None else x.tolist() for x in loaded["ragged"]] == [[0.0, 0.0], [1.0, 1.0, 1.0], None]
    assert loaded["window"] == value["window"]


def test_a_chain_linked_after_it_was_built_is_refused_and_emptied_first():
    from zipsave._trust._nesting import MAX_DEPTH, Nesting

    nesting = Nesting()
    queues = [collections.deque() for _ in range(MAX_DEPTH + 1)]
    for queue in queues:
        nesting.built(queue)  # each empty as it was built: no depth to see yet
    for outer, inner in zip(queues, queues[1:]):
        outer.append(inner)
    queues[-1].append(queues[0])  # and a cycle: the walk still ends
    with pytest.raises(zipsave.ArchiveLimitError, match="deques"):
        nesting.finish()
    assert all(len(queue) == 0 for queue in queues)  # let go one by one, not in one deep recursion
    nesting = Nesting()
    for queue in queues[: MAX_DEPTH - 1]:
        nesting.built(queue)
    for outer, inner in zip(queues[: MAX_DEPTH - 1], queues[1 : MAX_DEPTH - 1]):
        outer.append(inner)
    nesting.finish()  # 99 deep: kept
    assert len(queues[0]) == 1


def test_a_pickle_failing_part_way_lets_its_chain_go_without_a_crash():
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "import zipsave\n"
        "from adversarial.corpus import _linked_deques\n"
        "from zipsave._trust import TrustPolicy, restricted_loads\n"
        "try:\n"
        "    restricted_loads(_linked_deques(150_000) + b'\\xff', TrustPolicy())\n"
        "except zipsave.ZipsaveError as err:\n"
        "    print(type(err).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]  # SIGSEGV (-11) before: the chain was freed in C
    assert out.stdout.strip() == "DecodeError"
