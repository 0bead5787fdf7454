"""Python values -> the JSON of the ``data`` member: native values as they are, others tagged
with SB3's ``":type:"``/``":serialized:"`` and zipsave's pickle-free ``":zipsave:"`` form."""

from __future__ import annotations

import collections
import datetime as _dt
import enum
import importlib
import math
import pathlib
import random
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

# _codec: the array, pickle, space and tensor helpers load with the first value that is not
# JSON as it is (a save of modules and numbers needs none of them)
from .. import _codec
from .._format import NATIVE_KEY as N
from .._format import RESERVED
from .._format import SERIALIZED_KEY as S
from .._format import TYPE_KEY as T
from ..exceptions import EncodeError

__all__ = ["Encoder", "find_cycle", "import_path", "is_json_native", "refuse_nested"]


def refuse_nested(value: Any, key: str | None = None) -> None:
    """A nested tensor has no dense form to write and no form torch's safe loader reads back.

    Raises
    ------
    EncodeError
        ``value`` is a nested tensor (``torch.nested``, strided or jagged).
    """
    if isinstance(value, torch.Tensor) and value.is_nested:
        raise EncodeError(
            "is a nested tensor (`torch.nested`), which has no dense form to save and which torch's safe "
            "loader (`weights_only=True`) does not read back; nothing was written.",
            key=key,
            hint="Save its parts instead, `list(t.unbind())`, and rebuild it after loading with "
            "`torch.nested.nested_tensor(parts)`.",
        )


#: The integers orjson writes as they are: int64 and uint64.
_JSON_INTS = (-(2**63), 2**64 - 1)
#: Arrays up to this many elements are written as readable JSON lists.
_LIST_ELEMENTS = 256


def is_json_native(value: Any, _depth: int = 0) -> bool:
    """True when ``value`` survives ``orjson`` unchanged in type and value."""
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return True
    if kind is int:
        return _JSON_INTS[0] <= value <= _JSON_INTS[1]
    if kind is float:
        return math.isfinite(value)
    if _depth > 200:
        return False
    if kind is list:
        return all(is_json_native(v, _depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and k not in RESERVED for k in value) and all(
            is_json_native(v, _depth + 1) for v in value.values()
        )
    return False


def find_cycle(value: Any) -> tuple | None:
    """The path (keys/indices) at which a container reaches one of its own ancestors again,
    ``()`` when the top value holds itself, ``None`` when there is no cycle. Iterative, so it
    works where encoding ran out of stack."""

    def children(obj: Any) -> Any:
        if isinstance(obj, dict):
            return iter(obj.items())
        if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
            return enumerate(obj)
        return iter(())

    on_path = {id(value)}
    stack: list[tuple[Any, Any, tuple]] = [(value, children(value), ())]
    while stack:
        obj, items, path = stack[-1]
        step = next(items, None)
        if step is None:
            on_path.discard(id(obj))
            stack.pop()
            continue
        label, child = step
        if id(child) in on_path:
            return path + (label,)
        if isinstance(child, (dict, list, tuple, set, frozenset, collections.deque)):
            on_path.add(id(child))
            stack.append((child, children(child), path + (label,)))
    return None


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


def _imported_class(module: str, name: str) -> type | None:
    """``module.name`` where ``module`` is imported, else ``None``: a value of a class whose
    module no one imported cannot be at hand, and importing ``fractions`` and ``decimal`` cost
    every first save about 3 ms."""
    found = sys.modules.get(module)
    return getattr(found, name, None) if found is not None else None


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
        except _codec.NoNative:
            native = None
        except RecursionError as err:
            cycle = find_cycle(value)
            if cycle is not None:
                where = ".".join(map(str, cycle))
                raise EncodeError(
                    f"holds a reference cycle (a container inside itself) at `{where}`, which the JSON "
                    "of `data` cannot hold.",
                    key=key,
                    hint=f"Break the cycle before saving, or leave it out with `exclude=[{key!r}]`.",
                ) from err
            raise EncodeError(
                "is nested too deeply to save.", key=key, hint=f"Leave it out with `exclude=[{key!r}]`."
            ) from err
        except EncodeError as err:
            if err.key is None:  # raised for a value nested inside this entry
                err.key = key
                err.args = (err._compose(),)
            raise
        out: dict[str, Any] = {T: _codec.type_hint(value)}
        # SB3 reads only the pickle; skip it when the value's arrays live in .npy members
        # (SB3 #2141: a pickled copy would put them back into the JSON).
        if native is None or not self._external:
            try:
                out[S] = _codec.pickle_value(value)
            except Exception as err:
                if native is None:
                    raise EncodeError(
                        f"cannot be saved: it has no JSON form and does not pickle ({type(err).__name__}: {err}).",
                        key=key,
                        hint=f"Leave it out with `exclude=[{key!r}]`.",
                    ) from err
        elif self._stand_in is not None:
            try:
                out[S] = _codec.pickle_value(self._stand_in(key, value))
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
        if kind is int and _JSON_INTS[0] <= value <= _JSON_INTS[1]:
            return value
        if kind is float and math.isfinite(value):
            return value
        if kind is list:
            return [self.encode(v, path + (i,)) for i, v in enumerate(value)]
        if kind is dict and all(type(k) is str and k not in RESERVED for k in value):
            return {k: self.encode(v, path + (k,)) for k, v in value.items()}
        try:
            return {T: _codec.type_hint(value), N: self._native(value, path)}
        except _codec.NoNative:
            pass
        try:
            return {T: _codec.type_hint(value), S: _codec.pickle_value(value)}
        except Exception as err:
            where = ".".join(map(str, path))
            raise EncodeError(
                f"value at `{where}` of type {_codec.type_hint(value)} has no JSON form and does not pickle "
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
            if all(type(k) is str and k not in RESERVED for k in value):
                # Keys stay keys, so the entry reads as the dict it is.
                return {"kind": "dict", "value": {k: self.encode(v, path + (k,)) for k, v in value.items()}}
            return {"kind": "dict", "items": self._items(value.items(), path)}
        if kind is tuple:
            return {"kind": "tuple", "items": [self.encode(v, path + (i,)) for i, v in enumerate(value)]}
        if isinstance(value, tuple) and hasattr(kind, "_fields"):
            ref = import_path(kind)
            if ref is None:
                raise _codec.NoNative
            return {
                "kind": "namedtuple",
                "class": ref,
                "items": [self.encode(v, path + (i,)) for i, v in enumerate(value)],
            }
        if kind in (set, frozenset):
            import orjson  # for sets only: a save without one need not import it (`_json_write.pretty_json`)

            items = [self.encode(v, path) for v in value]
            items.sort(key=lambda j: orjson.dumps(j, option=orjson.OPT_SORT_KEYS))
            return {"kind": kind.__name__, "items": items}
        if kind in (bytes, bytearray):
            return {"kind": kind.__name__, "b64": _codec.b64(value)}
        if kind is complex:
            return {"kind": "complex", "real": self.encode(value.real), "imag": self.encode(value.imag)}
        if kind is collections.OrderedDict:
            return {"kind": "OrderedDict", "items": self._items(value.items(), path)}
        if kind is collections.defaultdict:
            factory = value.default_factory
            ref = None if factory is None else import_path(factory)
            if factory is not None and ref is None:
                raise _codec.NoNative
            return {"kind": "defaultdict", "factory": ref, "items": self._items(value.items(), path)}
        if kind is collections.deque:
            return {
                "kind": "deque",
                "maxlen": value.maxlen,
                "items": [self.encode(v, path + (i,)) for i, v in enumerate(value)],
            }
        if isinstance(value, enum.Enum):
            ref = import_path(kind)
            if ref is None:
                raise _codec.NoNative
            return {"kind": "enum", "class": ref, "name": value.name, "value": self.encode(value.value, path)}
        if isinstance(value, pathlib.PurePath):
            flavour = "windows" if isinstance(value, pathlib.PureWindowsPath) else "posix"
            pure = not isinstance(value, pathlib.Path)
            return {"kind": "path", "flavour": flavour, "pure": pure, "value": str(value)}
        if kind in (_dt.datetime, _dt.time):
            body = {"kind": "datetime" if kind is _dt.datetime else "time", "value": value.isoformat()}
            body.update(_codec.tz_fields(value.tzinfo))
            if value.fold:
                body["fold"] = 1
            return body
        if kind is _dt.date:
            return {"kind": "date", "value": value.isoformat()}
        if kind is _dt.timedelta:
            return {
                "kind": "timedelta",
                "days": value.days,
                "seconds": value.seconds,
                "microseconds": value.microseconds,
            }
        if kind is np.ndarray or kind is np.memmap:  # a memmap's values: its file is this machine's
            return self._array(np.asarray(value))
        if isinstance(value, np.generic):
            if value.dtype.hasobject:
                raise _codec.NoNative
            item = value.item()
            body = {"kind": "numpy_scalar", "dtype": _codec.dtype_descr(value.dtype)}
            # datetime64/timedelta64 in ns or finer give a bare int from item(): keep the bytes.
            if (
                value.dtype.kind in "biuf"
                and type(item) in (bool, int, float)
                and is_json_native(item)
                and np.asarray(item, dtype=value.dtype).tobytes() == np.asarray(value).tobytes()
            ):
                body["value"] = item
            else:
                body["b64"] = _codec.b64(_codec.canonical_array(np.asarray(value)).tobytes())
            return body
        if isinstance(value, np.dtype):
            if value.hasobject:
                raise _codec.NoNative
            return {"kind": "numpy_dtype", "descr": _codec.dtype_descr(value)}
        if isinstance(value, type) and issubclass(value, np.generic) and value is not np.object_:
            try:
                descr = np.dtype(value)
            except TypeError:  # abstract scalar types (np.floating) have no dtype
                descr = None
            if descr is not None and descr.type is value:
                return {"kind": "numpy_type", "dtype": _codec.dtype_descr(descr)}
        if isinstance(value, torch.dtype):
            return {"kind": "torch_dtype", "name": str(value).removeprefix("torch.")}
        if kind is torch.device:
            return {"kind": "torch_device", "value": str(value)}
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if kind is _imported_class("fractions", "Fraction"):
            return {
                "kind": "fraction",
                "numerator": self.encode(value.numerator),
                "denominator": self.encode(value.denominator),
            }
        if kind is _imported_class("decimal", "Decimal"):
            return {"kind": "decimal", "value": str(value)}  # exact: sign, digits, exponent, NaN
        if kind is random.Random:
            version, words, gauss_next = value.getstate()
            state = np.asarray(words, dtype="<u4")  # 625 words: one base64 line, not 625 JSON lines
            return {
                "kind": "random",
                "version": version,
                "state": self._array(state),
                "gauss_next": self.encode(gauss_next),
            }
        if kind is torch.Generator:
            state = value.get_state().numpy()
            return {"kind": "torch_generator", "device": str(value.device), "state": self._array(state)}
        if _codec.is_space(value):  # its encoder loads with the first space
            try:
                return {"kind": "space", **_codec._spaces.encode_space(value, self.encode)}
            except EncodeError:
                raise _codec.NoNative from None
        if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
            ref = import_path(value)
            if ref is None:
                raise _codec.NoNative
            return {"kind": "ref", "path": ref}
        raise _codec.NoNative

    def _array(self, arr: np.ndarray) -> dict:
        if arr.dtype.hasobject:
            raise _codec.NoNative
        body: dict[str, Any] = {"kind": "ndarray", "dtype": _codec.dtype_descr(arr.dtype), "shape": list(arr.shape)}
        if self._add_array is not None and arr.nbytes > self._array_bytes:
            body["member"] = self._add_array(_codec.canonical_array(arr))
            self._external = True
        elif (
            arr.size <= _LIST_ELEMENTS
            and arr.dtype.kind in "biuf"
            and arr.dtype.itemsize <= 8
            and arr.dtype.isnative
            and (arr.dtype.kind != "f" or bool(np.isfinite(arr).all()))
        ):
            body["values"] = arr.tolist()
        else:
            body["b64"] = _codec.b64(_codec.canonical_array(arr).tobytes())
        return body

    def _tensor(self, t: torch.Tensor) -> dict:
        refuse_nested(t)
        if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
            raise _codec.NoNative
        cpu = t.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
        raw = _codec.flat_bytes(cpu).numpy() if cpu.numel() else np.empty(0, np.uint8)
        return {
            "kind": "tensor",
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "requires_grad": bool(t.requires_grad),
            "parameter": isinstance(t, torch.nn.Parameter),
            "device": str(t.device),
            "data": self._array(raw),
        }
