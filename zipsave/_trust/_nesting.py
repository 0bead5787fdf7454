"""Values whose use recurses in C with no guard, bounded as an unpickler builds them.

Python hashes a tuple (and, from 3.12, a slice) by hashing its items in C, and frees a slice,
a deque, a defaultdict or an object array by freeing its items in C, with neither the
recursion limit nor the "trashcan" that lists, tuples, dicts and class instances are freed
through. 300 000 of them nested in one another (a few hundred KB of pickle) overflow the C
stack and kill the process when the value is hashed or freed: inside the load that refuses
it, or in the hands of the caller it was returned to.

Two invariants, kept by every unpickler (:class:`~zipsave._trust.BoundedUnpickler` and its
subclasses) through a :class:`Nesting` each:

* **Tuples and slices**, which cannot change once built, nest at most :data:`MAX_DEPTH` deep
  in one another, checked as each is built; each one's depth is found once, from its items'.
* **Slices, deques, defaultdicts and object arrays** nest at most :data:`MAX_DEPTH` deep in
  one another, checked once the pickle is read (a deque can be filled after it was put in
  another). When that fails, or the pickle fails part-way, the deques, defaultdicts and arrays
  it built are emptied one by one before they are let go, so freeing them does not recurse.
"""

from __future__ import annotations

import collections
import pickle
import sys
from typing import Any

from .._bounds import MAX_KEY_DEPTH
from .._invariants import array_objects
from ..exceptions import ArchiveLimitError

__all__ = ["MAX_DEPTH", "Nesting", "nesting_checked"]

#: How deeply those values may nest: a set member's or dict key's bound (a caller may hash any
#: tuple it is handed). Real values nest a few levels.
MAX_DEPTH = MAX_KEY_DEPTH

#: Built by a call, and freed by freeing their items in C (exact types: an instance of a Python
#: subclass is freed through the trashcan first).
_FREED_IN_C = (slice, collections.deque, collections.defaultdict)

#: The opcodes that build an object: a tuple, what a call returns (a namedtuple, a deque), and
#: BUILD (an array's state is applied to a fresh array).
_BUILDS = tuple(op[0] for op in (pickle.TUPLE, pickle.TUPLE1, pickle.TUPLE2, pickle.TUPLE3, pickle.REDUCE))
_BUILDS += tuple(op[0] for op in (pickle.NEWOBJ, pickle.NEWOBJ_EX, pickle.INST, pickle.OBJ, pickle.BUILD))


def nesting_checked(dispatch: dict[int, Any], *, check: bool = True) -> None:
    """Have an unpickler's ``dispatch`` table (whose instances hold a :class:`Nesting` as
    ``nesting``) show it every object its opcodes build, or with ``check=False`` no longer (an
    unpickler that builds none of these values, and bounds the depth of its trees itself)."""
    for op in _BUILDS:
        load = dispatch.get(op)
        unchecked = getattr(load, "unchecked", None)
        if load is None or (unchecked is not None) == check:
            continue
        if not check:
            dispatch[op] = unchecked
            continue

        def run(self: Any, load: Any = load) -> None:
            load(self)
            self.nesting.built(self.stack[-1])

        run.unchecked = load  # type: ignore[attr-defined]
        dispatch[op] = run


#: What hashes (tuples; slices from 3.12) or is freed (slices) by recursing into its items in C.
_HASHED = (tuple, slice)
#: A tuple of at most this many items, none of them a tuple or slice, is not kept by id: looking
#: at it again costs no more than looking it up.
_SMALL = 8


def _items(value: Any) -> Any:
    return (value.start, value.stop, value.step) if type(value) is slice else value


def _numpy() -> Any:
    """numpy, if something imported it (an unpickler builds arrays only through it)."""
    return sys.modules.get("numpy")


def _children(value: Any) -> Any:
    """What freeing ``value`` (one of :data:`_FREED_IN_C`, or an array) frees in C."""
    if type(value) is slice:
        return (value.start, value.stop, value.step)
    if type(value) is collections.defaultdict:
        return [value.default_factory, *value.keys(), *value.values()]
    if type(value) is collections.deque:
        return value
    return array_objects(value) if value.dtype.hasobject else ()


class Nesting:
    """One unpickler's record of what it built (see the module's docstring)."""

    def __init__(self, **where: Any) -> None:
        self.where = where
        self._depths: dict[int, tuple[Any, int]] = {}  # id -> (tuple or slice, its depth)
        self._freed_in_c: list[Any] = []  # slices, deques, defaultdicts and arrays built

    def _refuse(self, what: str) -> ArchiveLimitError:
        return ArchiveLimitError(
            f"a value nests {what} more than {MAX_DEPTH} deep (hashing or freeing it would overflow the "
            "interpreter's C stack).",
            **self.where,
        )

    def built(self, value: Any) -> None:
        """Note ``value``, just built; refuse a tuple or slice nested too deeply."""
        kind = type(value)
        if kind is tuple:  # most often, and most often flat: no call
            for item in value:
                if isinstance(item, _HASHED):
                    break
            else:
                if len(value) > _SMALL:
                    self._depths[id(value)] = (value, 1)
                return
        elif kind in _FREED_IN_C or kind is getattr(_numpy(), "ndarray", None):
            self._freed_in_c.append(value)
        if (kind is tuple or kind is slice or isinstance(value, tuple)) and id(value) not in self._depths:
            self._depth(value)

    # -- tuples and slices, as they are built ---------------------------------------------
    def _depth(self, value: Any) -> int:
        known = self._depths
        depth = 0
        for item in _items(value):
            if isinstance(item, _HASHED):
                hit = known.get(id(item))
                if hit is not None:
                    below = hit[1]
                else:  # a small flat tuple (not kept), or one a call built inside its result
                    for inner in _items(item):
                        if isinstance(inner, _HASHED):
                            return self._keep(value, self._scan(value))
                    below = self._keep(item, 1)
                if below > depth:
                    depth = below
        return self._keep(value, depth + 1)

    def _keep(self, value: Any, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise self._refuse("tuples and slices")
        if depth > 1 or len(_items(value)) > _SMALL:
            self._depths[id(value)] = (value, depth)
        return depth

    def _scan(self, value: Any) -> int:
        """The depth of ``value``, which holds tuples or slices not seen yet, without recursion."""
        known = self._depths
        frames: list[list[Any]] = [[value, 0, 0]]  # a value, its next item, its deepest item so far
        depth = 1
        while frames:
            frame = frames[-1]
            items = _items(frame[0])
            if frame[1] < len(items):
                item = items[frame[1]]
                frame[1] += 1
                if isinstance(item, _HASHED):
                    hit = known.get(id(item))
                    if hit is not None:
                        frame[2] = max(frame[2], hit[1])
                    elif len(frames) >= MAX_DEPTH:
                        raise self._refuse("tuples and slices")
                    else:
                        frames.append([item, 0, 0])
                continue
            frames.pop()
            depth = frame[2] + 1
            if depth > MAX_DEPTH:
                raise self._refuse("tuples and slices")
            if depth > 1 or len(items) > _SMALL:
                known[id(frame[0])] = (frame[0], depth)
            if frames:
                frames[-1][2] = max(frames[-1][2], depth)
        return depth

    # -- what is freed in C, once the pickle is read ----------------------------------------
    def finish(self) -> None:
        """Refuse (after emptying them) values freed in C that nest too deeply."""
        if self._freed_in_c and self._longest() > MAX_DEPTH:
            self.release()
            raise self._refuse("slices, deques, defaultdicts or object arrays")

    def fail(self) -> None:
        """The pickle failed part-way: let go of what it built without a deep recursion."""
        if self._freed_in_c and self._longest() > MAX_DEPTH:
            self.release()

    def _longest(self) -> int:
        """The longest chain of :data:`_FREED_IN_C` values and arrays, each inside the one
        before; one pass over them (a value inside its own chain ends it)."""
        nodes = {id(v): v for v in self._freed_in_c}
        height: dict[int, int] = {}
        longest = 0
        for start in nodes.values():
            if id(start) in height:
                continue
            active = {id(start)}
            frames = [[start, iter(_children(start)), 1]]  # a value, its children, 1 + the tallest
            while frames:
                frame = frames[-1]
                for child in frame[1]:
                    if id(child) in nodes and id(child) not in active:
                        if id(child) in height:
                            frame[2] = max(frame[2], 1 + height[id(child)])
                        else:
                            active.add(id(child))
                            frames.append([child, iter(_children(child)), 1])
                            break
                else:
                    frames.pop()
                    active.discard(id(frame[0]))
                    height[id(frame[0])] = frame[2]
                    longest = max(longest, frame[2])
                    if frames:
                        frames[-1][2] = max(frames[-1][2], 1 + frame[2])
        return longest

    def release(self) -> None:
        """Empty every deque, defaultdict and object array built (each one's items held here
        first), then let the items go one by one: none holds another any more."""
        held: list[Any] = []
        for value in self._freed_in_c:
            if type(value) is collections.deque:
                held.extend(value)
                value.clear()
            elif type(value) is collections.defaultdict:
                held.extend((value.default_factory, *value.items()))
                value.default_factory = None
                value.clear()
            elif type(value) is not slice and value.dtype.hasobject and value.flags.writeable:
                held.extend(array_objects(value))
                value[...] = _numpy().zeros((), dtype=value.dtype)  # None, or 0 in a record
        self._freed_in_c.clear()
        self._depths.clear()
        while held:
            held.pop()
