"""The JSON of the ``data`` member -> Python values, preferring the pickle-free native form;
``":serialized:"`` goes through the restricted unpickler of :mod:`zipsave._trust`."""

from __future__ import annotations

import collections
import datetime as _dt
import enum
import math
import pathlib
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from .. import _codec, _trust  # packages whose parts load on first use: arrays, spaces, the unpickler
from .._bounds import MAX_INT_BITS, KeyGuard, alloc_budget, check_int
from .._format import NATIVE_KEY as N
from .._format import SERIALIZED_KEY as S
from .._invariants import check_tensor, quantized_dtypes
from .._items import item_problem
from .._json import stack_low
from ..exceptions import ArchiveLimitError, DecodeError, UnsafeGlobalError, ZipsaveError

__all__ = ["Decoder", "field"]


def restricted_loads(data: bytes, policy: _trust.TrustPolicy, **where: Any) -> Any:
    """:func:`zipsave._trust.restricted_loads`, whose modules load on the first ``":serialized:"``
    value rather than with every ``data`` member."""
    return _trust.restricted_loads(data, policy, **where)


# -- decoding --------------------------------------------------------------------------------
class Decoder:
    """Decodes ``data`` values under a :class:`~zipsave._trust.TrustPolicy`."""

    def __init__(
        self,
        policy: _trust.TrustPolicy | Callable[[], _trust.TrustPolicy],
        *,
        load_array: Callable[[str], np.ndarray] | None = None,
        device: torch.device | None = None,
        max_depth: int = 500,
        archive: Any = None,
        member: str | None = None,
        saved_versions: Callable[[], Mapping[str, str]] | None = None,
        limits: Any = None,
    ) -> None:
        # A policy, or a function giving it on first use (a load's session builds its default
        # policy only when a value needs one).
        self._policy = policy
        self._limits = limits  # what a pickled value may allocate (Limits.alloc_floor/alloc_ratio)
        # The archive's system info (versions that wrote it), read only when an error names one.
        self._saved_versions = saved_versions
        self._load_array = load_array
        self._device = device
        self._max_depth = max_depth
        self._archive = archive
        self._member = member
        self._key: str | None = None
        self._keys = KeyGuard(1 << 62)

    @property
    def policy(self) -> _trust.TrustPolicy:
        """The trust policy that pickled values and import paths are decoded under."""
        policy = self._policy
        if not isinstance(policy, _trust.TrustPolicy):
            policy = self._policy = policy()
        return policy

    @property
    def _where(self) -> dict[str, Any]:
        return {"key": self._key, "member": self._member, "archive": self._archive}

    def decode_entry(self, key: str, value: Any) -> Any:
        self._key = key
        # JSON shares no parts, so hashing is linear; the guard bounds collisions per container.
        self._keys = KeyGuard(1 << 62, **self._where)
        try:
            return self.decode(value, 0)
        except RecursionError:
            raise DecodeError("value is nested too deeply to decode (limit `max_json_depth`).") from None

    def decode(self, value: Any, depth: int = 0) -> Any:
        if depth > self._max_depth or (depth > _SHALLOW and stack_low()):
            # Not at the recursion limit itself, where a collector pass's finalizer would fail
            # (lost as an "exception ignored"): within `STACK_MARGIN` frames of it.
            raise DecodeError(
                f"value is nested deeper than {self._max_depth} levels (limit `max_json_depth`)."
                if depth > self._max_depth
                else f"value is nested more deeply than Python can decode here ({depth} levels)."
            )
        kind = type(value)
        if kind is list:  # loops, not comprehensions: one frame a level on 3.11, not two
            items = []
            for v in value:
                items.append(self.decode(v, depth + 1))
            return items
        if kind is not dict:
            return value
        if N in value:
            return self._native(value[N], depth + 1)
        if S in value:
            return restricted_loads(_codec.unb64(value[S]), self.policy, limits=self._limits, **self._where)
        out = {}
        for k, v in value.items():
            out[k] = self.decode(v, depth + 1)
        return out

    def _written_gymnasium(self) -> str | None:
        return None if self._saved_versions is None else self._saved_versions().get("Gymnasium")

    def _resolve(self, ref: Any) -> Any:
        if not isinstance(ref, str) or ":" not in ref:
            raise DecodeError(f"expected an import path `module:qualname`, found {ref!r}.")
        module, qualname = ref.split(":", 1)
        return self.policy.resolve(module, qualname, **self._where)

    def _items(self, body: dict, depth: int) -> list:
        items = field(body, "items", list)
        out = []
        for pair in items:
            if not isinstance(pair, list) or len(pair) != 2:
                raise DecodeError("expected [key, value] pairs in `items`.")
            out.append((self.decode(pair[0], depth + 1), self.decode(pair[1], depth + 1)))
        target = object()
        for key, _ in out:
            self._keys.add(target, key)
        return out

    def _members(self, body: dict, depth: int) -> list:
        """The items of a set or frozenset, checked against hash flooding before hashing."""
        items = [self.decode(v, depth) for v in field(body, "items", list)]
        self._keys.items_of(items)
        return items

    def _native(self, body: Any, depth: int) -> Any:  # noqa: C901 - one dispatch table
        if not isinstance(body, dict):
            raise DecodeError(f"expected the native form to be an object, found {type(body).__name__}.")
        kind = body.get("kind")
        if kind == "int":
            if "hex" in body:
                text = field(body, "hex", str)
                if not re.fullmatch(_HEX_INT, text):
                    raise DecodeError(f"expected a hexadecimal integer literal, found {text[:40]!r}.")
                if len(text) > MAX_INT_BITS // 4 + 4:
                    raise DecodeError(
                        f"a hexadecimal integer of {len(text)} digits is longer than {MAX_INT_BITS // 4}."
                    )
                return check_int(int(text, 16), "an integer", **self._where)
            text = field(body, "value", str)
            if not re.fullmatch(_DEC_INT, text):
                raise DecodeError(f"expected a decimal integer literal, found {text[:40]!r}.")
            if len(text) > MAX_INT_BITS // 3 + 2:
                raise DecodeError(f"a decimal integer of {len(text)} digits is longer than {MAX_INT_BITS // 3}.")
            return check_int(int(text), "an integer", **self._where)
        if kind == "float":
            text = field(body, "value", str)
            if text not in ("nan", "inf", "-inf") and not _is_number(text):
                raise DecodeError(f"expected a float literal, found {text!r}.")
            return float(text)
        if kind == "tuple":
            return tuple(self.decode(v, depth) for v in field(body, "items", list))
        if kind == "list":
            return [self.decode(v, depth) for v in field(body, "items", list)]
        if kind == "namedtuple":
            cls: Any = self._resolve(body.get("class"))
            # Checked before the call: the class path came from the archive.
            if not (
                isinstance(cls, type) and issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)
            ):
                raise DecodeError(f"`{body.get('class')}` is not a namedtuple class.")
            fields: tuple = getattr(cls, "_fields", ())
            items = [self.decode(v, depth) for v in field(body, "items", list)]
            if len(items) != len(fields):
                raise DecodeError(f"`{body.get('class')}` has {len(fields)} fields, found {len(items)} values.")
            return cls._make(items)  # type: ignore[attr-defined]  # tuple.__new__: no class code runs
        if kind == "set":
            return set(self._members(body, depth))
        if kind == "frozenset":
            return frozenset(self._members(body, depth))
        if kind == "bytes":
            return _codec.unb64(body.get("b64"))
        if kind == "bytearray":
            return bytearray(_codec.unb64(body.get("b64")))
        if kind == "complex":
            return complex(self.decode(body.get("real"), depth), self.decode(body.get("imag"), depth))
        if kind == "dict":
            if "value" in body:
                return {k: self.decode(v, depth) for k, v in field(body, "value", dict).items()}
            return dict(self._items(body, depth))
        if kind == "OrderedDict":
            return collections.OrderedDict(self._items(body, depth))
        if kind == "defaultdict":
            factory = body.get("factory")
            return collections.defaultdict(
                None if factory is None else self._resolve(factory), self._items(body, depth)
            )
        if kind == "deque":
            maxlen = body.get("maxlen")
            if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
                raise DecodeError(f"expected `maxlen` to be a non-negative integer or null, found {maxlen!r}.")
            return collections.deque((self.decode(v, depth) for v in field(body, "items", list)), maxlen)
        if kind == "enum":
            cls = self._resolve(body.get("class"))
            if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
                raise DecodeError(f"`{body.get('class')}` is not an Enum class.")
            name = body.get("name")
            if isinstance(name, str) and name in cls.__members__:
                return cls[name]
            return cls(self.decode(body.get("value"), depth))
        if kind == "path":
            text = field(body, "value", str)
            windows = body.get("flavour") == "windows"
            if body.get("pure"):
                return pathlib.PureWindowsPath(text) if windows else pathlib.PurePosixPath(text)
            return pathlib.Path(text)
        if kind in ("datetime", "time"):
            parse = _dt.datetime.fromisoformat if kind == "datetime" else _dt.time.fromisoformat
            value = parse(field(body, "value", str))
            if "tz" in body:
                import zoneinfo

                value = value.replace(tzinfo=zoneinfo.ZoneInfo(field(body, "tz", str)))
            elif "tzname" in body:
                offset = value.utcoffset()
                if offset is None:
                    raise DecodeError("a named fixed time zone needs an offset in `value`.")
                value = value.replace(tzinfo=_dt.timezone(offset, field(body, "tzname", str)))
            fold = body.get("fold", 0)
            if fold not in (0, 1) or type(fold) is not int:
                raise DecodeError(f"expected `fold` to be 0 or 1, found {fold!r}.")
            return value.replace(fold=fold) if fold else value
        if kind == "date":
            return _dt.date.fromisoformat(field(body, "value", str))
        if kind == "timedelta":
            return _dt.timedelta(
                days=field(body, "days", int),
                seconds=field(body, "seconds", int),
                microseconds=field(body, "microseconds", int),
            )
        if kind == "ndarray":
            return self._array(body)
        if kind == "numpy_scalar":
            dtype = _codec.descr_dtype(body.get("dtype"))
            if "value" in body:
                # "mM": zipsave 0.2 wrote datetime64/timedelta64 in ns as their int count.
                if dtype.kind not in "biufcmM" or dtype.fields is not None or dtype.subdtype is not None:
                    raise DecodeError(f"a numpy scalar of dtype {dtype} cannot be given as a JSON `value`.")
                if dtype.kind in "mM" and type(body["value"]) is not int:
                    raise DecodeError(
                        f"expected a numpy {dtype} scalar `value` to be an integer count, found {type(body['value']).__name__}."
                    )
                if type(body["value"]) not in (bool, int, float):
                    raise DecodeError(
                        f"expected the numpy scalar `value` to be a number, found {type(body['value']).__name__}."
                    )
                return np.asarray(body["value"], dtype=dtype)[()]
            raw = _codec.unb64(body.get("b64"))
            if len(raw) != dtype.itemsize:
                raise DecodeError(f"numpy scalar holds {len(raw)} bytes, expected {dtype.itemsize} for dtype {dtype}.")
            _check_bools(dtype, raw, "a numpy scalar")
            return np.frombuffer(raw, dtype=dtype)[0].copy()
        if kind == "numpy_dtype":
            return _codec.descr_dtype(body.get("descr"))
        if kind == "numpy_type":
            scalar_type = _codec.descr_dtype(body.get("dtype")).type
            if scalar_type is np.void and not isinstance(body.get("dtype"), str):
                raise DecodeError("a numpy scalar type is described by a plain dtype string.")
            return scalar_type
        if kind == "torch_dtype":
            torch_dtype = getattr(torch, field(body, "name", str), None)
            if not isinstance(torch_dtype, torch.dtype):
                raise DecodeError(f"unknown torch dtype `{body.get('name')}`.")
            return torch_dtype
        if kind == "torch_device":
            return torch.device(field(body, "value", str))
        if kind == "tensor":
            return self._tensor(body)
        if kind in ("fraction", "decimal", "random", "torch_generator"):
            return _codec._numeric.decode_numeric(
                kind, body, lambda j: self.decode(j, depth), lambda state: self._native(state, 0), self._where
            )
        if kind == "space":
            return _codec._spaces.decode_space(
                {k: v for k, v in body.items() if k != "kind"},
                lambda j: self.decode(j, depth),
                key=self._key,
                written_with=self._written_gymnasium,
            )
        if kind == "ref":
            return self._resolve(body.get("path"))
        raise DecodeError(f"unknown native kind {kind!r}; was the archive written by a newer zipsave?")

    def _array(self, body: dict) -> np.ndarray:
        dtype = _codec.descr_dtype(body.get("dtype"))
        shape = field(body, "shape", list)
        if len(shape) > 64 or not all(type(s) is int and s >= 0 for s in shape):  # a product of more: quadratic
            raise DecodeError(f"expected `shape` to be a list of non-negative integers, found {shape[:65]!r}.")
        count, walked = math.prod(shape), math.prod(max(s, 1) for s in shape)
        if walked > alloc_budget(count * dtype.itemsize, self._limits):  # what tolist() and iteration visit
            raise ArchiveLimitError(
                f"an array of shape {shape[:8]} and dtype {dtype} holds {count * dtype.itemsize} bytes and stands for "
                f"{walked} elements (each zero dimension or item size counted as 1), past the budget of its bytes."
            )
        if dtype.itemsize == 0 and count:
            return self._unsized_array(dtype, shape, count, body)
        if "member" in body:
            if self._load_array is None:
                raise DecodeError("array member given but this archive has no array reader.")
            name = field(body, "member", str)
            try:
                arr = self._load_array(name)
            except UnsafeGlobalError:
                raise
            except ZipsaveError as err:
                if name in err.detail or err.member == name:
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
        raw = _codec.unb64(body.get("b64"))
        if len(raw) != count * dtype.itemsize:
            raise DecodeError(f"array holds {len(raw)} bytes, expected {count * dtype.itemsize} for {dtype}{shape}.")
        _check_bools(dtype, raw, "an array")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    def _unsized_array(self, dtype: np.dtype, shape: list, count: int, body: dict) -> np.ndarray:
        """An array of items of no bytes (``V0``, records of ``V0`` or ``S0`` fields: its shape,
        bounded by :meth:`_array`). ``S0``/``U0``: numpy makes one unfilled byte (four) each."""
        if dtype.kind != "V" or dtype.subdtype is not None or body.get("b64") != "":  # no member, values, bytes
            raise DecodeError(f"an array of {count} elements of dtype {dtype.str} (0 bytes an item) holds no data.")
        arr = np.zeros(shape, dtype=dtype)
        if arr.dtype != dtype or arr.nbytes:
            raise DecodeError(f"numpy made an array of dtype {arr.dtype} for {dtype}{shape}.")
        return arr

    def _tensor(self, body: dict) -> torch.Tensor:
        dtype = getattr(torch, field(body, "dtype", str), None)
        if not isinstance(dtype, torch.dtype):
            raise DecodeError(f"unknown torch dtype `{body.get('dtype')}`.")
        if dtype in quantized_dtypes():  # torch.empty would make a quantized tensor; zipsave writes none
            raise DecodeError(f"a tensor of the quantized dtype {dtype} is not a value zipsave writes or loads.")
        shape = field(body, "shape", list)
        if len(shape) > 64 or not all(type(s) is int and s >= 0 for s in shape):  # numpy's most dimensions
            raise DecodeError(
                f"expected the tensor `shape` to be a list of non-negative integers, found {shape[:65]!r}."
            )
        raw = self._native(field(body, "data", dict), 0)
        if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8:
            raise DecodeError("tensor data must be a uint8 array.")
        if raw.size != math.prod(shape) * dtype.itemsize:
            raise DecodeError(
                f"tensor holds {raw.size} bytes, expected {math.prod(shape) * dtype.itemsize} for {dtype}{shape}."
            )
        t = (
            torch.from_numpy(np.ascontiguousarray(raw)).view(dtype).reshape(shape)
            if raw.size
            else torch.empty(shape, dtype=dtype)
        )
        try:  # every tensor a load returns is checked alike, whichever form it came in
            check_tensor(t, key=self._key or "")
        except ZipsaveError as err:
            raise DecodeError(err.detail) from None
        device = self._device if self._device is not None else torch.device(body.get("device", "cpu"))
        if device.type != "cpu":
            t = t.to(device)
        if body.get("parameter"):
            return torch.nn.Parameter(t, requires_grad=bool(body.get("requires_grad")))
        return t.requires_grad_(bool(body.get("requires_grad")))


#: Nesting a value may reach before :meth:`Decoder.decode` asks how close the stack is to the
#: recursion limit (a walk of the frames in use: shallow values never pay it).
_SHALLOW = 64

# Compiled (and cached by `re`) on first use: importing compiles nothing.
_DEC_INT = r"-?[0-9]+"
_HEX_INT = r"-?0x[0-9a-f]+"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_bools(dtype: np.dtype, raw: bytes, what: str) -> None:
    problem = item_problem(dtype, raw, what)
    if problem:
        raise DecodeError(f"{problem}.")


def field(body: dict, name: str, kind: type) -> Any:
    """``body[name]``, which must be exactly of type ``kind``."""
    value = body.get(name)
    if type(value) is not kind:
        raise DecodeError(
            f"expected field `{name}` of the {body.get('kind')!r} form to be {kind.__name__}, found {type(value).__name__}."
        )
    return value
