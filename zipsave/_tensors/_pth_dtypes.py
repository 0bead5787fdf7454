"""The torch names a ``.pth`` pickle uses, as fixed tables that need no ``import torch``: each
dtype (its name, bytes per element and kind), layout and quantization scheme as a stand-in
printed as torch prints it, the legacy storage names and the tensor class names. Where tensors
are built, :mod:`._device` gives torch's own object for a stand-in with one dict lookup;
``tests/test_pth_dtypes.py`` checks every table against the installed torch."""

from __future__ import annotations

from typing import Any

__all__ = [
    "DTYPES",
    "INT32",
    "INT64",
    "LAYOUTS",
    "QSCHEMES",
    "SPARSE_COO",
    "SPARSE_LAYOUTS",
    "STAND_INS",
    "STORAGE_DTYPES",
    "TENSOR_CLASSES",
    "DType",
    "Layout",
    "QScheme",
    "TorchName",
]


class TorchName:
    """A torch object that a pickle names (``torch.float32``, ``torch.strided``), without torch:
    one instance per name, equal only to itself (as torch's are), printed as torch prints it,
    never changed. Each kind's type is named as torch's is (``torch.dtype``), so that what Python
    says of a pickle misusing one (``'torch.dtype' object is not callable``) reads as before."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    __str__ = __repr__

    def __setattr__(self, name: str, value: Any) -> None:
        # Shared by every reader: a pickle's BUILD must not change one (torch's refuse alike).
        kind = type(self).__name__
        if name in ("itemsize", "is_floating_point", "is_complex") and hasattr(type(self), name):
            raise AttributeError(f"attribute '{name}' of '{kind}' objects is not writable")
        raise _no_such_attribute(kind, name)

    def __delattr__(self, name: str) -> None:
        self.__setattr__(name, None)

    def __copy__(self) -> TorchName:
        return self

    def __deepcopy__(self, memo: Any) -> TorchName:
        return self


def _no_such_attribute(kind: str, name: str) -> AttributeError:
    """The interpreter's own error for setting ``name`` on a ``kind`` object that has no such
    attribute and no ``__dict__``, as torch's objects give it (Python 3.13 added words to it)."""
    probe = type(kind, (), {"__slots__": ()})()
    try:
        object.__setattr__(probe, name, None)
    except AttributeError as err:
        return err
    return AttributeError(f"'{kind}' object has no attribute '{name}'")  # pragma: no cover - never set


class Layout(TorchName):
    """A tensor layout (``torch.strided``, ``torch.sparse_coo``...)."""

    __slots__ = ()


class QScheme(TorchName):
    """A quantization scheme (``torch.per_tensor_affine``...)."""

    __slots__ = ()


class DType(TorchName):
    """A torch dtype: its name (``"float32"``), bytes per element and kind: ``"b"`` bool,
    ``"u"`` unsigned and ``"i"`` signed integers, ``"f"`` floating point, ``"c"`` complex,
    ``"q"`` quantized (only a quantized tensor, with its quantizer, reads it), ``"x"`` raw bits."""

    __slots__ = ("itemsize", "kind")
    itemsize: int
    kind: str

    def __init__(self, name: str, itemsize: int, kind: str) -> None:
        super().__init__(name)
        object.__setattr__(self, "itemsize", itemsize)
        object.__setattr__(self, "kind", kind)

    @property
    def is_floating_point(self) -> bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def quantized(self) -> bool:
        return self.kind == "q"


DType.__name__, Layout.__name__, QScheme.__name__ = "torch.dtype", "torch.layout", "torch.qscheme"


# (name, bytes per element, kind, other names torch gives the same dtype)
_DTYPE_TABLE: tuple[tuple[Any, ...], ...] = (
    ("bool", 1, "b"),
    ("uint8", 1, "u"),
    ("uint16", 2, "u"),
    ("uint32", 4, "u"),
    ("uint64", 8, "u"),
    ("uint1", 1, "u", "bit"),
    *((f"uint{bits}", 1, "u") for bits in range(2, 8)),
    ("int8", 1, "i"),
    ("int16", 2, "i", "short"),
    ("int32", 4, "i", "int"),
    ("int64", 8, "i", "long"),
    *((f"int{bits}", 1, "i") for bits in range(1, 8)),
    ("float16", 2, "f", "half"),
    ("bfloat16", 2, "f"),
    ("float32", 4, "f", "float"),
    ("float64", 8, "f", "double"),
    ("float8_e4m3fn", 1, "f"),
    ("float8_e4m3fnuz", 1, "f"),
    ("float8_e5m2", 1, "f"),
    ("float8_e5m2fnuz", 1, "f"),
    ("float8_e8m0fnu", 1, "f"),
    ("float4_e2m1fn_x2", 1, "f"),
    ("complex32", 4, "c", "chalf"),
    ("complex64", 8, "c", "cfloat"),
    ("complex128", 16, "c", "cdouble"),
    ("qint8", 1, "q"),
    ("quint8", 1, "q"),
    ("qint32", 4, "q"),
    ("quint4x2", 1, "q"),
    ("quint2x4", 1, "q"),
    ("bits8", 1, "x"),
    ("bits16", 2, "x"),
    ("bits1x8", 1, "x"),
    ("bits2x4", 1, "x"),
    ("bits4x2", 1, "x"),
)


def _dtypes() -> dict[str, DType]:
    table: dict[str, DType] = {}
    for name, itemsize, kind, *aliases in _DTYPE_TABLE:
        dtype = DType(name, itemsize, kind)
        for each in (name, *aliases):
            table[each] = dtype
    return table


#: Every name of a dtype in the ``torch`` module (``torch.float`` is ``torch.float32``).
DTYPES = _dtypes()
INT32, INT64 = DTYPES["int32"], DTYPES["int64"]

#: The legacy storage classes a pickle names (``torch.FloatStorage``), by the dtype each holds.
#: The quantized ones are named so that the quantized tensor using one is refused by its key.
STORAGE_DTYPES: dict[str, DType] = {
    f"{prefix}Storage": DTYPES[name]
    for prefix, name in (
        ("Double", "float64"),
        ("Float", "float32"),
        ("Half", "float16"),
        ("Long", "int64"),
        ("Int", "int32"),
        ("Short", "int16"),
        ("Char", "int8"),
        ("Byte", "uint8"),
        ("Bool", "bool"),
        ("BFloat16", "bfloat16"),
        ("ComplexDouble", "complex128"),
        ("ComplexFloat", "complex64"),
        ("QInt8", "qint8"),
        ("QInt32", "qint32"),
        ("QUInt8", "quint8"),
        ("QUInt4x2", "quint4x2"),
        ("QUInt2x4", "quint2x4"),
    )
}

_TENSOR_TYPES = ("BFloat16", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")
#: ``torch.FloatTensor`` and the like, by the names a pickle spells them.
TENSOR_CLASSES = frozenset(
    {"torch.Tensor"}
    | {f"{module}.{kind}Tensor" for module in ("torch", "torch.cuda") for kind in (*_TENSOR_TYPES, "Bool")}
    | {f"{module}.{kind}Tensor" for module in ("torch.sparse", "torch.cuda.sparse") for kind in _TENSOR_TYPES}
)

#: The layouts ``torch.serialization._get_layout`` is given, by the text it is given.
LAYOUTS = {
    f"torch.{name}": Layout(name)
    for name in ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc")
}
#: A tuple: ``in`` compares, so an unhashable value a pickle passes is refused, not an error.
SPARSE_LAYOUTS = tuple(layout for text, layout in LAYOUTS.items() if text != "torch.strided")
SPARSE_COO = LAYOUTS["torch.sparse_coo"]

#: The quantization schemes (``torch.per_tensor_affine``...), values a state dict may hold.
QSCHEMES = {
    name: QScheme(name)
    for name in (
        "per_tensor_affine",
        "per_channel_affine",
        "per_tensor_symmetric",
        "per_channel_symmetric",
        "per_channel_affine_float_qparams",
    )
}

#: The types of the stand-ins, found by ``type(value) in STAND_INS``.
STAND_INS = frozenset({DType, Layout, QScheme})
