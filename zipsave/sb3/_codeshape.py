"""The shape of a code object as cloudpickle pickled it, read the same way whichever CPython
wrote it: the arguments cloudpickle passes to ``types.CodeType`` are named by their layout, and
a known closure (SB3's schedule helpers, the RL Zoo's ``linear_schedule``) is matched on what
does not change between CPython 3.8 and 3.13: its name, argument counts, local, free and
global names, constants and flags. The bytecode itself differs on every minor version, so it
is never compared; nothing is executed either way (the rebuilt object is the installed
library's own, built from the numbers in the closure cells).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CodeShape", "shape_problem"]

_TAIL = ("co_freevars", "co_cellvars")
_HEAD = (
    "co_argcount",
    "co_posonlyargcount",
    "co_kwonlyargcount",
    "co_nlocals",
    "co_stacksize",
    "co_flags",
    "co_code",
    "co_consts",
    "co_names",
    "co_varnames",
    "co_filename",
    "co_name",
)
#: Number of ``CodeType`` arguments -> their names, per cloudpickle's ``_code_reduce``.
_LAYOUTS = {
    # CPython 3.11 and later: co_qualname and the exception table
    18: (*_HEAD, "co_qualname", "co_firstlineno", "co_linetable", "co_exceptiontable", *_TAIL),
    # CPython 3.8-3.10 (co_lnotab, or co_linetable on 3.10)
    16: (*_HEAD, "co_firstlineno", "co_linetable", *_TAIL),
    # CPython 3.7 and older: no positional-only arguments
    15: (_HEAD[0], *_HEAD[2:], "co_firstlineno", "co_linetable", *_TAIL),
}
#: Flags a plain function never has: *args, **kwargs, generator, coroutine, async generator.
_UNEXPECTED_FLAGS = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200


@dataclass(frozen=True)
class CodeShape:
    """What a known closure's code object holds on every CPython 3.8-3.13.

    ``consts`` compares strings (a docstring) with their whitespace collapsed: CPython 3.13
    strips a docstring's indentation.
    """

    name: str
    varnames: tuple[str, ...]
    freevars: tuple[tuple[str, ...], ...]  # each accepted spelling
    names: tuple[str, ...]
    consts: tuple


def _normal(value: Any) -> Any:
    return " ".join(value.split()) if isinstance(value, str) else value


def _same_constants(found: Any, expected: tuple) -> bool:
    if not isinstance(found, tuple) or len(found) != len(expected):
        return False
    # type() too: 1 == 1.0 == True, but a float constant is other code than an int one
    return all(type(a) is type(b) and _normal(a) == _normal(b) for a, b in zip(found, expected))


def shape_problem(args: Any, qualname: str, shape: CodeShape) -> str | None:
    """``None`` when ``args`` (cloudpickle's ``CodeType`` arguments, as inert data) describe a
    code object of ``shape``, else what differs, for the reason a value was not recognised."""
    names = _LAYOUTS.get(len(args)) if isinstance(args, tuple) else None
    if names is None:
        return "its code object has an unknown layout"
    code = dict(zip(names, args))
    for field in ("co_varnames", "co_freevars", "co_cellvars", "co_names"):
        if not (isinstance(code[field], tuple) and all(type(n) is str for n in code[field])):
            return f"`{qualname}` has a malformed code object"
    counts = (code["co_argcount"], code.get("co_posonlyargcount", 0), code["co_kwonlyargcount"], code["co_nlocals"])
    if counts != (1, 0, 0, len(shape.varnames)) or code["co_varnames"] != shape.varnames:
        return f"`{qualname}` has another signature than expected"
    if code["co_name"] != shape.name or code.get("co_qualname", qualname) != qualname:
        return f"`{qualname}` has a code object named otherwise"
    if code["co_freevars"] not in shape.freevars or code["co_cellvars"] != ():
        return f"`{qualname}` has other free variables than expected"
    if type(code["co_flags"]) is not int or code["co_flags"] & _UNEXPECTED_FLAGS:
        return f"`{qualname}` is not a plain function"
    if not isinstance(code["co_code"], bytes) or code["co_names"] != shape.names:
        return f"`{qualname}` uses other names than expected"
    if not _same_constants(code["co_consts"], shape.consts):
        return f"`{qualname}` has other constants than expected"
    return None
