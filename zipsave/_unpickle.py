"""Restricted unpickling of ``":serialized:"`` entries, and an audit of the globals a pickle
would import that reads its opcodes without importing or executing anything.

A pickle is a program: every global it names is imported and may be called with arguments
the archive chooses. Loading is safe here because of three layers, all in this module:

1. **Trust.** :class:`TrustPolicy` admits a global only if it is in :data:`DEFAULT_ALLOWLIST`,
   named by the caller in ``trusted=``, or ``allow_pickle=True`` was given. The check happens
   on the name, before anything is imported.
2. **Calls and mutation.** The unpickler only calls objects it imported by name, never mutates
   an imported global in place, and refuses instance state that would plant protocol
   attributes (``__array_interface__`` and friends) that numpy or torch read from instances.
3. **numpy's C-level state.** ``ndarray``/``dtype`` state is applied to a fresh object (an
   exported buffer is never reallocated under a view), a dtype must describe itself
   consistently, arrays are never built over a raw buffer by calling ``ndarray`` directly, and
   bit-generator positions must lie inside their buffers. Without these, the allowlisted numpy
   helpers alone can be combined into out-of-bounds reads and use-after-free.

What this does not stop: a payload may still ask an allowlisted constructor for a lot of
memory or time (``bytearray(10**10)``). Bounding that is the archive layer's size limits' job.
"""

from __future__ import annotations

import _compat_pickle
import copyreg
import dataclasses
import enum
import importlib
import io
import pickle
import pickletools
import sys
import types
from collections.abc import Iterable
from typing import Any, ClassVar

import cloudpickle

from ._allowlist_sb3 import SB3_ALLOWLIST
from .exceptions import DecodeError, UnsafeGlobalError, ZipsaveError

__all__ = ["DEFAULT_ALLOWLIST", "TrustPolicy", "pickle_globals", "restricted_loads"]

# -- the default allowlist -------------------------------------------------------------------
# Exact "module.qualname" names, grouped so that a later group (SB3's classes) can be added
# beside these. Every entry was reviewed for what a hostile archive can do with it: import it,
# call it with arbitrary arguments (REDUCE/NEWOBJ), and set the state of its instances (BUILD).
# An entry is here only if none of that can run code the archive chooses or reach the
# filesystem or network. Deliberately absent, and why:
#   builtins.getattr/setattr/delattr/eval/exec/compile/open/__import__/globals/vars/type,
#   functools.partial, operator.*  -- each turns the allowlist into "call anything".
#   numpy.ma.*                     -- MaskedArray.__setstate__ mutates shared arrays in place.
#   numpy.load, numpy.fromfile, numpy.memmap, numpy.lib.format.*  -- read files by name.
#   torch.storage._load_from_bytes, torch._utils._rebuild_*  -- call torch.load with pickle on.
#   numpy.core.* spellings        -- listed once, as numpy 2's numpy._core; see _canonical().

_BUILTINS = frozenset({
    # Constructors of plain values; pickle reaches them through REDUCE for protocols 0-3
    # (set, frozenset, bytearray, complex, range, slice) or as defaultdict factories.
    "builtins.bool",
    "builtins.bytearray",
    "builtins.bytes",
    "builtins.complex",
    "builtins.dict",
    "builtins.float",
    "builtins.frozenset",
    "builtins.int",
    "builtins.list",
    "builtins.range",
    "builtins.set",
    "builtins.slice",
    "builtins.str",
    "builtins.tuple",
    # Singletons, pickled by name.
    "builtins.Ellipsis",
    "builtins.NotImplemented",
    # `copyreg._reconstructor(cls, object, None)` is how protocols 0-1 pickle any instance;
    # object() itself does nothing.
    "builtins.object",
})

_PICKLE_SUPPORT = frozenset({
    # Protocol 0-1 instances, and protocol 2+ objects whose __reduce__ names these helpers.
    # The unpickler replaces all three with versions that only accept classes it imported
    # by name (see _RestrictedUnpickler), because the originals call `cls.__new__` on
    # whatever they are given.
    "copyreg._reconstructor",
    "copyreg.__newobj__",
    "copyreg.__newobj_ex__",
    # Protocols 0-2 write bytes as `_codecs.encode(text, "latin1")`. Replaced by a version
    # that only does latin-1: other codecs are a registry lookup away from other code.
    "_codecs.encode",
})

_STDLIB = frozenset({
    "collections.Counter",
    "collections.OrderedDict",
    "collections.defaultdict",  # the factory is itself a global that passed this check
    "collections.deque",
    # C types that validate their own state.
    "datetime.date",
    "datetime.datetime",
    "datetime.time",
    "datetime.timedelta",
    "datetime.timezone",
    # Building a path only manipulates strings; nothing touches the filesystem.
    "pathlib.Path",
    "pathlib.PosixPath",
    "pathlib.PurePath",
    "pathlib.PurePosixPath",
    "pathlib.PureWindowsPath",
    "pathlib.WindowsPath",
    # Python 3.13 moved the concrete classes and pickles them under this name.
    "pathlib._local.Path",
    "pathlib._local.PosixPath",
    "pathlib._local.PurePath",
    "pathlib._local.PurePosixPath",
    "pathlib._local.PureWindowsPath",
    "pathlib._local.WindowsPath",
})

_NUMPY = frozenset({
    # Arrays: protocol 5 uses _frombuffer (which refuses object dtypes); protocols 0-4 and
    # object/datetime arrays use _reconstruct + BUILD. `numpy.ndarray` is needed as the
    # subtype argument of _reconstruct; calling it with a buffer is refused separately.
    "numpy.ndarray",
    "numpy._core.multiarray._reconstruct",
    "numpy._core.numeric._frombuffer",
    # Scalars: `scalar(dtype, bytes)` refuses dtypes that hold objects.
    "numpy._core.multiarray.scalar",
    # dtypes: numpy.dtype(...) + BUILD; the state is checked for self-consistency.
    "numpy.dtype",
    "numpy._core._internal._convert_to_stringdtype_kwargs",  # StringDType's reduce
    # The dtype classes (type(np.dtype("f4")) is numpy.dtypes.Float32DType): pickled when a
    # class is stored by reference, and the types whose instances BUILD may set.
    "numpy.dtypes.BoolDType",
    "numpy.dtypes.ByteDType",
    "numpy.dtypes.BytesDType",
    "numpy.dtypes.CLongDoubleDType",
    "numpy.dtypes.Complex128DType",
    "numpy.dtypes.Complex64DType",
    "numpy.dtypes.DateTime64DType",
    "numpy.dtypes.Float16DType",
    "numpy.dtypes.Float32DType",
    "numpy.dtypes.Float64DType",
    "numpy.dtypes.Int16DType",
    "numpy.dtypes.Int32DType",
    "numpy.dtypes.Int64DType",
    "numpy.dtypes.Int8DType",
    "numpy.dtypes.IntDType",
    "numpy.dtypes.LongDType",
    "numpy.dtypes.LongDoubleDType",
    "numpy.dtypes.LongLongDType",
    "numpy.dtypes.ObjectDType",
    "numpy.dtypes.ShortDType",
    "numpy.dtypes.StrDType",
    "numpy.dtypes.StringDType",
    "numpy.dtypes.TimeDelta64DType",
    "numpy.dtypes.UByteDType",
    "numpy.dtypes.UInt16DType",
    "numpy.dtypes.UInt32DType",
    "numpy.dtypes.UInt64DType",
    "numpy.dtypes.UInt8DType",
    "numpy.dtypes.UIntDType",
    "numpy.dtypes.ULongDType",
    "numpy.dtypes.ULongLongDType",
    "numpy.dtypes.UShortDType",
    "numpy.dtypes.VoidDType",
    # Concrete scalar types, stored by reference as in `dtype=np.float32`. Calling one parses
    # a number or string; np.void parses bytes element-wise, never as raw pointers.
    "numpy.bool",
    "numpy.bool_",  # numpy 1.x's name for the same type
    "numpy.bytes_",
    "numpy.clongdouble",
    "numpy.complex128",
    "numpy.complex64",
    "numpy.datetime64",
    "numpy.float16",
    "numpy.float32",
    "numpy.float64",
    "numpy.int16",
    "numpy.int32",
    "numpy.int64",
    "numpy.int8",
    "numpy.longdouble",
    "numpy.longlong",
    "numpy.object_",
    "numpy.str_",
    "numpy.timedelta64",
    "numpy.uint16",
    "numpy.uint32",
    "numpy.uint64",
    "numpy.uint8",
    "numpy.ulonglong",
    "numpy.void",
    # Random generators (gymnasium spaces carry one): the ctor helpers only call a bit
    # generator class they were handed, and that class came through this same check.
    "numpy.random._pickle.__bit_generator_ctor",
    "numpy.random._pickle.__generator_ctor",
    "numpy.random._pickle.__randomstate_ctor",
    "numpy.random.__RandomState_ctor",  # numpy < 1.17 pickles of RandomState
    "numpy.random._generator.Generator",
    "numpy.random.mtrand.RandomState",
    # Bit generators: their state setters are checked after BUILD (MT19937 `pos` and Philox
    # `buffer_pos` are buffer indices numpy does not bound-check).
    "numpy.random._mt19937.MT19937",
    "numpy.random._pcg64.PCG64",
    "numpy.random._pcg64.PCG64DXSM",
    "numpy.random._philox.Philox",
    "numpy.random._sfc64.SFC64",
    "numpy.random.bit_generator.SeedSequence",
    "numpy.random.bit_generator.__pyx_unpickle_SeedSequence",  # checks a layout checksum
})

_GYMNASIUM = frozenset({
    # Spaces: their __setstate__ copies a dict into __dict__ and recomputes reprs.
    "gymnasium.spaces.box.Box",
    "gymnasium.spaces.dict.Dict",
    "gymnasium.spaces.discrete.Discrete",
    "gymnasium.spaces.graph.Graph",
    "gymnasium.spaces.graph.GraphInstance",
    "gymnasium.spaces.multi_binary.MultiBinary",
    "gymnasium.spaces.multi_discrete.MultiDiscrete",
    "gymnasium.spaces.oneof.OneOf",
    "gymnasium.spaces.sequence.Sequence",
    "gymnasium.spaces.text.Text",
    "gymnasium.spaces.tuple.Tuple",
})

_TORCH = frozenset({
    # torch.dtype objects pickle as module attributes (`torch.float32`), torch.device and
    # torch.Size as classes with plain arguments.
    "torch.bfloat16",
    "torch.bool",
    "torch.complex128",
    "torch.complex32",
    "torch.complex64",
    "torch.float16",
    "torch.float32",
    "torch.float64",
    "torch.float8_e4m3fn",
    "torch.float8_e4m3fnuz",
    "torch.float8_e5m2",
    "torch.float8_e5m2fnuz",
    "torch.int16",
    "torch.int32",
    "torch.int64",
    "torch.int8",
    "torch.uint16",
    "torch.uint32",
    "torch.uint64",
    "torch.uint8",
    "torch.Size",
    "torch.device",
    # Classes referenced by policy_kwargs (`activation_fn=nn.ReLU`): constructing one builds
    # a small module, and Module.__setstate__ only updates __dict__.
    "torch.nn.modules.activation.CELU",
    "torch.nn.modules.activation.ELU",
    "torch.nn.modules.activation.GELU",
    "torch.nn.modules.activation.Hardshrink",
    "torch.nn.modules.activation.Hardsigmoid",
    "torch.nn.modules.activation.Hardswish",
    "torch.nn.modules.activation.Hardtanh",
    "torch.nn.modules.activation.LeakyReLU",
    "torch.nn.modules.activation.LogSigmoid",
    "torch.nn.modules.activation.LogSoftmax",
    "torch.nn.modules.activation.Mish",
    "torch.nn.modules.activation.PReLU",
    "torch.nn.modules.activation.RReLU",
    "torch.nn.modules.activation.ReLU",
    "torch.nn.modules.activation.ReLU6",
    "torch.nn.modules.activation.SELU",
    "torch.nn.modules.activation.SiLU",
    "torch.nn.modules.activation.Sigmoid",
    "torch.nn.modules.activation.Softmax",
    "torch.nn.modules.activation.Softplus",
    "torch.nn.modules.activation.Softshrink",
    "torch.nn.modules.activation.Softsign",
    "torch.nn.modules.activation.Tanh",
    "torch.nn.modules.activation.Tanhshrink",
    "torch.nn.modules.activation.Threshold",
    "torch.nn.modules.linear.Identity",
    # `optimizer_class=th.optim.Adam`: construction needs real parameters, and
    # Optimizer.__setstate__ only updates __dict__ and re-wraps `step`.
    "torch.optim.adadelta.Adadelta",
    "torch.optim.adagrad.Adagrad",
    "torch.optim.adam.Adam",
    "torch.optim.adamax.Adamax",
    "torch.optim.adamw.AdamW",
    "torch.optim.asgd.ASGD",
    "torch.optim.lbfgs.LBFGS",
    "torch.optim.nadam.NAdam",
    "torch.optim.radam.RAdam",
    "torch.optim.rmsprop.RMSprop",
    "torch.optim.rprop.Rprop",
    "torch.optim.sgd.SGD",
    "torch.optim.sparse_adam.SparseAdam",
})

_GROUPS: dict[str, frozenset[str]] = {
    "builtins": _BUILTINS,
    "pickle": _PICKLE_SUPPORT,
    "stdlib": _STDLIB,
    "numpy": _NUMPY,
    "gymnasium": _GYMNASIUM,
    "torch": _TORCH,
    "stable_baselines3": SB3_ALLOWLIST,
}

DEFAULT_ALLOWLIST: frozenset[str] = frozenset().union(*_GROUPS.values())
"""Every global the restricted unpickler imports without being told to, as ``module.qualname``."""

_LOCAL_HINT = (
    "It is defined inside a function (or is a lambda), so it was pickled by value and cannot "
    "be imported by name. Replace the entry with `custom_objects={key: value}`, or pass "
    "`allow_pickle=True` if you trust the archive completely."
)
_DYNAMIC_GLOBAL = "<STACK_GLOBAL with a computed name>"
# Globals that rebuild code objects or reach the operating system. Suggesting
# `trusted=[name]` for them would teach users to let any archive run code.
_CODE_RUNNERS = ("cloudpickle.", "types.", "builtins.", "os.", "posix.", "nt.", "subprocess.", "sys.", "shutil.",
                 "importlib.", "runpy.", "pickle.", "marshal.", "ctypes.", "socket.", "operator.", "functools.",
                 "io.", "_io.", "pathlib.", "tempfile.", "codecs.", "glob.", "urllib.", "http.")
_CODE_HINT = (
    "It rebuilds code stored in the archive or reaches the operating system, so trusting it would "
    "let this archive (and any other) run arbitrary code. Replace the entry with "
    "`custom_objects={key: value}`, or pass `allow_pickle=True` only if you trust the archive completely."
)


# -- names -----------------------------------------------------------------------------------
def _canonical(module: str, qualname: str) -> tuple[str, str]:
    """Spell numpy's core modules the numpy-2 way, whichever numpy wrote the pickle."""
    # numpy 2 renamed numpy.core to numpy._core and left a shim that warns on every access;
    # one spelling for trust decisions keeps both archive generations loadable.
    if module == "numpy.core" or module.startswith("numpy.core."):
        module = "numpy._core" + module[len("numpy.core"):]
    return module, qualname


def _import_spelling(module: str) -> str:
    if module == "numpy._core" or module.startswith("numpy._core."):
        numpy = importlib.import_module("numpy")
        if int(numpy.__version__.split(".")[0]) < 2:
            return "numpy.core" + module[len("numpy._core"):]
    return module


def _fix_py2_name(module: str, name: str) -> tuple[str, str]:
    # What pickle.Unpickler.find_class does for protocols 0-2 (`__builtin__.set` and
    # `copy_reg._reconstructor`); overriding find_class loses it, so it is repeated here.
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _is_local(qualname: str) -> bool:
    return any(part.startswith("<") for part in qualname.split("."))


def _is_dotted(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def _normalise_entry(item: Any) -> str:
    if isinstance(item, str):
        text = item.strip()
        if text.endswith(".*"):
            text = text[:-1]
        if ":" in text:
            module, _, qualname = text.partition(":")
            if not (_is_dotted(module) and _is_dotted(qualname)):
                raise ValueError(f"`trusted` entry {item!r} is not of the form 'pkg.mod:Name'.")
            return f"{module}.{qualname}"
        if text.endswith("."):
            if not _is_dotted(text[:-1]):
                raise ValueError(
                    f"`trusted` entry {item!r} is not a package prefix such as 'pkg.' or 'pkg.mod.*'."
                )
            return text
        if _is_local(text):
            raise ValueError(f"`trusted` entry {item!r} names a local object. {_LOCAL_HINT}")
        if not _is_dotted(text) or "." not in text:
            raise ValueError(
                f"`trusted` entry {item!r} is not a global name: expected 'pkg.mod.Name', "
                "'pkg.mod:Name', 'pkg.mod.*' or 'pkg.' (pass `allow_pickle=True` to trust everything)."
            )
        return text
    if isinstance(item, types.ModuleType):
        return f"{item.__name__}."
    defined_in: Any = getattr(item, "__module__", None)
    name: Any = getattr(item, "__qualname__", None)
    if not (isinstance(defined_in, str) and isinstance(name, str)):
        raise TypeError(
            f"`trusted` entries must be names, classes, functions or modules; got {type(item).__name__}."
        )
    if _is_local(name):
        raise ValueError(f"cannot trust `{defined_in}.{name}`. {_LOCAL_HINT}")
    return f"{defined_in}.{name}"


def _normalise_trusted(trusted: Any) -> tuple[str, ...]:
    if trusted is None:
        return ()
    # A class can be iterable (an Enum is), so objects that name one global come first.
    if isinstance(trusted, (str, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
        items: Iterable[Any] = (trusted,)
    elif isinstance(trusted, Iterable):
        items = trusted
    else:
        items = (trusted,)
    entries: list[str] = []
    for item in items:
        entry = _normalise_entry(item)
        if entry not in entries:
            entries.append(entry)
    return tuple(entries)


# -- the policy ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TrustPolicy:
    """Which globals a pickled entry may import.

    Parameters
    ----------
    allow_pickle : bool, default False
        Trust the archive completely: :func:`restricted_loads` becomes ``cloudpickle.loads``
        (SB3's behaviour) and every name is admitted.
    trusted : tuple, default ()
        Globals admitted on top of :data:`DEFAULT_ALLOWLIST`. Normalised on construction to a
        tuple of strings: ``"pkg.mod.Name"`` (also spelled ``"pkg.mod:Name"``, or given as the
        class/function itself) admits exactly that name; ``"pkg.mod.*"`` and ``"pkg."``
        (also given as a module object) admit every class and function defined under that
        prefix; both are stored as ``"pkg.mod."``.

    Examples
    --------
    >>> policy = TrustPolicy.make(trusted=["mypkg.models:Net", "mypkg.layers.*"])
    >>> policy.trusted
    ('mypkg.models.Net', 'mypkg.layers.')
    >>> policy.is_trusted("mypkg.layers.conv", "Conv")
    True
    >>> policy.is_trusted("os", "system")
    False
    """

    allow_pickle: bool = False
    trusted: tuple = ()

    def __post_init__(self) -> None:
        # `allow_pickle="no"` is truthy; a switch that disables the safety must be a real bool.
        if not isinstance(self.allow_pickle, bool):
            raise TypeError(f"`allow_pickle` must be True or False, got {self.allow_pickle!r}.")
        object.__setattr__(self, "trusted", _normalise_trusted(self.trusted))

    @classmethod
    def make(cls, allow_pickle: bool = False, trusted: Any = ()) -> TrustPolicy:
        """Build a policy from the user-facing ``allow_pickle=`` and ``trusted=`` arguments.

        Parameters
        ----------
        allow_pickle : bool, default False
            See the class docstring.
        trusted : str, class, function, module or iterable of those, default ()
            A single string is one entry, never a sequence of characters.

        Returns
        -------
        TrustPolicy

        Raises
        ------
        TypeError
            If ``allow_pickle`` is not a bool or an entry is of an unusable type.
        ValueError
            If an entry is not a global name or prefix, or names a local object.

        Examples
        --------
        >>> from collections import OrderedDict
        >>> TrustPolicy.make(trusted=OrderedDict).trusted
        ('collections.OrderedDict',)
        """
        return cls(allow_pickle=allow_pickle, trusted=trusted)

    def _match(self, full: str) -> str | None:
        """The entry admitting ``full``: itself if exact, else the prefix; None if none."""
        if full in DEFAULT_ALLOWLIST or full in self.trusted:
            return full
        for entry in self.trusted:
            if entry.endswith(".") and full.startswith(entry):
                return entry
        return None

    def is_trusted(self, module: str, qualname: str) -> bool:
        """Whether the global ``module.qualname`` may be imported. Imports nothing.

        Parameters
        ----------
        module : str
            The module name, as a pickle spells it (``numpy.core`` and ``numpy._core`` are
            the same).
        qualname : str
            The dotted name inside the module.

        Returns
        -------
        bool
            True if ``allow_pickle`` is set, or the name is in :data:`DEFAULT_ALLOWLIST`, or
            ``trusted`` names it exactly or by prefix. Names of local objects (``<locals>``,
            ``<lambda>``) and malformed names are never trusted without ``allow_pickle``.

        Examples
        --------
        >>> TrustPolicy().is_trusted("collections", "OrderedDict")
        True
        >>> TrustPolicy().is_trusted("builtins", "eval")
        False
        """
        if self.allow_pickle:
            return True
        if not (isinstance(module, str) and isinstance(qualname, str)):
            return False
        module, qualname = _canonical(module, qualname)
        if not (_is_dotted(module) and _is_dotted(qualname)):
            return False
        return self._match(f"{module}.{qualname}") is not None

    def resolve(
        self,
        module: str,
        qualname: str,
        *,
        key: str | None = None,
        member: str | None = None,
        archive: Any = None,
    ) -> object:
        """Import the global ``module.qualname`` if the policy trusts it.

        Parameters
        ----------
        module, qualname : str
            The global, as in :meth:`is_trusted`.
        key, member, archive : optional
            Where the reference came from; copied into the errors.

        Returns
        -------
        object
            The imported object.

        Raises
        ------
        UnsafeGlobalError
            Before importing anything, if the name is not trusted. Also after importing, if a
            name admitted only by a prefix reaches past it: through a module attribute
            (``pkg.mod.os.system``), a dunder attribute, or to an object that is not a class or
            function defined under the prefix.
        DecodeError
            If a trusted name cannot be imported or has no such attribute.

        Examples
        --------
        >>> TrustPolicy().resolve("collections", "OrderedDict")
        <class 'collections.OrderedDict'>
        """
        where: dict[str, Any] = {"key": key, "member": member, "archive": archive}
        if isinstance(module, str) and isinstance(qualname, str):
            module, qualname = _canonical(module, qualname)
        full = f"{module}.{qualname}"
        if not self.is_trusted(module, qualname):
            if isinstance(qualname, str) and _is_local(qualname):
                raise UnsafeGlobalError(full, hint=_LOCAL_HINT, **where)
            if full.startswith(_CODE_RUNNERS):
                raise UnsafeGlobalError(full, hint=_CODE_HINT, **where)
            raise UnsafeGlobalError(full, **where)
        admitted_by = None if self.allow_pickle else self._match(full)
        by_prefix = admitted_by is not None and admitted_by != full

        def refuse(reason: str) -> UnsafeGlobalError:
            return UnsafeGlobalError(
                full,
                hint=f"It matches the trusted prefix `{admitted_by}`, but {reason}; a prefix admits only "
                f"classes and functions defined under it. Pass `trusted=[{full!r}]` to allow exactly this name.",
                **where,
            )

        parts = qualname.split(".")
        if by_prefix and any(_is_dunder(part) for part in parts):
            raise refuse("it reaches a dunder attribute")
        try:
            found: Any = importlib.import_module(_import_spelling(module))
        except Exception as err:  # an import runs module code; any failure is a decode failure
            raise DecodeError(
                f"cannot import module `{module}` for global `{full}` ({type(err).__name__}: {err}).", **where
            ) from err
        for depth, part in enumerate(parts):
            if by_prefix and depth and isinstance(found, types.ModuleType):
                raise refuse(f"`{found.__name__}` is a module imported there")
            try:
                found = getattr(found, part)
            except AttributeError as err:
                raise DecodeError(f"module `{module}` has no attribute `{qualname}` (global `{full}`).", **where) from err
        if by_prefix:
            defined_in = getattr(found, "__module__", None)
            kind_ok = isinstance(found, (type, types.FunctionType, types.BuiltinFunctionType))
            if not kind_ok:
                raise refuse(f"it is a {type(found).__name__} object, not a class or function")
            if not (isinstance(defined_in, str) and f"{defined_in}.".startswith(admitted_by or "")):
                raise refuse(f"it is defined in `{defined_in}`")
        return found


# -- the unpickler ---------------------------------------------------------------------------
class _Memo(dict):
    """The unpickler's memo, remembering where numpy objects are stored so BUILD can swap them."""

    def __init__(self) -> None:
        super().__init__()
        self.where: dict[int, list[Any]] = {}

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(value, (numpy.ndarray, numpy.dtype)):
            self.where.setdefault(id(value), []).append(key)


def _instance_dunders(state: Any) -> list[str]:
    """Dunder names a BUILD state would set as instance attributes, in every form
    ``__setstate__`` implementations accept (a dict, ``(dict, slots)``, or ``(name, value)`` pairs)."""
    found: set[str] = set()

    def scan(mapping: Any) -> None:
        if isinstance(mapping, dict):
            found.update(k for k in mapping if isinstance(k, str) and _is_dunder(k))

    scan(state)
    if isinstance(state, tuple) and len(state) == 2:
        scan(state[0])
        scan(state[1])
    if isinstance(state, (list, tuple)):
        for item in state:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and _is_dunder(item[0]):
                found.add(item[0])
    return sorted(found)


def _rebuild_dtype(numpy: Any, dtype: Any, depth: int = 0) -> Any:
    """The same dtype built through numpy's validating constructor from its visible parts."""
    if depth > 64:
        raise ValueError("dtype nesting is too deep")
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return numpy.dtype((_rebuild_dtype(numpy, base, depth + 1), shape))
    if dtype.names is not None:
        fields = [dtype.fields[name] for name in dtype.names]
        spec = {
            "names": list(dtype.names),
            "formats": [_rebuild_dtype(numpy, field[0], depth + 1) for field in fields],
            "offsets": [field[1] for field in fields],
            "titles": [field[2] if len(field) > 2 else None for field in fields],
            "itemsize": dtype.itemsize,
        }
        return numpy.dtype(spec, align=dtype.isalignedstruct)
    return numpy.dtype(dtype.str)


def _check_dtype(numpy: Any, dtype: Any) -> str | None:
    """Why a dtype whose state came from a pickle is unsafe to use, or None if it is sound.

    numpy trusts the flags in a dtype's pickled state: one that hides an object field (or
    places a field outside the item) lets any array of it read raw bytes as pointers.
    """
    try:
        canonical = _rebuild_dtype(numpy, dtype)
    except (TypeError, ValueError, OverflowError, RecursionError) as err:
        return f"its fields cannot be rebuilt ({type(err).__name__}: {err})"
    if not (
        canonical == dtype
        and canonical.itemsize == dtype.itemsize
        and canonical.flags == dtype.flags
        and canonical.hasobject == dtype.hasobject
    ):
        return (
            f"its state describes {canonical!r} (flags {canonical.flags}) but sets "
            f"{dtype!r} (flags {dtype.flags})"
        )
    return None


# Buffer indices in bit-generator state that numpy's setters store without a bounds check.
_BIT_GENERATOR_INDEX_LIMITS = {"MT19937": (("state", "pos"), 624), "Philox": (("buffer_pos",), 4)}


def _check_bit_generator(obj: Any) -> str | None:
    bit_generator = None
    bg_module = sys.modules.get("numpy.random.bit_generator")
    gen_module = sys.modules.get("numpy.random._generator")
    rs_module = sys.modules.get("numpy.random.mtrand")
    if bg_module is not None and isinstance(obj, bg_module.BitGenerator):
        bit_generator = obj
    elif gen_module is not None and isinstance(obj, gen_module.Generator):
        bit_generator = obj.bit_generator
    elif rs_module is not None and isinstance(obj, rs_module.RandomState):
        bit_generator = obj._bit_generator
    if bit_generator is None:
        return None
    state = bit_generator.state
    limit = _BIT_GENERATOR_INDEX_LIMITS.get(state.get("bit_generator"))
    if limit is None:
        return None
    path, top = limit
    value: Any = state
    for step in path:
        value = value[step]
    if not 0 <= int(value) <= top:
        return f"{state['bit_generator']} {'/'.join(path)} is {value}, outside 0..{top}"
    return None


# typeshed describes pickle._Unpickler as the C class, without the stack and dispatch table.
_PurePythonUnpickler: Any = pickle._Unpickler  # type: ignore[attr-defined]


class _RestrictedUnpickler(_PurePythonUnpickler):
    """pickle's pure-Python unpickler with every import, call and in-place change gated.

    The C ``pickle.Unpickler`` only lets a subclass hook imports; BUILD, REDUCE and NEWOBJ run
    inside it unchecked, and those are where allowlisted numpy pieces become memory-unsafe.
    The pure-Python one dispatches each opcode through a table a subclass can replace.
    """

    dispatch: ClassVar[dict[int, Any]] = dict(_PurePythonUnpickler.dispatch)

    def __init__(self, file: Any, policy: TrustPolicy, where: dict[str, Any]) -> None:
        super().__init__(file)
        self.memo = _Memo()
        self._policy = policy
        self._where = where
        # id -> object for everything find_class returned (the references keep ids unique).
        self._imported: dict[int, Any] = {}
        self._names: dict[int, str] = {}
        self._guards = {
            "copyreg._reconstructor": self._reconstructor,
            "copyreg.__newobj__": self._newobj,
            "copyreg.__newobj_ex__": self._newobj_ex,
            "_codecs.encode": self._latin1_encode,
        }

    def _error(self, message: str) -> DecodeError:
        return DecodeError(message, **self._where)

    def _describe(self, obj: Any) -> str:
        return self._names.get(id(obj)) or f"a {type(obj).__name__} object"

    def _was_imported(self, obj: Any) -> bool:
        return self._imported.get(id(obj)) is obj

    # imports
    def find_class(self, module: str, name: str) -> Any:
        if self.proto < 3 and self.fix_imports:
            module, name = _fix_py2_name(module, name)
        module, name = _canonical(module, name)
        sys.audit("pickle.find_class", module, name)
        found = self._policy.resolve(module, name, **self._where)
        full = f"{module}.{name}"
        found = self._guards.get(full, found)
        self._imported[id(found)] = found
        self._names[id(found)] = full
        return found

    def persistent_load(self, pid: Any) -> Any:
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
    def _check_call(self, func: Any, args: Any, kwargs: Any, opname: str) -> None:
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

    def _new_object(self, cls: Any, args: Any, kwargs: Any, opname: str) -> Any:
        if not isinstance(cls, type):
            raise self._error(f"{opname} needs a class, got {self._describe(cls)}.")
        self._check_call(cls, args, kwargs, opname)
        return cls.__new__(cls, *args, **kwargs)

    def load_reduce(self) -> None:
        stack = self.stack
        args = stack.pop()
        func = stack[-1]
        self._check_call(func, args, {}, "REDUCE")
        stack[-1] = func(*args)

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
        self._check_call(base, (state,), {}, "copyreg._reconstructor")
        return copyreg._reconstructor(cls, base, state)  # type: ignore[attr-defined]

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
        dunders = _instance_dunders(state)
        if dunders:
            raise self._error(
                f"BUILD sets the attribute(s) {', '.join(f'`{d}`' for d in dunders)} on a "
                f"`{cls.__qualname__}` instance; protocol attributes are refused because numpy and torch "
                "read them from instances (`__array_interface__` can point at any memory)."
            )
        super().load_build()
        problem = _check_bit_generator(inst)
        if problem:
            raise self._error(f"random generator state is out of range: {problem}.")

    dispatch[pickle.BUILD[0]] = load_build

    def _build_numpy(self, numpy: Any, old: Any, state: Any) -> None:
        # Never mutate an array or dtype in place: it may already back a view (setstate frees
        # the buffer under it) or be numpy's shared builtin dtype. Build a fresh one, then point
        # the stack and memo at it; earlier users keep the old, consistent object.
        if isinstance(old, numpy.dtype):
            fresh = numpy.dtype(old, copy=True)
            fresh.__setstate__(state)
            problem = _check_dtype(numpy, fresh)
            if problem:
                raise self._error(f"numpy dtype state is not self-consistent: {problem}.")
        else:
            fresh = numpy.ndarray.__new__(type(old), (0,), numpy.dtype("b"))
            fresh.__setstate__(state)
        self.stack[-1] = fresh
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

    def load_setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        target = self.stack[-1]
        self._check_target(target, "SETITEM")
        target[key] = value

    dispatch[pickle.SETITEM[0]] = load_setitem

    def load_setitems(self) -> None:
        items = self.pop_mark()
        target = self.stack[-1]
        self._check_target(target, "SETITEMS")
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]

    dispatch[pickle.SETITEMS[0]] = load_setitems

    def load_additems(self) -> None:
        items = self.pop_mark()
        target = self.stack[-1]
        self._check_target(target, "ADDITEMS")
        if isinstance(target, set):
            target.update(items)
            return
        add = getattr(type(target), "add", None)
        if add is None:
            raise self._error(f"ADDITEMS on a `{type(target).__qualname__}`, which has no add.")
        for item in items:
            add(target, item)

    dispatch[pickle.ADDITEMS[0]] = load_additems


def restricted_loads(
    payload: bytes,
    policy: TrustPolicy,
    *,
    key: str | None = None,
    member: str | None = None,
    archive: Any = None,
) -> object:
    """Unpickle ``payload`` under ``policy``.

    Parameters
    ----------
    payload : bytes
        A pickle (protocol 0-5), typically the base64-decoded ``":serialized:"`` of an entry.
    policy : TrustPolicy
        With ``allow_pickle=True`` this is ``cloudpickle.loads(payload)``, exactly what SB3
        does. Otherwise every global goes through :meth:`TrustPolicy.resolve`, and calls,
        state and in-place changes are checked (see the module docstring).
    key, member, archive : optional
        Where the payload came from; copied into the errors.

    Returns
    -------
    object
        The unpickled value.

    Raises
    ------
    UnsafeGlobalError
        If the pickle names a global the policy does not trust. Nothing it names is imported.
    DecodeError
        If the pickle is malformed, uses persistent ids or out-of-band buffers, does something
        the restricted unpickler refuses, or an allowed constructor fails.

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
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}.")
    where: dict[str, Any] = {"key": key, "member": member, "archive": archive}
    try:
        if policy.allow_pickle:
            return cloudpickle.loads(payload)
        return _RestrictedUnpickler(io.BytesIO(payload), policy, where).load()
    except ZipsaveError:
        raise
    except Exception as err:
        raise DecodeError(f"cannot unpickle the value ({type(err).__name__}: {err}).", **where) from err


# -- the audit -------------------------------------------------------------------------------
_STRING_OPS = frozenset(
    {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"}
)
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_EXT_OPS = frozenset({"EXT1", "EXT2", "EXT4"})
_MARK = object()
_UNKNOWN = object()


def _audit_name(module: str, qualname: str, proto: int) -> str:
    if proto < 3:
        module, qualname = _fix_py2_name(module, qualname)
    module, qualname = _canonical(module, qualname)
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
    memo: dict[Any, Any] = {}
    proto: Any = 0
    pos: Any = 0
    arg: Any
    try:
        for opcode, arg, pos in pickletools.genops(payload):
            name = opcode.name
            if name == "PROTO":
                proto = arg
            elif name in ("GLOBAL", "INST"):
                module, _, qualname = arg.partition(" ")
                found.add(_audit_name(module, qualname, proto))
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
                if _MARK not in stack:
                    raise DecodeError(f"malformed pickle: {name} at byte {pos} has no MARK to pop to.")
                del stack[len(stack) - 1 - stack[::-1].index(_MARK):]
                count = before.index(pickletools.markobject) if pickletools.markobject in before else 0
            else:
                count = len(before)
            if len(stack) < count:
                raise DecodeError(f"malformed pickle: {name} at byte {pos} pops from a stack that is too short.")
            popped = stack[len(stack) - count:]
            del stack[len(stack) - count:]

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
                    found.add(_audit_name(module, qualname, proto))
                else:
                    found.add(_DYNAMIC_GLOBAL)
                pushed = [_UNKNOWN]
            else:
                pushed = [_MARK if item is pickletools.markobject else _UNKNOWN for item in after]
            stack.extend(pushed)
    except DecodeError:
        raise
    except Exception as err:
        raise DecodeError(f"malformed pickle near byte {pos}: {err}.") from err
    return sorted(found)
