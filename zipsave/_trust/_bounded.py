"""pickle's pure-Python unpickler made linear in the pickle's size (:class:`BoundedUnpickler`):
no hash-flooded set or dict, no huge integer, no read past what remains, no constructor
allocating past a budget, no nesting past a depth. zipsave's ``.pth`` metadata reader and its
restricted unpickler build on it; :mod:`._prescan` checks with it a pickle that another
unpickler (torch's ``weights_only`` loader, DCP's metadata reader) then reads."""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any, ClassVar

from .._bounds import AllocBudget, KeyGuard, bounded_int_opcode, key_budget
from ._nesting import Nesting, nesting_checked

__all__ = ["BoundedUnpickler"]

_PurePythonUnpickler: Any = pickle._Unpickler
_PureUnframer: Any = pickle._Unframer  # type: ignore[attr-defined]
_Stop: Any = pickle._Stop  # type: ignore[attr-defined]


def _short(n: int, got: int) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(f"the pickle asks for {n} bytes where {got} remain")


class _Exact:
    """Input that refuses a read past its end instead of returning fewer bytes: a length in
    the pickle larger than what follows it is an error, never an allocation. It reads from
    bytes or from an open binary file (a side pickle streams: each large bytes or bytearray
    is read straight into the object the pickle builds, never copied from a whole-file copy)."""

    def __init__(self, source: Any) -> None:
        in_memory = isinstance(source, (bytes, bytearray, memoryview))
        self._fp = io.BytesIO(source) if in_memory else source
        # For bytes, BytesIO's own read and readline, called with no Python frame between:
        # `_Frames` checks the length each operand read returns, `BoundedUnpickler.load` each
        # opcode byte (a line is read to its newline or the end, as from a file).
        self.plain_read: Any = None
        if in_memory:
            self.plain_read = self._fp.read
            self.readline = self._fp.readline  # type: ignore[method-assign]

    def read(self, n: int | None = -1) -> bytes:
        data = self._fp.read(n)
        if n is not None and n >= 0 and len(data) != n:
            raise _short(n, len(data))
        return data

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        done = 0
        while done < len(view):
            n = self._fp.readinto(view[done:])
            if not n:
                raise _short(len(view), done)
            done += n
        return done

    def readline(self) -> bytes:
        return self._fp.readline()

    def tell(self) -> int:
        return self._fp.tell()


class _Frames(_PureUnframer):
    """pickle's unframer over an in-memory :class:`_Exact`: the same frames and the same
    refusals, with a read outside a frame one Python call (BytesIO's read, its length checked
    as `_Exact.read` checks it) where pickle's makes two. Every operand is read through it."""

    def __init__(self, source: _Exact) -> None:
        super().__init__(source.read, source.readline)
        self._plain_read = source.plain_read

    def read(self, n: int) -> bytes:
        if self.current_frame:
            return super().read(n)
        data = self._plain_read(n)
        if len(data) != n and n is not None and n >= 0:
            raise _short(n, len(data))
        return data


def source_size(source: Any) -> int:
    """Bytes of a pickle given as bytes, or as an open binary file from its current position."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return memoryview(source).nbytes
    at = source.tell()
    end = source.seek(0, io.SEEK_END)
    source.seek(at)
    return end - at


class BoundedUnpickler(_PurePythonUnpickler):
    """pickle's pure-Python unpickler whose containers are built in linear time: keys are
    checked by a :class:`~zipsave._bounds.KeyGuard`, integers by size, reads by what remains,
    and what constructors allocate by the :class:`~zipsave._bounds.AllocBudget` of the
    pickle's size under ``limits`` (a :class:`~zipsave.Limits`, the defaults when ``None``).
    ``payload`` is bytes or an open binary file, read from its current position."""

    dispatch: ClassVar[dict[int, Any]] = dict(_PurePythonUnpickler.dispatch)

    def __init__(self, payload: Any, *, limits: Any = None, **where: Any) -> None:
        size = source_size(payload)
        self._source = _Exact(payload)
        super().__init__(self._source)
        self.where = where
        self.keys = KeyGuard(key_budget(size), **where)
        self.nesting = Nesting(**where)
        self.budget = AllocBudget(size, limits, **where)
        self.size = size

    #: Whether each tuple, slice, deque, defaultdict and array built is shown to ``nesting``
    #: (``zipsave._trust._nesting``); a subclass that builds none and bounds depth itself opts out.
    checks_nesting = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        nesting_checked(cls.dispatch, check=cls.checks_nesting)

    def load(self) -> Any:
        # pickle's own `load` (the same in 3.11 to 3.13), whose loop reads each opcode byte of
        # an in-memory pickle outside a frame with BytesIO's read itself: an empty read is the
        # refusal `_Exact.read(1)` gives. Operands go through `_Frames`; a file, through
        # pickle's unframer and `_Exact` as before. tests/test_prescan.py checks it against
        # pickle's `load`, the state it sets included.
        source = self._source
        frames = _Frames(source) if source.plain_read else _PureUnframer(source.read, source.readline)
        self._unframer = frames
        self.read, self.readinto, self.readline = frames.read, frames.readinto, frames.readline
        self.metastack: list[Any] = []
        self.stack: list[Any] = []
        self.append = self.stack.append
        self.proto = 0
        read, plain_read, dispatch = frames.read, source.plain_read, self.dispatch
        try:
            while True:
                key = read(1) if plain_read is None or frames.current_frame else plain_read(1)
                if not key:
                    raise _short(1, 0)
                dispatch[key[0]](self)
        except _Stop as stop:
            self.nesting.finish()
            return stop.value
        except BaseException:
            self.nesting.fail()
            raise

    def _check_target(self, target: Any, opname: str) -> None:
        """Refuse changing ``target`` in place (a subclass's hook)."""

    def load_setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        self._check_target(self.stack[-1], "SETITEM")
        self.keys.add(self.stack[-1], key)
        self.stack[-1][key] = value

    dispatch[pickle.SETITEM[0]] = load_setitem

    def load_setitems(self) -> None:
        items = self.pop_mark()
        target = self.stack[-1]
        self._check_target(target, "SETITEMS")
        for i in range(0, len(items), 2):
            self.keys.add(target, items[i])
            target[items[i]] = items[i + 1]

    dispatch[pickle.SETITEMS[0]] = load_setitems

    def load_additems(self) -> None:
        items = self.pop_mark()
        target = self.stack[-1]
        self._check_target(target, "ADDITEMS")
        self.keys.add_all(target, items)
        if isinstance(target, set):
            target.update(items)
            return
        # Looked up on the type: an instance attribute named `add` would be pickle-chosen.
        add = getattr(type(target), "add", None)
        if add is None:
            raise pickle.UnpicklingError(f"ADDITEMS on a `{type(target).__qualname__}`, which has no add.")
        for item in items:
            add(target, item)

    dispatch[pickle.ADDITEMS[0]] = load_additems

    def load_frozenset(self) -> None:
        items = self.pop_mark()
        self.keys.items_of(items)
        self.append(frozenset(items))

    dispatch[pickle.FROZENSET[0]] = load_frozenset

    def load_dict(self) -> None:
        items = self.pop_mark()
        target: dict = {}
        for i in range(0, len(items), 2):
            self.keys.add(target, items[i])
            target[items[i]] = items[i + 1]
        self.append(target)

    dispatch[pickle.DICT[0]] = load_dict

    def load_bytearray8(self) -> None:
        # pickle's own version allocates the claimed length before reading anything.
        (size,) = struct.unpack("<Q", self.read(8))
        if size > self.size:
            raise pickle.UnpicklingError(f"BYTEARRAY8 claims {size} bytes in a pickle of {self.size}")
        out = bytearray(size)
        frame = self._unframer.current_frame
        if frame is not None and frame.tell() < len(frame.getbuffer()):
            self.readinto(out)  # a small one, inside a frame
        else:
            # pickle writes large ones after the frame; its own readinto would copy them from a
            # temporary bytes (twice an array's size at peak): read straight into the bytearray
            self._unframer.current_frame = None
            self._source.readinto(out)
        self.append(out)

    dispatch[pickle.BYTEARRAY8[0]] = load_bytearray8

    def load_reduce(self) -> None:
        args = self.stack[-1]
        if type(args) is tuple:
            for arg in args:
                if type(arg) in (list, tuple, set, frozenset) and len(arg) > 1:
                    self.keys.items_of(arg)  # set(...), OrderedDict([...]) hash them
        super().load_reduce()

    dispatch[pickle.REDUCE[0]] = load_reduce


nesting_checked(BoundedUnpickler.dispatch)


for _op, _name in (
    (pickle.INT, "load_int"),
    (pickle.LONG, "load_long"),
    (pickle.LONG1, "load_long1"),
    (pickle.LONG4, "load_long4"),
):
    BoundedUnpickler.dispatch[_op[0]] = bounded_int_opcode(
        getattr(_PurePythonUnpickler, _name), text=_op in (pickle.INT, pickle.LONG)
    )
del _op, _name
