"""The globals the restricted unpickler imports without being told to: zipsave's reviewed
allowlist, plus what every registered handler reviewed for its library (SB3's classes...)."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any

from .. import _registry
from ._sealed import seal_module

__all__ = ["CORE_ALLOWLIST", "GROUPS", "default_allowlist", "value_checks"]


# -- the default allowlist -------------------------------------------------------------------
# Exact "module.qualname" names, grouped; an integration adds its own group through its handler
# (``zipsave._registry.Handler.allowlist``). Every entry was reviewed for what a hostile archive can do with it: import it,
# call it with arbitrary arguments (REDUCE/NEWOBJ), and set the state of its instances (BUILD).
# An entry is here only if none of that can run code the archive chooses or reach the
# filesystem or network. Deliberately absent, and why:
#   builtins.getattr/setattr/delattr/eval/exec/compile/open/__import__/globals/vars/type,
#   functools.partial, operator.*  -- each turns the allowlist into "call anything".
#   numpy.ma.*                     -- MaskedArray.__setstate__ mutates shared arrays in place.
#   numpy.load, numpy.fromfile, numpy.memmap, numpy.lib.format.*  -- read files by name.
#   torch.storage._load_from_bytes, torch._utils._rebuild_*  -- call torch.load with pickle on
#                                  (a tensor pickled by plain pickle is read by the unpickler's
#                                  own substitutes for three of them instead, never by these).
#   numpy.core.* spellings        -- listed once, as numpy 2's numpy._core; see canonical().

_BUILTINS = frozenset(
    {
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
    }
)

_PICKLE_SUPPORT = frozenset(
    {
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
    }
)

_STDLIB = frozenset(
    {
        # Attribute bags: a training script's parsed arguments (`vars(args)` would be JSON). Built
        # empty, then BUILD only fills the instance `__dict__`.
        "argparse.Namespace",
        "types.SimpleNamespace",
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
        # Exact numbers: called with their value only, checked and bounded first (_numbers.py:
        # `Fraction('1e999999999')` would build a power of ten of any size, `Decimal('1E+999999')`
        # an integer whose int() takes 50 s).
        "decimal.Decimal",
        "fractions.Fraction",
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
    }
)

_NUMPY = frozenset(
    {
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
    }
)

_GYMNASIUM = frozenset(
    {
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
    }
)

_TORCH = frozenset(
    {
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
    }
)

GROUPS: Mapping[str, frozenset[str]] = types.MappingProxyType(
    {
        "builtins": _BUILTINS,
        "pickle": _PICKLE_SUPPORT,
        "stdlib": _STDLIB,
        "numpy": _NUMPY,
        "gymnasium": _GYMNASIUM,
        "torch": _TORCH,
    }
)

CORE_ALLOWLIST: frozenset[str] = frozenset().union(*GROUPS.values())
"""zipsave's own reviewed globals (no integration's), as ``module.qualname``."""

_cache: tuple[int, frozenset[str]] = (-1, CORE_ALLOWLIST)


def default_allowlist() -> frozenset[str]:
    """Every global the restricted unpickler imports without being told to: the core allowlist
    and the reviewed allowlist of every handler the load involves so far
    (:func:`zipsave._registry.selected`: imported, or its library is). An integration nothing
    selected adds nothing and is not imported: its names are refused as they would be were it
    not installed, until something imports it (which changes the registry's generation)."""
    global _cache
    generation, found = _registry.selected()
    if _cache[0] != generation:
        _cache = (generation, CORE_ALLOWLIST.union(*(h.allowlist for h in found)))
    return _cache[1]


_checks_cache: tuple[int, Mapping[str, Callable[[Any], str | None]]] = (-1, {})


def value_checks() -> Mapping[str, Callable[[Any], str | None]]:
    """``{"module.qualname": check}`` of the handlers the load involves so far (as
    :func:`default_allowlist`): what the unpickler asks of each object of such a class it
    created, once the pickle is read (:attr:`zipsave._registry.Handler.value_checks`)."""
    global _checks_cache
    generation, found = _registry.selected()
    if _checks_cache[0] != generation:
        _checks_cache = (generation, types.MappingProxyType({k: v for h in found for k, v in h.value_checks.items()}))
    return _checks_cache[1]


seal_module(__name__)  # CORE_ALLOWLIST, GROUPS and the cache cannot be rebound by loaded data
