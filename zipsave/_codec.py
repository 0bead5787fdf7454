"""JSON values <-> Python values for the ``data`` member.

JSON-native values are stored as they are. Any other value becomes an object tagged with
SB3's ``":type:"`` and, where it pickles, SB3's ``":serialized:"`` (base64 cloudpickle), so SB3
can read it; beside them zipsave writes a pickle-free native form under ``":zipsave:"``.
Containers are walked, so one odd value only pickles itself. Decoding prefers the native
form; ``":serialized:"`` goes through the restricted unpickler of :mod:`zipsave._unpickle`.
"""

from __future__ import annotations

import base64
import binascii
import collections
import datetime as _dt
import enum
import importlib
import io
import math
import pathlib
import pickle
import re
import types
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle
import numpy as np
import orjson
import torch

from . import _format, _json, _spaces
from ._unpickle import TrustPolicy, restricted_loads
from .exceptions import DecodeError, EncodeError, UnsafeGlobalError, ZipsaveError

__all__ = ["Decoder", "Encoder", "dump_json", "is_json_native", "parse_json"]

T, S, N = _format.TYPE_KEY, _format.SERIALIZED_KEY, _format.NATIVE_KEY
_RESERVED = frozenset({T, S, N})
_INT64 = (-(2**63), 2**64 - 1)
#: Arrays up to this many elements are written as readable JSON lists.
_LIST_ELEMENTS = 256


class _NoNative(Exception):
    """The value has no pickle-free form."""


def _type_hint(value: Any) -> str:
    return str(type(value))


def _b64(data: bytes | memoryview) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise DecodeError(f"expected a base64 string, found {type(text).__name__}.")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, binascii.Error) as err:
        raise DecodeError(f"expected base64 text ({err}).") from None


def _canonical_reduce(obj: Any) -> Any:
    """The deterministic reduction of ``obj``, or ``NotImplemented`` for pickle's own.

    Sets are written in a fixed order (pickle writes them in hash order, which for strings
    changes with every interpreter's PYTHONHASHSEED), and a space's random generator that was
    never seeded nor used is written as ``None`` (it holds fresh OS entropy; gymnasium makes
    an equivalent one on demand).
    """
    kind = type(obj)
    if (kind is set or kind is frozenset) and len(obj) > 1:
        return kind, (sorted(obj, key=_pickle_bytes),)
    if _spaces.is_space(obj) and obj._np_random is not None and _spaces.is_unused_generator(obj._np_random):
        rv = obj.__reduce_ex__(cloudpickle.DEFAULT_PROTOCOL)
        if isinstance(rv, tuple) and len(rv) >= 3 and isinstance(rv[2], dict) and "_np_random" in rv[2]:
            return (*rv[:2], {**rv[2], "_np_random": None}, *rv[3:])
    return NotImplemented


def _make_pickler() -> type:
    """cloudpickle's reducers on Python's pure pickler: the C pickler never asks
    ``reducer_override`` about sets, so their order could not be fixed there."""
    base = cloudpickle.CloudPickler
    borrowed = ("_function_reduce", "_dynamic_function_reduce", "_function_getnewargs")
    if not all(hasattr(base, name) for name in (*borrowed, "reducer_override", "dispatch_table")):
        # Another cloudpickle layout: keep its C pickler (sets then stay in hash order).
        class _CPickler(base):  # type: ignore[misc, valid-type]
            def reducer_override(self, obj: Any) -> Any:
                rv = _canonical_reduce(obj)
                return super().reducer_override(obj) if rv is NotImplemented else rv

        return _CPickler

    class _PyPickler(pickle._Pickler):  # type: ignore[name-defined]
        dispatch_table = base.dispatch_table

        def __init__(self, file: Any, protocol: int) -> None:
            super().__init__(file, protocol=protocol)
            self.globals_ref: dict = {}

        def reducer_override(self, obj: Any) -> Any:
            rv = _canonical_reduce(obj)
            return base.reducer_override(self, obj) if rv is NotImplemented else rv

    for name in borrowed:
        setattr(_PyPickler, name, getattr(base, name))
    return _PyPickler


_Pickler = _make_pickler()


def _pickle_bytes(value: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(value)
    return buf.getvalue()


def _pickle(value: Any) -> str:
    """``":serialized:"``: base64 cloudpickle, as SB3 writes it (and SB3 reads it)."""
    try:
        return _b64(_pickle_bytes(value))
    except RecursionError:
        # A set reached again through one of its own items: sorting it first recursed.
        return _b64(cloudpickle.dumps(value))


def is_json_native(value: Any, _depth: int = 0) -> bool:
    """True when ``value`` survives ``orjson`` unchanged in type and value."""
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return True
    if kind is int:
        return _INT64[0] <= value <= _INT64[1]
    if kind is float:
        return math.isfinite(value)
    if _depth > 200:
        return False
    if kind is list:
        return all(is_json_native(v, _depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and k not in _RESERVED for k in value) and all(
            is_json_native(v, _depth + 1) for v in value.values()
        )
    return False


def import_path(obj: Any) -> str | None:
    """``"module:qualname"`` when ``obj`` can be found again by import, else ``None``."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    if module == "__main__":
        return None
    try:
        owner: Any = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - importing a user's module may raise anything
        return None
    # torch's C functions report a private qualname (`_VariableFunctionsClass.relu`) but are
    # found under their plain name, as pickle finds them.
    for candidate in dict.fromkeys([qualname, getattr(obj, "__name__", None)]):
        if not isinstance(candidate, str):
            continue
        found: Any = owner
        try:
            for part in candidate.split("."):
                found = getattr(found, part)
        except Exception:  # noqa: BLE001, S112 - a property may raise anything
            continue
        if found is obj:
            return f"{module}:{candidate}"
    return None


class Encoder:
    """Encodes one ``data`` dict. Large arrays are handed to ``add_array`` (which returns the
    member name they will be written to) instead of being put in the JSON. When an entry's
    arrays went there, ``stand_in(key, value)``, if given, is what its ``":serialized:"`` holds
    for readers of the pickle alone (SB3); without it the entry has no pickle."""

    def __init__(
        self,
        *,
        add_array: Callable[[np.ndarray], str] | None = None,
        array_bytes: int = 64 << 10,
        stand_in: Callable[[str, Any], Any] | None = None,
    ) -> None:
        self._add_array = add_array
        self._array_bytes = array_bytes
        self._stand_in = stand_in
        self._external = False

    # -- top level -------------------------------------------------------------------------
    def encode_entry(self, key: str, value: Any) -> Any:
        """Encode one top-level entry, SB3-compatible."""
        if is_json_native(value):
            return value
        self._external = False
        try:
            native = self._native(value, ())
        except _NoNative:
            native = None
        except RecursionError as err:
            raise EncodeError("is nested too deeply to save.", key=key) from err
        except EncodeError as err:
            if err.key is None:  # raised for a value nested inside this entry
                err.key = key
                err.args = (err._compose(),)
            raise
        out: dict[str, Any] = {T: _type_hint(value)}
        # SB3 reads only the pickle; skip it when the value's arrays live in .npy members
        # (SB3 #2141: a pickled copy would put them back into the JSON).
        if native is None or not self._external:
            try:
                out[S] = _pickle(value)
            except Exception as err:
                if native is None:
                    raise EncodeError(
                        f"cannot be saved: it has no JSON form and does not pickle ({type(err).__name__}: {err}).",
                        key=key,
                        hint=f"Leave it out with `exclude=[{key!r}]`.",
                    ) from err
        elif self._stand_in is not None:
            try:
                out[S] = _pickle(self._stand_in(key, value))
            except Exception:  # noqa: BLE001, S110 - the native form is enough for zipsave
                pass
        if native is not None:
            out[N] = native
        return out

    # -- nested ----------------------------------------------------------------------------
    def encode(self, value: Any, path: tuple = ()) -> Any:
        """Encode a nested value: JSON as is, else a tagged object."""
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int and _INT64[0] <= value <= _INT64[1]:
            return value
        if kind is float and math.isfinite(value):
            return value
        if kind is list:
            return [self.encode(v, path + (i,)) for i, v in enumerate(value)]
        if kind is dict and all(type(k) is str and k not in _RESERVED for k in value):
            return {k: self.encode(v, path + (k,)) for k, v in value.items()}
        try:
            return {T: _type_hint(value), N: self._native(value, path)}
        except _NoNative:
            pass
        try:
            return {T: _type_hint(value), S: _pickle(value)}
        except Exception as err:
            where = ".".join(map(str, path))
            raise EncodeError(
                f"value at `{where}` of type {_type_hint(value)} has no JSON form and does not pickle "
                f"({type(err).__name__}: {err})."
            ) from err

    def _items(self, pairs: Any, path: tuple) -> list:
        return [[self.encode(k, path), self.encode(v, path + (str(k),))] for k, v in pairs]

    def _native(self, value: Any, path: tuple) -> dict:  # noqa: C901 - one dispatch table
        kind = type(value)
        if kind is int:
            try:
                return {"kind": "int", "value": str(value)}
            except ValueError:  # beyond sys.get_int_max_str_digits(); hex has no such limit
                return {"kind": "int", "hex": hex(value)}
        if kind is float:
            return {"kind": "float", "value": repr(value)}
        if kind is list:
            return {"kind": "list", "items": [self.encode(v, path + (i,)) for i, v in enumerate(value)]}
        if kind is dict:
            if all(type(k) is str and k not in _RESERVED for k in value):
                # Keys stay keys, so the entry reads as the dict it is.
                return {"kind": "dict", "value": {k: self.encode(v, path + (k,)) for k, v in value.items()}}
            return {"kind": "dict", "items": self._items(value.items(), path)}
        if kind is tuple:
            return {"kind": "tuple", "items": [self.encode(v, path + (i,)) for i, v in enumerate(value)]}
        if isinstance(value, tuple) and hasattr(kind, "_fields"):
            ref = import_path(kind)
            if ref is None:
                raise _NoNative
            return {"kind": "namedtuple", "class": ref, "items": [self.encode(v, path + (i,)) for i, v in enumerate(value)]}
        if kind in (set, frozenset):
            items = [self.encode(v, path) for v in value]
            items.sort(key=lambda j: orjson.dumps(j, option=orjson.OPT_SORT_KEYS))
            return {"kind": kind.__name__, "items": items}
        if kind in (bytes, bytearray):
            return {"kind": kind.__name__, "b64": _b64(value)}
        if kind is complex:
            return {"kind": "complex", "real": self.encode(value.real), "imag": self.encode(value.imag)}
        if kind is collections.OrderedDict:
            return {"kind": "OrderedDict", "items": self._items(value.items(), path)}
        if kind is collections.defaultdict:
            factory = value.default_factory
            ref = None if factory is None else import_path(factory)
            if factory is not None and ref is None:
                raise _NoNative
            return {"kind": "defaultdict", "factory": ref, "items": self._items(value.items(), path)}
        if kind is collections.deque:
            return {"kind": "deque", "maxlen": value.maxlen, "items": [self.encode(v, path + (i,)) for i, v in enumerate(value)]}
        if isinstance(value, enum.Enum):
            ref = import_path(kind)
            if ref is None:
                raise _NoNative
            return {"kind": "enum", "class": ref, "name": value.name, "value": self.encode(value.value, path)}
        if isinstance(value, pathlib.PurePath):
            flavour = "windows" if isinstance(value, pathlib.PureWindowsPath) else "posix"
            pure = not isinstance(value, pathlib.Path)
            return {"kind": "path", "flavour": flavour, "pure": pure, "value": str(value)}
        if kind in (_dt.datetime, _dt.time):
            body = {"kind": "datetime" if kind is _dt.datetime else "time", "value": value.isoformat()}
            body.update(_tz_fields(value.tzinfo))
            if value.fold:
                body["fold"] = 1
            return body
        if kind is _dt.date:
            return {"kind": "date", "value": value.isoformat()}
        if kind is _dt.timedelta:
            return {"kind": "timedelta", "days": value.days, "seconds": value.seconds, "microseconds": value.microseconds}
        if kind is np.ndarray:
            return self._array(value)
        if isinstance(value, np.generic):
            if value.dtype.hasobject:
                raise _NoNative
            item = value.item()
            body = {"kind": "numpy_scalar", "dtype": _dtype_descr(value.dtype)}
            if (
                type(item) in (bool, int, float)
                and is_json_native(item)
                and np.asarray(item, dtype=value.dtype).tobytes() == np.asarray(value).tobytes()
            ):
                body["value"] = item
            else:
                body["b64"] = _b64(_canonical(np.asarray(value)).tobytes())
            return body
        if isinstance(value, np.dtype):
            if value.hasobject:
                raise _NoNative
            return {"kind": "numpy_dtype", "descr": _dtype_descr(value)}
        if isinstance(value, type) and issubclass(value, np.generic) and value is not np.object_:
            try:
                descr = np.dtype(value)
            except TypeError:  # abstract scalar types (np.floating) have no dtype
                descr = None
            if descr is not None and descr.type is value:
                return {"kind": "numpy_type", "dtype": _dtype_descr(descr)}
        if isinstance(value, torch.dtype):
            return {"kind": "torch_dtype", "name": str(value).removeprefix("torch.")}
        if kind is torch.device:
            return {"kind": "torch_device", "value": str(value)}
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if _spaces.is_space(value):
            try:
                return {"kind": "space", **_spaces.encode_space(value, self.encode)}
            except EncodeError:
                raise _NoNative from None
        if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
            ref = import_path(value)
            if ref is None:
                raise _NoNative
            return {"kind": "ref", "path": ref}
        raise _NoNative

    def _array(self, arr: np.ndarray) -> dict:
        if arr.dtype.hasobject:
            raise _NoNative
        body: dict[str, Any] = {"kind": "ndarray", "dtype": _dtype_descr(arr.dtype), "shape": list(arr.shape)}
        if self._add_array is not None and arr.nbytes > self._array_bytes:
            body["member"] = self._add_array(_canonical(arr))
            self._external = True
        elif arr.size <= _LIST_ELEMENTS and arr.dtype.kind in "biuf" and arr.dtype.itemsize <= 8 and arr.dtype.isnative and (
            arr.dtype.kind != "f" or bool(np.isfinite(arr).all())
        ):
            body["values"] = arr.tolist()
        else:
            body["b64"] = _b64(_canonical(arr).tobytes())
        return body

    def _tensor(self, t: torch.Tensor) -> dict:
        if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
            raise _NoNative
        cpu = t.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
        raw = cpu.reshape(-1).view(torch.uint8).numpy() if cpu.numel() else np.empty(0, np.uint8)
        return {
            "kind": "tensor",
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "requires_grad": bool(t.requires_grad),
            "parameter": isinstance(t, torch.nn.Parameter),
            "device": str(t.device),
            "data": self._array(raw),
        }


# x87 extended precision keeps 10 meaningful bytes in a 12- or 16-byte long double; the rest
# is whatever memory held, which would make equal arrays encode to different bytes.
_LONGDOUBLE_PAD = np.finfo(np.longdouble).nmant == 63 and np.dtype(np.longdouble).itemsize > 10


def _canonical(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous array whose bytes depend only on its values (long double padding zeroed)."""
    data = np.asarray(arr, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    if _LONGDOUBLE_PAD and data.dtype.type in (np.longdouble, np.clongdouble) and data.dtype.isnative:
        data = data.copy()
        size = np.dtype(np.longdouble).itemsize
        data.reshape(-1).view(np.uint8).reshape(-1, size)[:, 10:] = 0
    return data


def _tz_fields(tz: Any) -> dict[str, Any]:
    """The time zone of a datetime/time, beside its ISO text (which only keeps the offset)."""
    if tz is None or tz is _dt.timezone.utc:  # noqa: UP017 - datetime.UTC is 3.11+
        return {}
    if type(tz) is _dt.timezone:
        name = tz.tzname(None)
        # A fixed offset is all of it, except a name given on purpose (`timezone(td, "EST")`).
        return {} if name == _dt.timezone(tz.utcoffset(None)).tzname(None) else {"tzname": name}
    import zoneinfo

    if type(tz) is zoneinfo.ZoneInfo and isinstance(tz.key, str):
        return {"tz": tz.key}
    raise _NoNative  # pytz, dateutil, custom tzinfo classes: left to pickle


_MAX_DTYPE_DEPTH = 32


def _dtype_descr(dtype: np.dtype) -> Any:
    """A JSON description of ``dtype`` that :func:`_descr_dtype` turns back into an equal one.

    Plain dtypes are their ``.str`` (``"<f4"``, ``">i2"``, ``"<U3"``, ``"<M8[s]"``); sub-array and
    structured dtypes are objects whose fields mirror ``np.dtype``'s own dict form, so field
    offsets, padding, titles and byte order all survive.
    """
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return {"base": _dtype_descr(base), "shape": list(shape)}
    if dtype.fields is None:
        return dtype.str
    names = list(dtype.names or ())
    fields = [dtype.fields[n] for n in names]
    out: dict[str, Any] = {
        "names": names,
        "formats": [_dtype_descr(f[0]) for f in fields],
        "offsets": [int(f[1]) for f in fields],
        "itemsize": dtype.itemsize,
    }
    if any(len(f) > 2 for f in fields):
        out["titles"] = [f[2] if len(f) > 2 else None for f in fields]
    if dtype.isalignedstruct:
        out["aligned"] = True
    return out


def _descr_dtype(descr: Any, _depth: int = 0) -> np.dtype:
    """The dtype described by :func:`_dtype_descr`; never one that holds Python objects."""
    if _depth > _MAX_DTYPE_DEPTH:
        raise DecodeError(f"dtype description is nested deeper than {_MAX_DTYPE_DEPTH} levels.")
    if isinstance(descr, str):
        try:
            dtype = np.dtype(descr)
        except (TypeError, ValueError) as err:
            raise DecodeError(f"`{descr}` is not a numpy dtype ({err}).") from None
    elif isinstance(descr, dict) and "base" in descr:
        shape = descr.get("shape")
        if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
            raise DecodeError(f"expected the sub-array `shape` to be a list of non-negative integers, found {shape!r}.")
        dtype = np.dtype((_descr_dtype(descr["base"], _depth + 1), tuple(shape)))
    elif isinstance(descr, dict):
        names, formats, offsets = descr.get("names"), descr.get("formats"), descr.get("offsets")
        itemsize, titles = descr.get("itemsize"), descr.get("titles")
        if not (
            isinstance(names, list)
            and all(isinstance(n, str) for n in names)
            and isinstance(formats, list)
            and isinstance(offsets, list)
            and all(type(o) is int and o >= 0 for o in offsets)
            and len(names) == len(formats) == len(offsets)
            and type(itemsize) is int
            and itemsize >= 0
            and (titles is None or (isinstance(titles, list) and len(titles) == len(names)))
        ):
            raise DecodeError(
                "expected a structured dtype description with `names`, `formats`, `offsets` of equal "
                "length and an integer `itemsize`."
            )
        spec: dict[str, Any] = {
            "names": names,
            "formats": [_descr_dtype(f, _depth + 1) for f in formats],
            "offsets": offsets,
            "itemsize": itemsize,
        }
        if titles is not None:
            spec["titles"] = titles
        try:
            dtype = np.dtype(spec, align=descr.get("aligned") is True)  # type: ignore[call-overload]
        except (TypeError, ValueError) as err:
            raise DecodeError(f"invalid structured dtype description ({err}).") from None
    else:
        raise DecodeError(f"expected a dtype description, found {type(descr).__name__}.")
    if dtype.hasobject:
        raise DecodeError(f"dtype `{dtype}` holds Python objects; refusing to decode it without pickle.")
    return dtype


# -- JSON text ---------------------------------------------------------------------------------
def dump_json(obj: Any) -> bytes:
    """Pretty, deterministic JSON (key order as given; SB3's ``data`` is human-read)."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"


def parse_json(raw: bytes, *, max_depth: int) -> Any:
    """Parse JSON bytes nested at most ``max_depth`` deep; accepts the ``NaN``/``Infinity``
    tokens Python's ``json`` writes (see :mod:`zipsave._json`)."""
    return _json.loads(raw, max_depth=max_depth)


# -- decoding --------------------------------------------------------------------------------
class Decoder:
    """Decodes ``data`` values under a :class:`~zipsave._unpickle.TrustPolicy`."""

    def __init__(
        self,
        policy: TrustPolicy,
        *,
        load_array: Callable[[str], np.ndarray] | None = None,
        device: torch.device | None = None,
        max_depth: int = 500,
        archive: Any = None,
        member: str | None = None,
        saved_versions: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self.policy = policy
        # The archive's system info (versions that wrote it), read only when an error names one.
        self._saved_versions = saved_versions
        self._load_array = load_array
        self._device = device
        self._max_depth = max_depth
        self._archive = archive
        self._member = member
        self._key: str | None = None

    def decode_entry(self, key: str, value: Any) -> Any:
        self._key = key
        try:
            return self.decode(value, 0)
        except RecursionError:
            raise DecodeError("value is nested too deeply to decode (limit `max_json_depth`).") from None

    def decode(self, value: Any, depth: int = 0) -> Any:
        if depth > self._max_depth:
            raise DecodeError(f"value is nested deeper than {self._max_depth} levels (limit `max_json_depth`).")
        kind = type(value)
        if kind is list:
            return [self.decode(v, depth + 1) for v in value]
        if kind is not dict:
            return value
        if N in value:
            return self._native(value[N], depth + 1)
        if S in value:
            return restricted_loads(_unb64(value[S]), self.policy, key=self._key, member=self._member, archive=self._archive)
        return {k: self.decode(v, depth + 1) for k, v in value.items()}

    def _written_gymnasium(self) -> str | None:
        return None if self._saved_versions is None else self._saved_versions().get("Gymnasium")

    def _resolve(self, ref: Any) -> Any:
        if not isinstance(ref, str) or ":" not in ref:
            raise DecodeError(f"expected an import path `module:qualname`, found {ref!r}.")
        module, qualname = ref.split(":", 1)
        return self.policy.resolve(module, qualname, key=self._key, member=self._member, archive=self._archive)

    def _items(self, body: dict, depth: int) -> list:
        items = _field(body, "items", list)
        out = []
        for pair in items:
            if not isinstance(pair, list) or len(pair) != 2:
                raise DecodeError("expected [key, value] pairs in `items`.")
            out.append((self.decode(pair[0], depth + 1), self.decode(pair[1], depth + 1)))
        return out

    def _native(self, body: Any, depth: int) -> Any:  # noqa: C901 - one dispatch table
        if not isinstance(body, dict):
            raise DecodeError(f"expected the native form to be an object, found {type(body).__name__}.")
        kind = body.get("kind")
        if kind == "int":
            if "hex" in body:
                text = _field(body, "hex", str)
                if not _HEX_INT.fullmatch(text):
                    raise DecodeError(f"expected a hexadecimal integer literal, found {text[:40]!r}.")
                return int(text, 16)
            text = _field(body, "value", str)
            if not _DEC_INT.fullmatch(text):
                raise DecodeError(f"expected a decimal integer literal, found {text[:40]!r}.")
            return int(text)
        if kind == "float":
            text = _field(body, "value", str)
            if text not in ("nan", "inf", "-inf") and not _is_number(text):
                raise DecodeError(f"expected a float literal, found {text!r}.")
            return float(text)
        if kind == "tuple":
            return tuple(self.decode(v, depth) for v in _field(body, "items", list))
        if kind == "list":
            return [self.decode(v, depth) for v in _field(body, "items", list)]
        if kind == "namedtuple":
            cls: Any = self._resolve(body.get("class"))
            # Checked before the call: the class path came from the archive.
            if not (isinstance(cls, type) and issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)):
                raise DecodeError(f"`{body.get('class')}` is not a namedtuple class.")
            fields: tuple = getattr(cls, "_fields", ())
            items = [self.decode(v, depth) for v in _field(body, "items", list)]
            if len(items) != len(fields):
                raise DecodeError(f"`{body.get('class')}` has {len(fields)} fields, found {len(items)} values.")
            return cls._make(items)  # type: ignore[attr-defined]  # tuple.__new__: no class code runs
        if kind == "set":
            return {self.decode(v, depth) for v in _field(body, "items", list)}
        if kind == "frozenset":
            return frozenset(self.decode(v, depth) for v in _field(body, "items", list))
        if kind == "bytes":
            return _unb64(body.get("b64"))
        if kind == "bytearray":
            return bytearray(_unb64(body.get("b64")))
        if kind == "complex":
            return complex(self.decode(body.get("real"), depth), self.decode(body.get("imag"), depth))
        if kind == "dict":
            if "value" in body:
                return {k: self.decode(v, depth) for k, v in _field(body, "value", dict).items()}
            return dict(self._items(body, depth))
        if kind == "OrderedDict":
            return collections.OrderedDict(self._items(body, depth))
        if kind == "defaultdict":
            factory = body.get("factory")
            return collections.defaultdict(None if factory is None else self._resolve(factory), self._items(body, depth))
        if kind == "deque":
            maxlen = body.get("maxlen")
            if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
                raise DecodeError(f"expected `maxlen` to be a non-negative integer or null, found {maxlen!r}.")
            return collections.deque((self.decode(v, depth) for v in _field(body, "items", list)), maxlen)
        if kind == "enum":
            cls = self._resolve(body.get("class"))
            if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
                raise DecodeError(f"`{body.get('class')}` is not an Enum class.")
            name = body.get("name")
            if isinstance(name, str) and name in cls.__members__:
                return cls[name]
            return cls(self.decode(body.get("value"), depth))
        if kind == "path":
            text = _field(body, "value", str)
            windows = body.get("flavour") == "windows"
            if body.get("pure"):
                return pathlib.PureWindowsPath(text) if windows else pathlib.PurePosixPath(text)
            return pathlib.Path(text)
        if kind in ("datetime", "time"):
            parse = _dt.datetime.fromisoformat if kind == "datetime" else _dt.time.fromisoformat
            value = parse(_field(body, "value", str))
            if "tz" in body:
                import zoneinfo

                value = value.replace(tzinfo=zoneinfo.ZoneInfo(_field(body, "tz", str)))
            elif "tzname" in body:
                offset = value.utcoffset()
                if offset is None:
                    raise DecodeError("a named fixed time zone needs an offset in `value`.")
                value = value.replace(tzinfo=_dt.timezone(offset, _field(body, "tzname", str)))
            fold = body.get("fold", 0)
            if fold not in (0, 1) or type(fold) is not int:
                raise DecodeError(f"expected `fold` to be 0 or 1, found {fold!r}.")
            return value.replace(fold=fold) if fold else value
        if kind == "date":
            return _dt.date.fromisoformat(_field(body, "value", str))
        if kind == "timedelta":
            return _dt.timedelta(days=_field(body, "days", int), seconds=_field(body, "seconds", int), microseconds=_field(body, "microseconds", int))
        if kind == "ndarray":
            return self._array(body)
        if kind == "numpy_scalar":
            dtype = _descr_dtype(body.get("dtype"))
            if "value" in body:
                if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
                    raise DecodeError(f"a numpy scalar of dtype {dtype} cannot be given as a JSON `value`.")
                if type(body["value"]) not in (bool, int, float):
                    raise DecodeError(f"expected the numpy scalar `value` to be a number, found {type(body['value']).__name__}.")
                return np.asarray(body["value"], dtype=dtype)[()]
            raw = _unb64(body.get("b64"))
            if len(raw) != dtype.itemsize:
                raise DecodeError(f"numpy scalar holds {len(raw)} bytes, expected {dtype.itemsize} for dtype {dtype}.")
            return np.frombuffer(raw, dtype=dtype)[0].copy()
        if kind == "numpy_dtype":
            return _descr_dtype(body.get("descr"))
        if kind == "numpy_type":
            scalar_type = _descr_dtype(body.get("dtype")).type
            if scalar_type is np.void and not isinstance(body.get("dtype"), str):
                raise DecodeError("a numpy scalar type is described by a plain dtype string.")
            return scalar_type
        if kind == "torch_dtype":
            torch_dtype = getattr(torch, _field(body, "name", str), None)
            if not isinstance(torch_dtype, torch.dtype):
                raise DecodeError(f"unknown torch dtype `{body.get('name')}`.")
            return torch_dtype
        if kind == "torch_device":
            return torch.device(_field(body, "value", str))
        if kind == "tensor":
            return self._tensor(body)
        if kind == "space":
            return _spaces.decode_space(
                {k: v for k, v in body.items() if k != "kind"},
                lambda j: self.decode(j, depth),
                key=self._key,
                written_with=self._written_gymnasium,
            )
        if kind == "ref":
            return self._resolve(body.get("path"))
        raise DecodeError(f"unknown native kind {kind!r}; was the archive written by a newer zipsave?")

    def _array(self, body: dict) -> np.ndarray:
        dtype = _descr_dtype(body.get("dtype"))
        shape = _field(body, "shape", list)
        if not all(type(s) is int and s >= 0 for s in shape):
            raise DecodeError(f"expected `shape` to be a list of non-negative integers, found {shape!r}.")
        count = math.prod(shape)
        if "member" in body:
            if self._load_array is None:
                raise DecodeError("array member given but this archive has no array reader.")
            name = _field(body, "member", str)
            try:
                arr = self._load_array(name)
            except UnsafeGlobalError:
                raise
            except ZipsaveError as err:
                if name in err.detail:
                    raise
                # Same class (an IntegrityError stays one for strict=True), member named.
                raise type(err)(f"array member `{name}`: {err.detail}", hint=err.hint) from err
            if arr.dtype != dtype or list(arr.shape) != shape:
                raise DecodeError(
                    f"array member `{body['member']}` holds {arr.dtype}{list(arr.shape)}, expected {dtype}{shape}."
                )
            return arr
        if "values" in body:
            if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
                raise DecodeError(f"an array of dtype {dtype} cannot be given as JSON `values`.")
            values = body["values"]
            if not isinstance(values, list) and type(values) not in (bool, int, float):
                raise DecodeError(f"expected `values` to be a list or a number, found {type(values).__name__}.")
            arr = np.array(values, dtype=dtype)
            if arr.size != count:
                raise DecodeError(f"array holds {arr.size} values, expected {count} for shape {shape}.")
            return arr.reshape(shape)
        raw = _unb64(body.get("b64"))
        if len(raw) != count * dtype.itemsize:
            raise DecodeError(f"array holds {len(raw)} bytes, expected {count * dtype.itemsize} for {dtype}{shape}.")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    def _tensor(self, body: dict) -> torch.Tensor:
        dtype = getattr(torch, _field(body, "dtype", str), None)
        if not isinstance(dtype, torch.dtype):
            raise DecodeError(f"unknown torch dtype `{body.get('dtype')}`.")
        shape = _field(body, "shape", list)
        if not all(type(s) is int and s >= 0 for s in shape):
            raise DecodeError(f"expected the tensor `shape` to be a list of non-negative integers, found {shape!r}.")
        raw = self._native(_field(body, "data", dict), 0)
        if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8:
            raise DecodeError("tensor data must be a uint8 array.")
        if raw.size != math.prod(shape) * dtype.itemsize:
            raise DecodeError(f"tensor holds {raw.size} bytes, expected {math.prod(shape) * dtype.itemsize} for {dtype}{shape}.")
        t = torch.from_numpy(np.ascontiguousarray(raw)).view(dtype).reshape(shape) if raw.size else torch.empty(shape, dtype=dtype)
        device = self._device if self._device is not None else torch.device(body.get("device", "cpu"))
        if device.type != "cpu":
            t = t.to(device)
        if body.get("parameter"):
            return torch.nn.Parameter(t, requires_grad=bool(body.get("requires_grad")))
        return t.requires_grad_(bool(body.get("requires_grad")))


_DEC_INT = re.compile(r"-?[0-9]+")
_HEX_INT = re.compile(r"-?0x[0-9a-f]+")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _field(body: dict, name: str, kind: type) -> Any:
    value = body.get(name)
    if type(value) is not kind:
        raise DecodeError(
            f"expected field `{name}` of the {body.get('kind')!r} form to be {kind.__name__}, found {type(value).__name__}."
        )
    return value
