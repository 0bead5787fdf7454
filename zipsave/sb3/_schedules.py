"""SB3's schedule closures (SB3 < 2.7 pickled them by value; SB3 >= 2.7 still does when a user
passes one, wrapped in ``FloatSchedule``) recognised from the pickle alone and rebuilt as SB3's
schedule objects; nothing the archive holds is imported, called or executed."""

from __future__ import annotations

import base64
import io
import math
import pickle
from typing import Any

from .._codec import SERIALIZED_KEY, TYPE_KEY
from .._trust import prescan_pickle
from ._codeshape import CodeShape, shape_problem
from ._schedule_spec import NotASchedule, Spec, buildable, built, spec_text
from ._zoo import described_value, zoo_specs

__all__ = ["NotASchedule", "closures_in", "rebuilt_on_load", "recognise_schedule", "schedule_texts"]

_MODULE = "stable_baselines3.common.utils"
_CLOUDPICKLE = ("cloudpickle.cloudpickle", "cloudpickle.cloudpickle_fast")

#: qualname -> the shape of SB3's own closures' code on every CPython 3.8-3.13 (SB3 1.x-2.6 wrote
#: them from the same source; ``get_schedule_fn``'s lambda exists since SB3 2.3, before which
#: it returned the ``constant_fn`` closure itself).
_KNOWN: dict[str, CodeShape] = {
    "constant_fn.<locals>.func": CodeShape("func", ("_",), (("val",),), (), (None,)),
    "get_linear_fn.<locals>.func": CodeShape(
        "func", ("progress_remaining",), (("end", "end_fraction", "start"),), (), (None, 1)
    ),
    "get_schedule_fn.<locals>.<lambda>": CodeShape(
        "<lambda>", ("progress_remaining",), (("value_schedule",),), ("float",), (None,)
    ),
}


class _ScheduleObject:
    """One of SB3's schedule classes as the pickle builds it (NEWOBJ, then BUILD sets the
    ``__dict__``), kept as inert data; ``kind`` is the class name."""

    kind = ""


#: SB3's schedule classes (SB3 >= 2.7) a closure may sit in, e.g. ``FloatSchedule(get_linear_fn(...))``.
_OBJECTS = {
    name: type(name, (_ScheduleObject,), {"kind": name, "__module__": __name__})
    for name in ("FloatSchedule", "LinearSchedule", "ConstantSchedule")
}


class _Code:
    def __init__(self, *args: Any) -> None:
        self.args = args


class _Cell:
    def __init__(self, *value: Any) -> None:
        self.value = value


class _Function:
    """What cloudpickle's ``_make_function`` + ``_function_setstate`` (or, before cloudpickle
    1.5, ``_make_skel_func`` + ``_fill_function``) describe, as inert data."""

    cell_count: int | None = None

    def __init__(self, code: Any, globals_: Any, name: Any, argdefs: Any, closure: Any) -> None:
        self.code, self.globals, self.name, self.argdefs, self.closure = code, globals_, name, argdefs, closure
        self.state: dict = {}
        self.slots: dict = {}


def _builtin_type(name: Any) -> Any:
    if name == "CodeType":
        return _Code
    if name in ("LambdaType", "FunctionType"):
        # cloudpickle 1.x (Python 3.7's): the function type itself, called as `_make_function` is later
        return _make_function
    raise NotASchedule(f"cloudpickle._builtin_type({name!r})")


def _make_function(*args: Any) -> _Function:
    if len(args) != 5:
        raise NotASchedule("an unknown cloudpickle function layout")
    return _Function(*args)


def _function_setstate(func: Any, state: Any) -> None:
    if not (isinstance(func, _Function) and isinstance(state, tuple) and len(state) == 2):
        raise NotASchedule("an unknown cloudpickle function state")
    func.state, func.slots = state[0], state[1]


def _make_skel_func(code: Any, cell_count: Any, base_globals: Any = None) -> _Function:
    """cloudpickle < 1.5: a function skeleton with ``cell_count`` empty cells, filled below."""
    if type(cell_count) is not int or not -1 <= cell_count < 64:
        raise NotASchedule("an unknown cloudpickle function skeleton")
    func = _Function(code, base_globals, None, None, None)
    func.cell_count = cell_count
    return func


def _fill_function(func: Any, state: Any, *rest: Any) -> _Function:
    """cloudpickle < 1.5: the skeleton's attributes and closure values, as the slots
    ``_function_setstate`` gives later versions."""
    if rest or not (isinstance(func, _Function) and isinstance(state, dict)):
        raise NotASchedule("an unknown cloudpickle function state")
    values = state.get("closure_values")
    if not isinstance(values, list) or len(values) != getattr(func, "cell_count", None):
        raise NotASchedule("a cloudpickle closure that does not fit its skeleton")
    func.slots = {
        "__qualname__": state.get("qualname"),
        "__module__": state.get("module"),
        "__closure__": tuple(_Cell(value) for value in values),
    }
    return func


_STUBS = {
    "_builtin_type": _builtin_type,
    "_make_function": _make_function,
    "_function_setstate": _function_setstate,
    "_make_skel_func": _make_skel_func,
    "_fill_function": _fill_function,
    "_make_empty_cell": lambda: _Cell(),
    "_make_cell": lambda *value: _Cell(*value),
}


class _DescribingUnpickler(pickle.Unpickler):
    """Reads a cloudpickled function as inert records: every global resolves to one of the stubs
    above (which only store their arguments) or the pickle is refused; nothing is imported."""

    def find_class(self, module: str, name: str) -> Any:
        if module in _CLOUDPICKLE and name in _STUBS:
            return _STUBS[name]
        if (module, name) == ("builtins", "float"):  # the `-> float` annotation
            return "float"
        if module == _MODULE and name in _OBJECTS:
            return _OBJECTS[name]
        raise NotASchedule(f"the pickle names `{module}.{name}`")

    def persistent_load(self, pid: Any) -> Any:
        raise NotASchedule("the pickle uses persistent ids")


def _attributes(func: _Function) -> dict[str, Any]:
    state = func.state if isinstance(func.state, dict) else {}
    slots = func.slots if isinstance(func.slots, dict) else {}
    return {**state, **slots}  # cloudpickle versions split them differently


def _zoo_value(func: _Function) -> float | None:
    """The number in the RL Zoo's closure (rl-zoo3 < 2.7), or ``None`` when it is another function."""
    cells = _attributes(func).get("__closure__")
    if not (
        isinstance(func.code, _Code)
        and isinstance(cells, tuple)
        and all(isinstance(c, _Cell) and len(c.value) == 1 for c in cells)
    ):
        return None
    return described_value(func.code.args, _attributes(func), [c.value[0] for c in cells])


def _closure_values(func: _Function) -> tuple[str, list[Any]]:
    """The function's qualname and its closure's values, once its identity is checked."""
    slots = _attributes(func)
    module, qualname = slots.get("__module__"), slots.get("__qualname__")
    if module != _MODULE or qualname not in _KNOWN:
        raise NotASchedule(f"`{module}.{qualname}` is not one of SB3's schedule closures")
    code = func.code.args if isinstance(func.code, _Code) else None
    problem = shape_problem(code, qualname, _KNOWN[qualname])
    if problem is not None:
        raise NotASchedule(problem)
    cells = slots.get("__closure__")
    if (
        not isinstance(cells, tuple)
        or len(cells) != len(_KNOWN[qualname].freevars[0])
        or not all(isinstance(c, _Cell) and len(c.value) == 1 for c in cells)
    ):
        raise NotASchedule(f"`{qualname}` has an unexpected closure")
    return qualname, [c.value[0] for c in cells]


def _number(value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise NotASchedule(f"a schedule holds {value!r}, not a finite number")
    return float(value)


def _state(obj: _ScheduleObject, names: set[str]) -> dict[str, Any]:
    state = vars(obj)
    if set(state) != names:
        raise NotASchedule(f"a {obj.kind} holding {sorted(state)}, not {sorted(names)}")
    return state


def _spec(func: Any) -> Spec:
    """What the inert records of a pickle describe, once each part is checked to be exactly SB3's
    (or the RL Zoo's) schedule; :class:`NotASchedule` for anything else."""
    if isinstance(func, _ScheduleObject):
        if func.kind == "FloatSchedule":
            return ("float", _spec(_state(func, {"value_schedule"})["value_schedule"]))
        if func.kind == "LinearSchedule":
            state = _state(func, {"start", "end", "end_fraction"})
            return ("linear", *(_number(state[k]) for k in ("start", "end", "end_fraction")))
        return ("constant", _number(_state(func, {"val"})["val"]))
    if not isinstance(func, _Function):
        raise NotASchedule("the pickle holds no function")
    zoo = _zoo_value(func)  # the RL Zoo's own closure (rl-zoo3 < 2.7), in any cloudpickle layout
    if zoo is not None:
        return ("zoo", zoo)
    qualname, values = _closure_values(func)
    if qualname == "constant_fn.<locals>.func":
        return ("constant", _number(values[0]))
    if qualname == "get_linear_fn.<locals>.func":
        end, end_fraction, start = (_number(v) for v in values)
        return ("linear", start, end, end_fraction)
    return ("float", _spec(values[0]))  # get_schedule_fn's wrapper around one of the above


def _entry_spec(value: Any) -> Spec:
    if not isinstance(value, dict) or not isinstance(value.get(SERIALIZED_KEY), str):
        raise NotASchedule("the entry holds no pickle")
    try:
        payload = base64.b64decode(value[SERIALIZED_KEY], validate=True)
        prescan_pickle(payload)  # no hash flood, no length past the end: linear in the payload
        func = _DescribingUnpickler(io.BytesIO(payload)).load()
    except NotASchedule:
        raise
    except Exception as err:  # a malformed pickle is simply not a schedule
        raise NotASchedule(f"the pickle cannot be read ({type(err).__name__}: {err})") from err
    return _spec(func)


def recognise_schedule(value: Any) -> Any:
    """SB3's schedule object equivalent to a ``data`` entry holding one of SB3's own schedule
    closures (``constant_fn``, ``get_linear_fn``, ``get_schedule_fn`` of a constant), as SB3 < 2.7
    pickled them, alone or inside SB3's schedule objects (``FloatSchedule(get_linear_fn(...))``,
    what SB3 >= 2.7 stores for a closure passed as ``learning_rate`` or ``clip_range``); matched
    on module, qualname and the shape of the code (names, constants, free variables), so a
    closure pickled by any CPython 3.8-3.13 is recognised; nothing of it runs.

    Raises
    ------
    NotASchedule
        The entry is anything else (a user's lambda, another function, a damaged pickle).
    """
    return built(_entry_spec(value))


def _specs_in(raw: Any, skip: Any = ()) -> dict[str, Spec]:
    """``{key: spec}`` for the top-level entries of a parsed ``data`` member that hold SB3's
    schedule closures or objects, or the RL Zoo's closures."""
    out = {}
    for key, entry in raw.items() if isinstance(raw, dict) else ():
        hint = str(entry.get(TYPE_KEY, "")) if isinstance(entry, dict) else ""
        if key in skip or not ("function" in hint or "Schedule" in hint):
            continue
        try:
            out[key] = _entry_spec(entry)
        except NotASchedule:
            continue
    return {**zoo_specs(raw, skip={*skip, *out}), **out}


def closures_in(raw: Any, skip: Any = ()) -> dict[str, Any]:
    """``{key: schedule}`` for the top-level entries of a parsed ``data`` member that hold SB3's
    or the RL Zoo's schedule closures, rebuilt (what every load takes as ``custom_objects``)."""
    out = {}
    for key, spec in _specs_in(raw, skip).items():
        try:
            out[key] = built(spec)
        except NotASchedule:  # the RL Zoo's, without rl-zoo3
            continue
    return out


def schedule_texts(raw: Any) -> dict[str, str]:
    """``{key: "constant 0.0003"}`` for the entries :func:`closures_in` rebuilds, said in words
    from the same recognition, without importing SB3, rl-zoo3 or torch (``zipsave inspect``)."""
    return {key: spec_text(spec) for key, spec in _specs_in(raw).items() if buildable(spec)}


def rebuilt_on_load(key: str, entry: dict[str, Any]) -> bool:
    """Whether a load rebuilds this pickled code without running it (SB3's and the Zoo's
    schedule closures, alone or in SB3's schedule objects): what a save need not warn about."""
    spec: Spec | None
    try:
        spec = _entry_spec(entry)
    except NotASchedule:
        spec = zoo_specs({key: entry}).get(key)
    try:
        return spec is not None and built(spec) is not None
    except NotASchedule:
        return False
