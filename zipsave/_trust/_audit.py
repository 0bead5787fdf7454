"""An audit of the globals a pickle would import, read from its opcodes without importing or
executing anything."""

from __future__ import annotations

import bisect
import pickletools
from typing import Any

from ..exceptions import DecodeError, UnsafeGlobalError
from ._names import BY_VALUE_HINT, DYNAMIC_GLOBAL, canonical, fix_py2_name

__all__ = ["by_value_classes", "explain_by_value", "pickle_globals"]

# -- the audit -------------------------------------------------------------------------------
_STRING_OPS = frozenset(
    {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"}
)
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_EXT_OPS = frozenset({"EXT1", "EXT2", "EXT4"})
_MARK = object()
_UNKNOWN = object()
#: cloudpickle's `_builtin_type(name)`, `getattr(types, name)`: a call of it with a literal name
#: imports `types.<name>` (what the restricted unpickler answers it with), and is audited so.
_BUILTIN_TYPE = "cloudpickle.cloudpickle._builtin_type"


class _Named(str):
    """A global on the audit's stack: its dotted name."""


def _audit_name(module: str, qualname: str, proto: int) -> str:
    if proto < 3:
        module, qualname = fix_py2_name(module, qualname)
    module, qualname = canonical(module, qualname)
    return f"{module}.{qualname}"


def pickle_globals(payload: bytes) -> list[str]:
    """Every global a pickle would import, read from its opcodes without running it.

    The names are spelled as :meth:`TrustPolicy.is_trusted` sees them: Python 2 names are
    mapped as pickle maps them (``__builtin__.set`` is ``builtins.set``) and ``numpy.core``
    is ``numpy._core``, so each can be passed to ``trusted=`` as it is.

    Parameters
    ----------
    payload : bytes
        A pickle, protocol 0-5.

    Returns
    -------
    list of str
        Sorted, unique ``module.qualname`` names from GLOBAL, INST and STACK_GLOBAL (whose
        operands are followed through the stack and the memo). ``EXT1/2/4`` appear as
        ``"copyreg extension N"``; a STACK_GLOBAL whose operands are computed rather than
        literal strings appears as ``"<STACK_GLOBAL with a computed name>"``.

    Raises
    ------
    DecodeError
        If the payload is not a well-formed pickle.

    Examples
    --------
    >>> import pickle
    >>> from collections import OrderedDict
    >>> pickle_globals(pickle.dumps([OrderedDict(), {1}], protocol=2))
    ['builtins.set', 'collections.OrderedDict']
    """
    if isinstance(payload, memoryview):
        payload = payload.tobytes()
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}.")
    found: set[str] = set()
    stack: list[Any] = []
    marks: list[int] = []  # where each MARK was pushed: the last one is found in O(1), not by a scan
    memo: dict[Any, Any] = {}
    proto: Any = 0
    pos: Any = 0
    arg: Any
    uses = resolved = 0  # of `_BUILTIN_TYPE` on the stack, and of them called with a literal name
    try:
        for opcode, arg, pos in pickletools.genops(payload):
            name = opcode.name
            if name == "PROTO":
                proto = arg
            elif name in ("GLOBAL", "INST"):
                module, _, qualname = arg.partition(" ")
                found.add(named := _audit_name(module, qualname, proto))
            elif name in _EXT_OPS:
                found.add(f"copyreg extension {arg}")

            if name in _PUT_OPS or name == "MEMOIZE":
                # Stores the top of the stack without changing it (pickletools models MEMOIZE
                # as a pop and a push, which would lose the string).
                if not stack or stack[-1] is _MARK:
                    raise DecodeError(f"malformed pickle: {name} at byte {pos} has nothing to store.")
                memo[arg if name in _PUT_OPS else len(memo)] = stack[-1]
                continue

            before, after = opcode.stack_before, opcode.stack_after
            if pickletools.markobject in before or (name == "POP" and stack and stack[-1] is _MARK):
                # An entry whose MARK was popped as an operand points past the stack or at
                # something else: dropped. The last that still holds a MARK is the topmost.
                while marks and (marks[-1] >= len(stack) or stack[marks[-1]] is not _MARK):
                    marks.pop()
                if not marks:
                    raise DecodeError(f"malformed pickle: {name} at byte {pos} has no MARK to pop to.")
                del stack[marks.pop() :]
                count = before.index(pickletools.markobject) if pickletools.markobject in before else 0
            else:
                count = len(before)
            if len(stack) < count:
                raise DecodeError(f"malformed pickle: {name} at byte {pos} pops from a stack that is too short.")
            popped = stack[len(stack) - count :]
            del stack[len(stack) - count :]

            if name in _STRING_OPS:
                pushed: list[Any] = [arg]
            elif name in _GET_OPS:
                if arg not in memo:
                    raise DecodeError(f"malformed pickle: {name} at byte {pos} reads memo slot {arg}, never set.")
                pushed = [memo[arg]]
            elif name == "DUP":
                pushed = [popped[0], popped[0]]
            elif name == "STACK_GLOBAL":
                module, qualname = popped
                if isinstance(module, str) and isinstance(qualname, str):
                    found.add(named := _audit_name(module, qualname, proto))
                    pushed = [_Named(named)]
                else:
                    found.add(DYNAMIC_GLOBAL)
                    pushed = [_UNKNOWN]
            elif name == "GLOBAL":
                pushed = [_Named(named)]
            elif name == "TUPLE1" and type(popped[0]) is str:
                pushed = [(popped[0],)]
            elif name == "REDUCE" and popped[0] == _BUILTIN_TYPE and isinstance(popped[1], tuple):
                found.add(f"types.{popped[1][0]}")
                resolved += 1
                pushed = [_UNKNOWN]
            else:
                pushed = [_MARK if item is pickletools.markobject else _UNKNOWN for item in after]
            for item in pushed:
                if item is _MARK:
                    marks.append(len(stack))
                uses += item == _BUILTIN_TYPE
                stack.append(item)
    except DecodeError:
        raise
    except Exception as err:
        raise DecodeError(f"malformed pickle near byte {pos}: {err}.") from err
    if uses and uses == resolved:  # each use a call with a literal name: `types.<name>` is what it imports
        found.discard(_BUILTIN_TYPE)
    return sorted(found)


#: cloudpickle's functions that rebuild a class from the code stored in the pickle.
CLASS_MAKERS = ("_make_skeleton_class", "_make_skeleton_enum")
_SILENT = frozenset({"PROTO", "FRAME", "MARK", "STOP"})
#: Most classes :func:`by_value_classes` names (for a message).
_MOST_NAMED = 8


def by_value_classes(payload: bytes) -> list[str]:
    """The classes a cloudpickle payload stores by value (as code, because cloudpickle could not
    name them by import path: defined in ``__main__`` or in a module it could not import), read
    from the opcodes without running anything. Best effort, for messages: ``module.Name``, or
    ``Name`` where the module is not found; an empty list for anything unreadable."""
    tokens: list[tuple[str, Any]] = []  # ("str", text), ("global", "module.name") or ("op", None)
    memo: dict[Any, tuple[str, Any]] = {}
    try:
        for opcode, arg, _ in pickletools.genops(payload):
            name = opcode.name
            if name in _SILENT:
                continue
            if name in _PUT_OPS or name == "MEMOIZE":
                if tokens:
                    memo[arg if name in _PUT_OPS else len(memo)] = tokens[-1]
            elif name in _GET_OPS:
                tokens.append(memo.get(arg, ("op", None)))
            elif name in _STRING_OPS:
                tokens.append(("str", arg))
            elif name == "STACK_GLOBAL" and len(tokens) >= 2 and tokens[-1][0] == tokens[-2][0] == "str":
                qualname, module = tokens.pop()[1], tokens.pop()[1]
                tokens.append(("global", f"{module}.{qualname}"))
            elif name == "GLOBAL":
                module, _, qualname = str(arg).partition(" ")
                tokens.append(("global", f"{module}.{qualname}"))
            else:
                tokens.append(("op", None))
    except Exception:  # noqa: BLE001 - a malformed pickle names nothing; the load reports it
        return []
    # For each token, the next string after it, and where `"__module__"` is followed by a
    # string: each class maker is then named in O(1) plus a bisection, not by scanning all the
    # tokens after it (a pickle naming the maker 20 000 times took 6 s so).
    next_text: list[Any] = [None] * (len(tokens) + 1)
    for at in range(len(tokens) - 1, -1, -1):
        kind, value = tokens[at]
        next_text[at] = value if kind == "str" else next_text[at + 1]
    module_at = [i for i in range(len(tokens) - 1) if tokens[i] == ("str", "__module__") and tokens[i + 1][0] == "str"]
    found: list[str] = []
    for at, (kind, value) in enumerate(tokens):
        if kind != "global" or not value.startswith("cloudpickle.") or value.rpartition(".")[2] not in CLASS_MAKERS:
            continue
        class_name = next_text[at + 1]
        if not isinstance(class_name, str):
            continue
        after = bisect.bisect_right(module_at, at)
        module = tokens[module_at[after] + 1][1] if after < len(module_at) else None
        full = f"{module}.{class_name}" if module else class_name
        if full not in found:
            found.append(full)
            if len(found) == _MOST_NAMED:
                break
    return found


def explain_by_value(err: UnsafeGlobalError, payload: bytes) -> None:
    """When ``err`` refused one of cloudpickle's class makers, name the classes stored as code in
    its hint (``err.by_value``), and say why ``trusted=`` cannot help."""
    classes = by_value_classes(payload) if err.global_name.endswith(CLASS_MAKERS) else []
    if classes:
        err.by_value = tuple(classes)
        err.hint = BY_VALUE_HINT.format(
            classes=", ".join(f"`{c}`" for c in classes), them="it" if len(classes) == 1 else "them"
        )
        err.args = (err._compose(),)
