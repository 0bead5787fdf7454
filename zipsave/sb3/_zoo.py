"""The RL Zoo's schedule closures (rl-zoo3 < 2.7, and the ``utils/utils.py`` Zoo before it):
recognised from the pickle's opcodes and code identity, and rebuilt as the Zoo's
``SimpleLinearSchedule`` without executing anything from the archive.

The Zoo turned ``learning_rate: lin_0.001`` into ``linear_schedule(0.001)``, a closure that
cloudpickle stores by value (its code object and the closure cell). A safe load refuses it
(it needs ``cloudpickle._make_function``), and the model would train at SB3's default rate.
Here the pickle is read symbolically: its opcodes build a tree of names, calls and plain
values, nothing is imported or called. The tree is accepted only when it is the Zoo's
function: module and qualified name, the shape of its code object (names, constants, free
variables: the same on every CPython 3.8-3.13, unlike its bytecode) and one number in the
closure cell.
"""

from __future__ import annotations

import base64
import pickletools
from typing import Any

from .._trust import prescan_pickle
from ..exceptions import ZipsaveError
from ._codeshape import CodeShape, shape_problem
from ._schedule_spec import NotASchedule, Spec, built

__all__ = ["described_value", "recognise", "schedules_in", "zoo_spec", "zoo_specs"]

_MODULES = ("rl_zoo3.utils", "utils.utils")
_QUALNAME = "linear_schedule.<locals>.func"
_DOC = """
        Progress will decrease from 1 (beginning) to 0
        :param progress_remaining: (float)
        :return: (float)
        """
#: The closure's code on every CPython 3.8-3.13, in both bodies the Zoo's history holds
#: (rl-zoo3 1.x-2.6 closes over ``initial_value_``, the older ``utils/utils.py`` over
#: ``initial_value``): ``return progress_remaining * initial_value_`` under the docstring above.
_SHAPE = CodeShape("func", ("progress_remaining",), (("initial_value_",), ("initial_value",)), (), (_DOC,))


class _Node:
    """A value the pickle would build, kept as a description."""


class _Global(_Node):
    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name


class _Call(_Node):
    def __init__(self, func: Any, args: Any) -> None:
        self.func, self.args = func, args


class _Built(_Node):
    def __init__(self, obj: Any, state: Any) -> None:
        self.obj, self.state = obj, state


class _Unsupported(Exception):
    pass


_MARK = object()


def _evaluate(payload: bytes) -> tuple[Any, list[_Call]]:
    """The pickle's result and every call it makes, as nodes. Imports and calls nothing."""
    stack: list[Any] = []
    marks: list[int] = []  # where each MARK was pushed, so that finding the last one is O(1)
    memo: dict[int, Any] = {}  # by index: a slot number is 4 bytes of pickle, a list of that many is not
    calls: list[_Call] = []

    def pop_mark() -> list[Any]:
        # An entry whose MARK a malformed pickle popped otherwise points past the stack or at
        # something else: dropped. The last that still holds a MARK is the topmost one.
        while marks and (marks[-1] >= len(stack) or stack[marks[-1]] is not _MARK):
            marks.pop()
        if not marks:
            raise _Unsupported("MARK")
        index = marks.pop()
        items = stack[index + 1 :]
        del stack[index:]
        return items

    arg: Any
    for op, arg, _ in pickletools.genops(payload):
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            break
        if name == "MARK":
            marks.append(len(stack))
            stack.append(_MARK)
        elif name == "POP":
            stack.pop()
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            stack.append(memo[int(arg)])
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[int(arg)] = stack[-1]
        elif name == "STACK_GLOBAL":
            qual, module = stack.pop(), stack.pop()
            stack.append(_Global(module, qual))
        elif name == "GLOBAL":
            module, _, qual = str(arg).partition(" ")
            stack.append(_Global(module, qual))
        elif name in ("REDUCE", "NEWOBJ"):
            args = stack.pop()
            call = _Call(stack.pop(), args)
            calls.append(call)
            stack.append(call)
        elif name == "BUILD":
            state = stack.pop()
            stack.append(_Built(stack.pop(), state))
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            stack[-n:] = [tuple(stack[-n:])]
        elif name == "TUPLE":
            stack.append(tuple(pop_mark()))
        elif name == "EMPTY_LIST":
            stack.append([])
        elif name == "APPEND":
            item = stack.pop()
            stack[-1].append(item)
        elif name == "APPENDS":
            stack[-1].extend(pop_mark())
        elif name == "EMPTY_DICT":
            stack.append({})
        elif name == "SETITEM":
            value, key = stack.pop(), stack.pop()
            stack[-1][key] = value
        elif name == "SETITEMS":
            pairs = pop_mark()
            stack[-1].update(zip(pairs[::2], pairs[1::2]))
        elif name == "NONE":
            stack.append(None)
        elif name in ("NEWTRUE", "NEWFALSE"):
            stack.append(name == "NEWTRUE")
        elif op.arg is not None and isinstance(arg, (int, float, str, bytes)) and not isinstance(arg, bool):
            stack.append(arg)  # numbers, strings and bytes of every encoding
        else:
            raise _Unsupported(name)
    if len(stack) != 1:
        raise _Unsupported("stack")
    return stack[0], calls


def _code_fields(node: Any) -> tuple | None:
    """The arguments of ``CodeType(...)`` if ``node`` builds a code object the cloudpickle way."""
    if not (isinstance(node, _Call) and isinstance(node.func, _Call) and isinstance(node.args, tuple)):
        return None
    maker = node.func
    if not (isinstance(maker.func, _Global) and maker.func.name == "_builtin_type" and maker.args == ("CodeType",)):
        return None
    return node.args


def _closure_value(root: _Call, calls: list[_Call]) -> float | None:
    """The number in the closure cell, if ``root`` is exactly the Zoo's function."""
    if not (
        isinstance(root.func, _Global)
        and root.func.name == "_make_function"
        and root.func.module.startswith("cloudpickle")
    ):
        return None
    fields = _code_fields(root.args[0]) if isinstance(root.args, tuple) and root.args else None
    if fields is None or shape_problem(fields, _QUALNAME, _SHAPE) is not None:
        return None
    setters = [
        c
        for c in calls
        if isinstance(c.func, _Global)
        and c.func.name == "_function_setstate"
        and isinstance(c.args, tuple)
        and len(c.args) == 2
        and c.args[0] is root
    ]
    if len(setters) != 1 or not (isinstance(setters[0].args[1], tuple) and len(setters[0].args[1]) == 2):
        return None
    state, slots = setters[0].args[1]
    if not (isinstance(state, dict) and isinstance(slots, dict)):
        return None
    attrs = {**state, **slots}  # cloudpickle versions split them differently
    if attrs.get("__qualname__") != _QUALNAME or attrs.get("__module__") not in _MODULES:
        return None
    closure = attrs.get("__closure__")
    if not (isinstance(closure, tuple) and len(closure) == 1 and isinstance(closure[0], _Call)):
        return None
    cell = closure[0]
    if not (
        isinstance(cell.func, _Global)
        and cell.func.name == "_make_cell"
        and isinstance(cell.args, tuple)
        and len(cell.args) == 1
    ):
        return None
    value = cell.args[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def zoo_spec(payload: bytes) -> Spec | None:
    """What a pickled Zoo schedule closure is (alone, or inside SB3's ``FloatSchedule``), as a
    spec (``("zoo", value)`` or ``("float", ("zoo", value))``); ``None`` when the pickle is
    anything else. Imports nothing."""
    try:
        prescan_pickle(payload)  # no hash flood, no length past the end: linear in the payload
        root, calls = _evaluate(payload)
    except (_Unsupported, ZipsaveError, ValueError, IndexError, KeyError, TypeError, AttributeError):
        return None
    wrapped = False
    if isinstance(root, _Built) and isinstance(root.obj, _Call) and isinstance(root.obj.func, _Global):
        owner = root.obj.func
        if (owner.module, owner.name) != ("stable_baselines3.common.utils", "FloatSchedule"):
            return None
        if not (isinstance(root.state, dict) and set(root.state) == {"value_schedule"}):
            return None
        root, wrapped = root.state["value_schedule"], True
    if not isinstance(root, _Call):
        return None
    value = _closure_value(root, calls)
    if value is None:
        return None
    return ("float", ("zoo", value)) if wrapped else ("zoo", value)


def recognise(payload: bytes) -> Any:
    """Rebuild a pickled Zoo schedule closure (alone, or inside SB3's ``FloatSchedule``) as
    the installed Zoo's linear schedule (``rl_zoo3.utils.SimpleLinearSchedule``, or before
    rl-zoo3 2.7 its ``linear_schedule``); ``None`` when the pickle is anything else or rl-zoo3
    is not installed."""
    spec = zoo_spec(payload)
    try:
        return None if spec is None else built(spec)
    except NotASchedule:  # without rl-zoo3
        return None


def described_value(code_fields: tuple, attrs: dict, cells: list[Any]) -> float | None:
    """The number in the Zoo's closure already read as inert records (by SB3's schedule
    recogniser, which finds the Zoo's closure inside ``get_schedule_fn``'s lambda: what SB3 < 2.7
    stored for ``clip_range: lin_0.2``): its code fields, its function attributes and its closure
    cells' values. ``None`` when it is not exactly the Zoo's function."""
    if attrs.get("__qualname__") != _QUALNAME or attrs.get("__module__") not in _MODULES:
        return None
    if shape_problem(code_fields, _QUALNAME, _SHAPE) is not None or len(cells) != 1:
        return None
    value = cells[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def zoo_specs(raw: Any, skip: Any = ()) -> dict[str, Spec]:
    """The Zoo's schedules among the entries of a parsed ``data`` member, as specs."""
    out = {}
    for key, entry in raw.items() if isinstance(raw, dict) else ():
        if key in skip or not isinstance(entry, dict) or not isinstance(entry.get(":serialized:"), str):
            continue
        hint = str(entry.get(":type:", ""))
        if "function" not in hint and "FloatSchedule" not in hint:
            continue
        try:
            payload = base64.b64decode(entry[":serialized:"], validate=True)
        except ValueError:
            continue
        spec = zoo_spec(payload)
        if spec is not None:
            out[key] = spec
    return out


def schedules_in(raw: Any, skip: Any = ()) -> dict[str, Any]:
    """The Zoo's schedules among the entries of a parsed ``data`` member, rebuilt (none without
    rl-zoo3)."""
    out = {}
    for key, spec in zoo_specs(raw, skip).items():
        try:
            out[key] = built(spec)
        except NotASchedule:
            continue
    return out
