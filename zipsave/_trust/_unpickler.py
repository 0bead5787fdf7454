"""The restricted unpickler: pickle's pure-Python unpickler with every import, call and
in-place change gated by a :class:`~zipsave._trust.TrustPolicy`."""

from __future__ import annotations

import copyreg
import enum
import pickle
import sys
import types
from typing import Any, ClassVar

from .._bounds import check_int
from .._invariants import check_structure
from ..exceptions import DecodeError, UnsafeGlobalError, ZipsaveError
from ._audit import explain_by_value
from ._bounded import BoundedUnpickler
from ._checks import Memo, check_bit_generator_state, check_dtype, check_seed_sequence, dtype_state_problem
from ._guards import (
    array_state_problem,
    build_state_problem,
    call_problem,
    check_keys,
    new_problem,
    numpy_random_kind,
    result_problem,
    size_problem,
)
from ._names import canonical, fix_py2_name, numpy_major
from ._policy import TrustPolicy
from ._random import random_helpers
from ._space_check import built_problem
from ._substitutes import Owners, legacy_space_state, owns_trusted, substitutes

__all__ = ["restricted_loads"]


class _RestrictedUnpickler(BoundedUnpickler):
    """pickle's pure-Python unpickler with every import, call and in-place change gated.

    The C ``pickle.Unpickler`` only lets a subclass hook imports; BUILD, REDUCE and NEWOBJ run
    inside it unchecked, and those are where allowlisted numpy pieces become memory-unsafe.
    The pure-Python one dispatches each opcode through a table a subclass can replace.
    """

    dispatch: ClassVar[dict[int, Any]] = dict(BoundedUnpickler.dispatch)

    def __init__(
        self, payload: Any, policy: TrustPolicy, where: dict[str, Any], storages: Any = None, limits: Any = None
    ) -> None:
        # Sets and dicts, integers, reads and allocations bounded by the payload's size (BoundedUnpickler).
        super().__init__(payload, limits=limits, **where)
        self._budget, self._keys = self.budget, self.keys
        self._storages, self.owners, self.memo = storages, Owners(), Memo()
        self._policy = policy
        self._where = where
        # id -> object (and its name) for everything find_class returned (the references keep ids unique)
        self._imported, self._names = self.owners.imported, self.owners.names
        # id -> object for the classes the caller named, admitted as references only.
        self._references: dict[int, Any] = {}
        self._guards = {
            "copyreg._reconstructor": self._reconstructor,
            "copyreg.__newobj__": self._newobj,
            "copyreg.__newobj_ex__": self._newobj_ex,
            "_codecs.encode": self._latin1_encode,
            **random_helpers(self._error, self._was_imported, self._describe),
        }
        imported_name = lambda obj: self._names.get(id(obj)) if self._was_imported(obj) else None  # noqa: E731
        self._substitutes = substitutes(self._error, imported_name, policy, where, self.owners)

    def _error(self, message: str) -> DecodeError:
        return DecodeError(message, **self._where)

    def _describe(self, obj: Any) -> str:
        return self._names.get(id(obj)) or f"a {type(obj).__name__} object"

    def _was_imported(self, obj: Any) -> bool:
        return self._imported.get(id(obj)) is obj

    def find_class(self, module: str, name: str) -> Any:
        if self.proto < 3 and self.fix_imports:
            module, name = fix_py2_name(module, name)
        module, name = canonical(module, name)
        sys.audit("pickle.find_class", module, name)
        full = f"{module}.{name}"
        substitute, trusted = self._substitutes.get(full), self._policy.is_trusted(module, name)
        if substitute is None and not trusted and owns_trusted(self._policy, full):
            substitute = self.owners.make(module, name)  # only for getattr to a trusted name below it
        if substitute is not None:
            self._imported[id(substitute)] = substitute
            self._names[id(substitute)] = full
            return substitute
        ref = None if trusted else self._policy.reference(module, name)
        if ref is not None:  # the caller's own object: nothing is imported
            self._references[id(ref)] = ref
            self._names[id(ref)] = full
            return ref
        found = self._policy.resolve(module, name, **self._where)
        found = self._guards.get(full, found)
        self._imported[id(found)] = found
        self._names[id(found)] = full
        return found

    def persistent_load(self, pid: Any) -> Any:
        if self._storages is not None:  # a torch.save file's storage records, read by the caller
            return self._storages(pid)
        raise self._error(
            f"the pickle refers to an external object (persistent id {pid!r}); "
            "zipsave pickles are self-contained, so this is refused."
        )

    def get_extension(self, code: int) -> None:
        # pickle's version consults a process-wide cache that an earlier, unrestricted load may
        # have filled; going to the registry every time keeps each lookup behind find_class.
        key = copyreg._inverted_registry.get(code)  # type: ignore[attr-defined]
        if not key:
            raise self._error(f"the pickle uses copyreg extension code {code}, which is not registered.")
        self.append(self.find_class(*key))

    # calls
    def _check_call(self, func: Any, args: Any, kwargs: Any, opname: str, calls_init: bool = True) -> None:
        if self._references.get(id(func)) is func and not self._was_imported(func):
            name = self._describe(func)
            raise UnsafeGlobalError(
                name,
                hint=f"{opname} calls `{name}`, which this load trusts as a reference only (a class you named); "
                f"a pickle may name it but not call it. Pass `trusted=[{name!r}]` to allow the call.",
                **self._where,
            )
        if not self._was_imported(func):
            raise self._error(
                f"{opname} calls {self._describe(func)} that the pickle did not import by name; "
                "only allowlisted globals may be called."
            )
        if type(args) is not tuple or type(kwargs) is not dict:
            raise self._error(f"{opname} passes arguments that are not a tuple and a dict.")
        numpy = sys.modules.get("numpy")
        if (
            numpy is not None
            and isinstance(func, type)
            and issubclass(func, numpy.ndarray)
            and func.__new__ is numpy.ndarray.__new__
            and (len(args) > 2 or {"buffer", "offset", "strides"} & kwargs.keys())
        ):
            raise self._error(
                f"{opname} calls `{self._describe(func)}` with a buffer, which can lay an array over "
                "arbitrary memory; numpy's own pickles never do this."
            )
        imported = self._names.get(id(func))
        # The constructor rule is zipsave's review of its own allowlist; a class the caller
        # named in `trusted=` is trusted with its constructor too (security.rst says so).
        problem = call_problem(imported, func, opname) if calls_init and not self._vouched(imported) else None
        if problem:
            raise self._error(problem + ".")
        size_problem(numpy, imported, func, args, kwargs, self._budget)
        check_keys(self._keys, args, kwargs)

    def _vouched(self, name: str | None) -> bool:
        return name is not None and any(
            name == entry or (entry.endswith(".*") and name.startswith(entry[:-1])) for entry in self._policy.trusted
        )

    def _new_object(self, cls: Any, args: Any, kwargs: Any, opname: str) -> Any:
        if not isinstance(cls, type):
            raise self._error(f"{opname} needs a class, got {self._describe(cls)}.")
        problem = new_problem(cls)
        if problem:
            raise self._error(f"{opname} creates `{self._describe(cls)}` without `__init__`: {problem}.")
        self._check_call(cls, args, kwargs, opname, calls_init=False)
        return self.owners.made(self._checked_result(cls.__new__(cls, *args, **kwargs)))

    def _checked_result(self, value: Any) -> Any:
        if type(value) is int:
            check_int(value, "an integer built by the pickle", **self._where)
        elif problem := result_problem(value):
            raise self._error(f"{problem}.")
        return value

    def load_reduce(self) -> None:
        stack = self.stack
        args = stack.pop()
        func = stack[-1]
        self._check_call(func, args, {}, "REDUCE")
        stack[-1] = self._checked_result(func(*args))

    dispatch[pickle.REDUCE[0]] = load_reduce

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        self.append(self._new_object(cls, args, {}, "NEWOBJ"))

    dispatch[pickle.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        cls = self.stack.pop()
        self.append(self._new_object(cls, args, kwargs, "NEWOBJ_EX"))

    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex

    def _instantiate(self, klass: Any, args: Any) -> None:  # INST and OBJ
        self._check_call(klass, tuple(args), {}, "INST/OBJ")
        super()._instantiate(klass, args)

    # replacements for the allowlisted helpers that would otherwise call whatever they get
    def _newobj(self, cls: Any, *args: Any) -> Any:
        return self._new_object(cls, args, {}, "copyreg.__newobj__")

    def _newobj_ex(self, cls: Any, args: Any, kwargs: Any) -> Any:
        return self._new_object(cls, tuple(args), dict(kwargs), "copyreg.__newobj_ex__")

    def _reconstructor(self, cls: Any, base: Any, state: Any) -> Any:
        for obj in (cls, base):
            if not (isinstance(obj, type) and self._was_imported(obj)):
                raise self._error(
                    f"copyreg._reconstructor needs classes the pickle imported by name, got {self._describe(obj)}."
                )
        if base is object:
            problem = new_problem(cls)
            if problem:
                raise self._error(
                    f"copyreg._reconstructor creates `{self._describe(cls)}` without `__init__`: {problem}."
                )
        self._check_call(base, (state,), {}, "copyreg._reconstructor")
        return self.owners.made(copyreg._reconstructor(cls, base, state))  # type: ignore[attr-defined]

    def _latin1_encode(self, obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        normal = encoding.lower().replace("-", "").replace("_", "") if isinstance(encoding, str) else ""
        if not isinstance(obj, str) or normal not in ("latin1", "iso88591", "l1"):
            raise self._error(
                f"`_codecs.encode` is allowed only for the latin-1 bytes pickle protocols 0-2 write, "
                f"not for encoding {encoding!r}."
            )
        return obj.encode("latin-1")

    # in-place changes
    def _check_target(self, obj: Any, opname: str) -> None:
        # Enum members are process-wide singletons handed out by calling their class.
        if self._was_imported(obj) or isinstance(
            obj, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, enum.Enum)
        ):
            raise self._error(
                f"{opname} would modify `{self._describe(obj)}` itself, which is shared by the whole program."
            )

    def load_build(self) -> None:
        stack = self.stack
        state = stack[-1]
        inst = stack[-2]
        self._check_target(inst, "BUILD")
        cls = type(inst)
        numpy = sys.modules.get("numpy")
        # numpy before 1.25 names its dtype classes `numpy.dtype[float32]`, not numpy.dtypes.*.
        old_dtype = numpy is not None and isinstance(inst, numpy.dtype) and cls.__module__ == "numpy"
        if not old_dtype and not self._policy.is_trusted(cls.__module__, cls.__qualname__):
            raise self._error(
                f"BUILD sets the state of a `{cls.__module__}.{cls.__qualname__}` object, which is not "
                "an allowlisted type."
            )
        if numpy is not None and isinstance(inst, (numpy.ndarray, numpy.dtype)):
            stack.pop()
            self._build_numpy(numpy, inst, state)
            return
        problem = build_state_problem(inst, state, numpy_random_kind)
        if problem:
            raise self._error(
                f"BUILD {problem}; a state is a dict of attribute names, and protocol attributes are refused "
                "in every shape (`__array_interface__` can point at any memory, `__class__` changes the object)."
            )
        if (
            numpy is not None
            and isinstance(inst, numpy.random.BitGenerator)
            and type(state) is tuple
            and len(state) == 2
            and isinstance(state[0], dict)
            and numpy_major() < 2
        ):
            # numpy 2 writes (state, seed sequence); numpy 1.x sets a state dict only (the seed
            # sequence matters only to spawn(), and numpy 1.x bit generators keep their own).
            stack[-1] = state[0]
        if type(state) is dict and cls.__module__.startswith("gymnasium.spaces"):
            stack[-1] = legacy_space_state(state)
        early = check_bit_generator_state(inst, stack[-1])  # before numpy sees it (numpy 2 raises its own error)
        if early:
            raise self._error(f"random generator state is out of range: {early}.")
        super().load_build()
        problem = built_problem(inst) or check_seed_sequence(inst, self._budget.left)  # positions, arrays, pools
        if problem:
            raise self._error(f"{problem}.")

    dispatch[pickle.BUILD[0]] = load_build

    def _build_numpy(self, numpy: Any, old: Any, state: Any) -> None:
        # Never mutate an array or dtype in place: it may already back a view (setstate frees
        # the buffer under it) or be numpy's shared builtin dtype. Build a fresh one, then point
        # the stack and memo at it; earlier users keep the old, consistent object.
        if isinstance(old, numpy.dtype):
            problem = dtype_state_problem(old, state)
            if problem:
                raise self._error(f"numpy dtype state does not fit its dtype: {problem}.")
            fresh = numpy.dtype(old, copy=True)
            fresh.__setstate__(state)
            problem = check_dtype(numpy, fresh)
            if problem:
                raise self._error(f"numpy dtype state is not self-consistent: {problem}.")
        else:
            problem = array_state_problem(numpy, state, self._budget)  # charged before numpy allocates
            if problem:
                raise self._error(f"{problem}.")
            fresh = numpy.ndarray.__new__(type(old), (0,), numpy.dtype("b"))
            fresh.__setstate__(state)
        self.stack[-1] = self._checked_result(fresh)
        for memo_key in self.memo.where.pop(id(old), ()):
            if self.memo.get(memo_key) is old:
                self.memo[memo_key] = fresh

    def load_append(self) -> None:
        item = self.stack.pop()
        self._extend(self.stack[-1], [item], "APPEND")

    dispatch[pickle.APPEND[0]] = load_append

    def load_appends(self) -> None:
        items = self.pop_mark()
        self._extend(self.stack[-1], items, "APPENDS")

    dispatch[pickle.APPENDS[0]] = load_appends

    def _extend(self, target: Any, items: list, opname: str) -> None:
        self._check_target(target, opname)
        # Look methods up on the type: an instance attribute named `extend` (set by an earlier
        # BUILD) would otherwise be called with pickle-chosen arguments.
        extend = getattr(type(target), "extend", None)
        if extend is not None:
            extend(target, items)
            return
        append = getattr(type(target), "append", None)
        if append is None:
            raise self._error(f"{opname} on a `{type(target).__qualname__}`, which has no append or extend.")
        for item in items:
            append(target, item)


def restricted_loads(
    payload: Any,
    policy: TrustPolicy,
    *,
    key: str | None = None,
    member: str | None = None,
    archive: Any = None,
    storages: Any = None,
    limits: Any = None,
) -> object:
    """Unpickle ``payload`` under ``policy`` and return the value.

    Parameters
    ----------
    payload : bytes or binary file
        A pickle (protocol 0-5): an entry's base64-decoded ``":serialized:"``, or an open binary
        file read from its position (a side pickle, streamed into what the pickle builds).
    policy : TrustPolicy
        With ``allow_pickle=True`` this is ``cloudpickle.loads(payload)``, exactly what SB3
        does. Otherwise every global goes through :meth:`TrustPolicy.resolve`, and calls,
        state and in-place changes are checked (see the module docstring).
    key, member, archive, storages : optional
        Where it came from, for the errors; ``storages(pid)`` answers ``torch.save``'s storage references.
    limits : Limits, optional
        The load's :class:`~zipsave.Limits` (the defaults when ``None``): what the value may
        allocate in all, counted before each array, bytes or tensor is built.

    Raises
    ------
    UnsafeGlobalError
        If the pickle names a global the policy does not trust. Nothing it names is imported.
    DecodeError
        If the pickle is malformed, uses out-of-band buffers, or does something refused.

    Examples
    --------
    >>> import pickle
    >>> from collections import OrderedDict
    >>> restricted_loads(pickle.dumps(OrderedDict(a=1)), TrustPolicy())
    OrderedDict([('a', 1)])
    >>> restricted_loads(pickle.dumps(print), TrustPolicy())
    Traceback (most recent call last):
    ...
    zipsave.exceptions.UnsafeGlobalError: refusing to import untrusted global `builtins.print`. ...
    """
    stream = not isinstance(payload, (bytes, bytearray, memoryview))
    if stream and not hasattr(payload, "read"):
        raise TypeError(f"payload must be bytes or a binary file, got {type(payload).__name__}.")
    if stream and not (hasattr(payload, "seekable") and payload.seekable()):
        payload, stream = payload.read(), False  # a pipe: its size is known only once read
    start = payload.tell() if stream else 0
    where: dict[str, Any] = {"key": key, "member": member, "archive": archive}
    try:
        if policy.allow_pickle:
            import cloudpickle  # only here: a load that never unpickles freely need not import it

            return cloudpickle.load(payload) if stream else cloudpickle.loads(payload)
        unpickler = _RestrictedUnpickler(payload if stream else bytes(payload), policy, where, storages, limits)
        value = check_structure(unpickler.owners.checked(unpickler.load()), objects=True, **where)
        return unpickler.owners.valid(value, unpickler._error)  # what a handler checks, once all is read
    except UnsafeGlobalError as err:
        if stream:
            payload.seek(start)
        # name the class: cloudpickle's function says nothing
        explain_by_value(err, payload.read() if stream else bytes(payload))
        raise
    except ZipsaveError:
        raise
    except Exception as err:
        raise DecodeError(
            f"cannot unpickle the value ({type(err).__name__}: {err}).",
            **where,
            hint=f"Consider using `custom_objects={{{key!r}: ...}}` to replace it." if key else None,
        ) from err
