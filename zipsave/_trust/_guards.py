"""What the restricted unpickler checks before it creates an object or sets its state: which
classes may be created without ``__init__``, which may be called, what a call may ask to
allocate or iterate over, and which shapes a BUILD state may take."""

from __future__ import annotations

import collections
import enum
import math
import re
import sys
import types
from typing import Any, Callable

from .._bounds import AllocBudget, KeyGuard, check_int_text
from .._items import dtype_problem, item_problem
from ..exceptions import ArchiveFormatError, ArchiveLimitError
from ._names import is_dunder
from ._numbers import check_number_call, number_made_problem

__all__ = [
    "array_state_problem",
    "build_state_problem",
    "call_problem",
    "codec_problem",
    "new_problem",
    "result_problem",
    "size_problem",
]

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined by a `class` statement

#: C types whose ``__init__`` only fills an instance that ``__new__`` already made sound
#: (an empty container or namespace), so pickle may create them without calling it.
_NEW_IS_ENOUGH = frozenset(
    {
        object,
        list,
        dict,
        set,
        bytearray,
        collections.OrderedDict,
        collections.deque,
        collections.defaultdict,
        types.SimpleNamespace,
    }
)

#: Classes defined in Python that pickles do call: pathlib parses its argument strings, Counter
#: counts a dict. Other Python classes (spaces, modules, buffers, policies, optimizers) are
#: pickled empty plus state (NEWOBJ + BUILD) and their constructors are never called.
_CALLABLE_PY_CLASSES = frozenset(
    {
        "collections.Counter",
        "fractions.Fraction",  # its arguments are checked (check_number_call)
        "pathlib.Path",
        "pathlib.PosixPath",
        "pathlib.WindowsPath",
        "pathlib.PurePath",
        "pathlib.PurePosixPath",
        "pathlib.PureWindowsPath",
        "pathlib._local.Path",
        "pathlib._local.PosixPath",
        "pathlib._local.WindowsPath",
        "pathlib._local.PurePath",
        "pathlib._local.PurePosixPath",
        "pathlib._local.PureWindowsPath",
    }
)

#: Constructors whose first argument, when an integer, is a number of bytes to allocate.
_SIZED_BY_INT = frozenset({"builtins.bytes", "builtins.bytearray", "numpy.void", "numpy.bytes_"})


def new_problem(cls: type) -> str | None:
    """Why ``cls.__new__(cls)`` without ``__init__`` would make an unsound object, or None.

    A C (or Cython) type that sets up its internals in ``__init__`` is left with NULL pointers
    by ``__new__`` alone; numpy's bit generators then write through them on BUILD (SIGSEGV).
    Python-level ``__init__`` only sets attributes, which BUILD sets instead.
    """
    number = number_made_problem(cls)
    if number:
        return number
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None or klass in _NEW_IS_ENOUGH or isinstance(init, types.FunctionType):
            continue
        if not klass.__flags__ & _HEAPTYPE:
            return (
                f"`{klass.__module__}.{klass.__qualname__}` is a C type that sets itself up in `__init__`; "
                "creating it without calling `__init__` leaves it unsound"
            )
    return None


#: The dtype strings numpy's own pickles pass to ``numpy.dtype`` ("f8", "V16", "M8[ns]", "O8");
#: numpy's parser of longer spellings can take seconds and gigabytes on a few hundred bytes.
_DTYPE_TEXT = re.compile(r"[<>|=]?[A-Za-z]{1,2}[0-9]{0,12}(\[[0-9]{0,12}[A-Za-z]{1,3}\])?")


def _numpy_dtype_flags(flags: tuple, kwargs: dict) -> bool:
    """Whether ``numpy.dtype(spec, *flags, **kwargs)`` passes ``align``/``copy`` as numpy's own
    pickles do: ``dtype.__reduce__`` writes ``(spec, False, True)``, and older numpy 1.x wrote
    ``(spec, 0, 1)`` (C ints; the RL Zoo's agents hold both). Anything else (another
    object, whose truth numpy would ask for) is not a dtype numpy pickled."""
    return not kwargs and len(flags) <= 2 and all(type(f) in (bool, int) and f in (0, 1) for f in flags)


#: The text codecs CPython resolves in C, without its codec registry, spelled as its own
#: normaliser spells them (lower case, ``-`` as ``_``): the ``bytearray(text, "latin-1")`` of
#: pickle protocols 0-2, and UTF-8 and ASCII.
_BUILT_IN_CODECS = frozenset({"utf_8", "utf8", "latin_1", "latin1", "iso_8859_1", "iso8859_1", "ascii", "us_ascii"})


def codec_problem(name: str | None, func: Any, args: tuple, kwargs: dict) -> str | None:
    """Why a call of ``str``, ``bytes`` or ``bytearray`` (or a subclass: ``numpy.str_``,
    ``numpy.bytes_``) would look its text codec up by name, or None. The registry imports
    ``encodings.<name>`` (``bz2_codec`` imports ``bz2``, ``idna`` ``stringprep`` and
    ``unicodedata``), and the idna and punycode decoders take time quadratic in their input."""
    if not (isinstance(func, type) and issubclass(func, (str, bytes, bytearray))):
        return None
    if len(args) < 2 and "encoding" not in kwargs:
        return None
    encoding = kwargs["encoding"] if "encoding" in kwargs else args[1]
    if type(encoding) is str and encoding.lower().replace("-", "_") in _BUILT_IN_CODECS:
        return None
    shown = repr(encoding[:40]) if type(encoding) is str else f"a {type(encoding).__name__}"
    return (
        f"`{name}` is given the text codec {shown}; a pickle decodes or encodes text with "
        "latin-1 (protocols 0-2), UTF-8 or ASCII only, which need no codec module."
    )


def _parses_int(numpy: Any, func: Any) -> bool:
    return isinstance(func, type) and (issubclass(func, int) or (numpy is not None and issubclass(func, numpy.integer)))


def size_problem(numpy: Any, name: str | None, func: Any, args: tuple, kwargs: dict, budget: AllocBudget) -> None:
    """Charge ``budget`` with what a call would allocate or iterate over, refusing (raising)
    past it, before the call runs; refuse too a text codec the call would look up by name
    (:func:`codec_problem`)."""
    codec = codec_problem(name, func, args, kwargs)
    if codec:
        raise ArchiveFormatError(codec)
    check_number_call(func, args, kwargs)
    if func is types.SimpleNamespace and (args or kwargs):
        # pickle writes a namespace as an empty call and its attributes as BUILD's state, whose
        # names are checked (`build_state_problem`); from Python 3.13 a call takes a mapping of
        # names too, which would set them unchecked.
        raise ArchiveFormatError(
            "`types.SimpleNamespace` is called with arguments; pickle gives its attributes as state."
        )
    if args and isinstance(args[0], (str, bytes, bytearray)) and _parses_int(numpy, func):
        check_int_text(args[0], f"`{name}` given text")  # int("9" * 10**6): quadratic to convert
    if name == "numpy.dtype" and args and type(args[0]) is str and not _DTYPE_TEXT.fullmatch(args[0]):
        raise ArchiveLimitError(
            f"`numpy.dtype({args[0][:40]!r})`: a pickled dtype names its kind and size only (like 'f8' or 'V16')."
        )
    if name == "numpy.dtype" and not _numpy_dtype_flags(args[1:], kwargs):
        raise ArchiveFormatError(
            "`numpy.dtype(...)` is given other `align`/`copy` flags than numpy pickles: numpy passes "
            "(False, True), and older numpy (0, 1)."
        )
    values = (*args, *kwargs.values())
    for value in values:
        # A call may copy what it is given (`bytearray(b)`, `tuple(items)`): the memo lets a
        # pickle hand one large value to many calls for a few bytes each, so each is charged.
        if isinstance(value, (bytes, bytearray, str)):
            budget.charge(len(value), f"`{name}` given {len(value)} bytes or characters")
        elif type(value) in (list, tuple, set, frozenset, dict):
            budget.charge(8 * len(value), f"`{name}` given {len(value)} items")
        for item in (value, *(value if type(value) in (tuple, list) and len(value) < 64 else ())):
            if type(item) is range:
                budget.charge(_range_length(item), f"`{name}` given a range")
            elif numpy is not None and isinstance(item, numpy.dtype):
                budget.charge(item.itemsize, f"`{name}` given a dtype")
    first: Any = args[0] if args else None
    if name in _SIZED_BY_INT and (isinstance(first, int) or (numpy is not None and isinstance(first, numpy.integer))):
        # a numpy integer (or a bool) is a size to bytes(n) as much as an int
        budget.charge(int(first), f"`{name}({int(first)})`")
    shape: Any = None
    if name == "numpy._core.multiarray._reconstruct" and len(args) >= 3:
        shape = args[1]
    elif numpy is not None and isinstance(func, type) and issubclass(func, numpy.ndarray):
        shape = args[0] if args else kwargs.get("shape")
    if shape is not None or name == "numpy._core.multiarray._reconstruct":
        # numpy's pickles make an array empty (`_reconstruct(cls, (0,), b"b")`) and give its data
        # as BUILD state: an array made with elements holds memory numpy never filled (heap
        # addresses, freed secrets), and a shape of numpy integers escaped the budget.
        dims: Any = (shape,) if type(shape) is int else shape
        if type(dims) not in (tuple, list) or not all(type(d) is int and d >= 0 for d in dims) or math.prod(dims):
            raise ArchiveFormatError(
                f"`{name}` is called to make an array of shape {_shape_text(shape)}, which numpy would allocate "
                "without filling; numpy's pickles make an empty array (shape (0,)) and give its data as its state."
            )
    if name == "numpy.random.bit_generator.SeedSequence":
        pool = kwargs.get("pool_size", args[3] if len(args) > 3 else 4)
        if type(pool) is int:
            budget.charge(pool * 4, "a SeedSequence pool")


def result_problem(value: Any) -> str | None:
    """Why an array, a numpy scalar or a dtype a call built is refused, or ``None``: its dtype
    is one numpy cannot use, or an item holds bytes numpy never writes (:mod:`zipsave._items`:
    a date unit of multiplier 0, a boolean other than 0 or 1...)."""
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return None
    if isinstance(value, numpy.dtype):
        return dtype_problem(value)
    if not isinstance(value, (numpy.ndarray, numpy.generic)):
        return None
    return dtype_problem(value.dtype) or item_problem(value.dtype, numpy.asarray(value), "an array")


def array_state_problem(numpy: Any, state: Any, budget: AllocBudget) -> str | None:
    """Charge ``budget`` with the array an ndarray BUILD state asks numpy to allocate, before
    numpy does (shape times itemsize), and say why the state is not one numpy writes, or None.
    numpy allocates an object array's pointers before it reads the list that fills them, so
    that list must hold exactly one item per element, and a numeric array's data its bytes."""
    parts = state if type(state) is tuple else ()
    if len(parts) == 5:
        parts = parts[1:]  # (version, shape, dtype, fortran, data)
    if len(parts) != 4:
        return None  # numpy refuses it itself, allocating nothing
    shape, dtype, _, data = parts
    if type(shape) not in (tuple, list) or not all(type(d) is int and d >= 0 for d in shape):
        # numpy takes numpy integers too, and allocated an object array's pointers for them unbudgeted
        return f"an array's state gives the shape {_shape_text(shape)}; numpy's pickles give non-negative integers"
    if not isinstance(dtype, numpy.dtype):
        return None
    if _unsized(dtype):
        # an `S0`/`<U0` element reads as one byte (four) numpy never filled: `.repeat(2)` of it
        # handed back freed heap memory
        return f"an array's state has the unsized dtype {dtype}; numpy makes no array of it"
    count = walked = 1
    for dim in shape:
        count *= dim
        walked *= max(dim, 1)  # a zero-size (2**62, 0): 2**62 rows for tolist() and iteration
        if walked > budget.total:
            break
    budget.charge(
        max(count * max(dtype.itemsize, 1), walked), f"an ndarray state of shape {tuple(shape)[:8]} and dtype {dtype}"
    )
    sized = isinstance(data, (bytes, bytearray, str))
    held = len(data) if sized or type(data) is list else type(data).__name__
    if dtype.hasobject and (type(data) is not list or len(data) != count):
        return f"an object array's state of {count} elements holds {held} items; numpy's pickles hold one per element"
    if not dtype.hasobject and not (sized and len(data) == count * dtype.itemsize):
        return f"an array's state of {count * dtype.itemsize} bytes holds {held}; numpy's pickles hold its bytes"
    return None


def _shape_text(shape: Any) -> str:
    dims = (shape,) if type(shape) is int else shape
    if type(dims) not in (tuple, list):
        return f"given as a {type(shape).__name__}"
    inner = ", ".join(str(d) if type(d) is int else f"a {type(d).__name__}" for d in list(dims)[:8])
    return f"({inner},)" if len(dims) == 1 else f"({inner})"


def _unsized(dtype: Any) -> bool:
    """Does ``dtype`` hold a bytes or str type of no length (``S0``, ``<U0``), anywhere?"""
    if dtype.names is not None:
        return any(_unsized(dtype.fields[name][0]) for name in dtype.names)
    if dtype.subdtype is not None:
        return _unsized(dtype.subdtype[0])
    return dtype.kind in "SU" and dtype.itemsize == 0


def _range_length(value: range) -> int:
    if value.step > 0:
        return max(0, (value.stop - value.start + value.step - 1) // value.step)
    return max(0, (value.start - value.stop - value.step - 1) // -value.step)


def _python_constructor(cls: type) -> bool:
    """Whether calling ``cls`` runs Python code of its own: an ``__init__``/``__new__`` written
    in Python somewhere in its MRO, or a metaclass ``__call__``. A heap type without one is a
    C type (CPython 3.12+ makes ``deque`` and ``defaultdict`` heap types, constructors in C)."""
    if type(cls).__call__ is not type.__call__:
        return True
    for klass in cls.__mro__:
        for name in ("__init__", "__new__"):
            member = vars(klass).get(name)
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, (types.FunctionType, types.MethodType)):
                return True
    return False


def call_problem(name: str | None, func: Any, opname: str) -> str | None:
    """Why the pickle may not call ``func`` (imported as ``name``), or None."""
    if not isinstance(func, type) or not func.__flags__ & _HEAPTYPE or not _python_constructor(func):
        return None  # functions on the allowlist, and C types whose constructors validate
    if issubclass(func, enum.Enum) or name in _CALLABLE_PY_CLASSES:
        return None
    return (
        f"{opname} calls the constructor of `{name}`, a class pickles only ever create empty and fill "
        "with state (NEWOBJ + BUILD); its constructor could build networks, buffers or arrays of any size"
    )


def check_keys(keys: KeyGuard, args: tuple, kwargs: dict) -> None:
    """Check the members of the sequences a call may turn into a set or dict keys."""
    for value in (*args, *kwargs.values()):
        if type(value) in (list, tuple, set, frozenset) and len(value) > 1:
            keys.items_of(value)


def build_state_problem(inst: Any, state: Any, is_random: Callable[[Any], bool]) -> str | None:
    """Why BUILD may not set ``state`` on ``inst``, or None.

    One rule whatever the shape: the state is ``None``, a plain dict, or a ``(dict, slots)``
    pair of plain dicts (or ``None``), and no key is a non-string, starts with ``__`` (a
    dunder, or a name that would be mangled) or holds a character ``str.isprintable`` refuses. A list of pairs, a mapping type (a gymnasium
    ``Dict`` space) or any other object is refused: classes' ``__setstate__`` and pickle's
    default BUILD accept them, and they would bypass the key check. numpy's random objects
    take their own state shapes, which numpy's setters validate.
    """
    if is_random(inst):
        return None
    number = number_made_problem(type(inst))
    if number:
        return f"sets the state of a `{type(inst).__qualname__}`: {number}"
    parts: tuple = (state,)
    if type(state) is tuple and len(state) == 2:
        parts = state
    for part in parts:
        if part is None:
            continue
        if type(part) is not dict:
            return f"gives a `{type(inst).__qualname__}` instance a {type(part).__qualname__} as state, not a dict (or a pair of dicts)"
        bad = sorted(
            f"`{k}`" if type(k) is str else repr(k)
            for k in part
            # an attribute name shows as it is in reprs (`namespace(<name>=1)`): no escape
            # sequence or bidi override may reach a terminal that prints a loaded value
            if type(k) is not str or k.startswith("__") or is_dunder(k) or not k.isprintable()
        )
        # torch keeps hooks (callables it calls on forward/step/load) in `_..._hooks` dicts;
        # saved modules and optimizers have them empty, and a loaded value may not plant one.
        bad += sorted(f"`{k}`" for k in part if type(k) is str and k.endswith("hooks") and part[k])
        if bad:
            return f"sets the attribute(s) {', '.join(bad[:5])} on a `{type(inst).__qualname__}` instance"
        # an instance attribute named as a method of its class is called in its place
        # (`buffer.sample(batch_size)`, `noise.reset(indices=...)`): no object saves one
        shadowing = sorted(f"`{k}`" for k in part if type(k) is str and k in _method_names(type(inst)))
        if shadowing:
            return (
                f"sets the attribute(s) {', '.join(shadowing[:5])} on a `{type(inst).__qualname__}` instance, "
                "which would stand in for its method(s) of that name"
            )
    if type(state) is tuple and len(state) == 2 and state[1]:
        slots = {s for klass in type(inst).__mro__ for s in _slots_of(klass)}
        extra = sorted(k for k in state[1] if k not in slots)
        if extra:
            return f"sets {', '.join(map(repr, extra[:5]))} on a `{type(inst).__qualname__}` instance, which are not its slots"
    return None


_METHODS: dict[type, frozenset[str]] = {}  # per class a BUILD set the state of (allowlisted ones)


def _method_names(cls: type) -> frozenset[str]:
    """The methods ``cls`` and its bases (not ``object``) define: what an instance attribute of
    the same name would replace when code calls ``obj.name(...)``."""
    names = _METHODS.get(cls)
    if names is None:
        kinds = (types.FunctionType, staticmethod, classmethod, types.BuiltinFunctionType, types.MethodDescriptorType)
        names = _METHODS[cls] = frozenset(
            name for klass in cls.__mro__[:-1] for name, value in vars(klass).items() if isinstance(value, kinds)
        )
    return names


def _slots_of(klass: type) -> tuple:
    slots = vars(klass).get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def numpy_random_kind(obj: Any) -> bool:
    """Whether ``obj`` is one of numpy's random objects (bit generator, Generator, RandomState,
    SeedSequence), whose state setters check every field's type themselves."""
    random = sys.modules.get("numpy.random")
    if random is None:
        return False
    return isinstance(obj, (random.BitGenerator, random.Generator, random.RandomState, random.SeedSequence))
