"""What the restricted unpickler reads differently from plain pickle, without trusting more:
weights-only stand-ins for torch's tensor-pickling helpers, and gym-era space state in
gymnasium's spelling."""

from __future__ import annotations

import collections
import dataclasses
import io
from typing import Any, Callable

from .._bounds import alloc_budget
from .._invariants import check_tensor, view_fits
from ..exceptions import UnsafeGlobalError
from ._allowlist import default_allowlist, value_checks
from ._names import CODE_HINT
from ._prescan import check_legacy_torch, check_torch_zip

__all__ = [
    "SUBSTITUTED",
    "Owner",
    "Owners",
    "StorageType",
    "attribute_getter",
    "legacy_space_state",
    "owns_trusted",
    "substitutes",
]

#: Globals the restricted unpickler never imports but answers with its own stand-in: torch's
#: helpers for a tensor pickled by plain pickle (sb3-contrib ARS's ``weights`` in ``data``),
#: which call ``torch.load`` with pickle on, and torch's legacy storage classes, which name a
#: dtype in a ``torch.save`` file's storage references. A pickle naming them needs no trust.
_LEGACY_STORAGES = {
    "Double": "float64",
    "Float": "float32",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
}
SUBSTITUTED = frozenset(
    {
        "torch.storage._load_from_bytes",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter",
        *(f"torch.{name}Storage" for name in _LEGACY_STORAGES),
    }
)


# The two stand-ins below are handed to a pickle, so nothing of theirs may change once made:
# each has `__slots__` (no `__dict__` that a BUILD, or pickle's own state-setting, could fill),
# refuses every attribute write and delete as a frozen dataclass does (they were frozen
# dataclasses; the decorator compiled their methods at import, about 0.5 ms of a first inspect
# or load), and has no `__setstate__`. The restricted unpickler refuses every in-place change
# of an object `find_class` returned anyway (`_check_target`); this is the second lock.
def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


class StorageType:
    """What a legacy storage class (``torch.FloatStorage``) stands for in a storage reference."""

    __slots__ = ("dtype",)
    dtype: Any

    def __init__(self, dtype: Any) -> None:
        object.__setattr__(self, "dtype", dtype)

    __setattr__, __delattr__ = _frozen_setattr, _frozen_delattr

    def __reduce__(self) -> tuple[Any, ...]:  # copied and pickled by its constructor (no state to set)
        return type(self), (self.dtype,)

    def __repr__(self) -> str:
        return f"{self.__class__.__qualname__}(dtype={self.dtype!r})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return (self.dtype,) == (other.dtype,)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.dtype,))


class Owner:
    """What an untrusted global stands for when a trusted name lies below it: protocols < 4
    pickle ``BasePolicy._dummy_schedule`` as ``getattr(BasePolicy, "_dummy_schedule")``. The
    class itself is never imported nor handed to the pickle; only ``getattr`` takes an
    ``Owner``, and resolves the full name under the trust policy."""

    __slots__ = ("module", "qualname")
    module: str
    qualname: str

    def __init__(self, module: str, qualname: str) -> None:
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "qualname", qualname)

    __setattr__, __delattr__ = _frozen_setattr, _frozen_delattr

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.module, self.qualname)

    def __repr__(self) -> str:
        return f"{self.__class__.__qualname__}(module={self.module!r}, qualname={self.qualname!r})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return (self.module, self.qualname) == (other.module, other.qualname)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.module, self.qualname))


class Owners:
    """The :class:`Owner` stand-ins one load made; each must be used by ``getattr``. One left
    over means the pickle used an untrusted global otherwise (kept it as a value): refused.
    Also the objects it created of a class a handler checks (:func:`value_checks`), each checked
    by :meth:`valid` once the whole pickle is read: a list a BUILD handed one may be filled later."""

    def __init__(self) -> None:
        self.pending: dict[int, Owner] = {}
        # id -> object and id -> dotted name of every global the pickle imported by name
        self.imported: dict[int, Any] = {}
        self.names: dict[int, str] = {}
        self.checks, self.made_objects = value_checks(), list[tuple[str, Any]]()

    def made(self, obj: Any) -> Any:
        name = f"{type(obj).__module__}.{type(obj).__qualname__}"
        if name in self.checks:
            self.made_objects.append((name, obj))
        return obj

    def valid(self, value: Any, error: Callable[[str], Exception]) -> Any:
        for name, obj in self.made_objects:
            problem = self.checks[name](obj)
            if problem:
                raise error(f"the pickled `{name}` is refused: {problem}.")
        return value

    def make(self, module: str, qualname: str) -> Owner:
        owner = Owner(module, qualname)
        self.pending[id(owner)] = owner
        return owner

    def checked(self, value: Any) -> Any:
        for owner in self.pending.values():
            raise UnsafeGlobalError(f"{owner.module}.{owner.qualname}")
        return value


def owns_trusted(policy: Any, full: str) -> bool:
    """Whether a name the policy trusts lies below ``full``."""
    prefix = full + "."
    return any(name.startswith(prefix) for name in (*default_allowlist(), *policy.trusted))


def attribute_getter(
    name_of: Callable[[Any], str | None], policy: Any, where: dict[str, Any], owners: Owners
) -> Callable[[Any, Any], Any]:
    """``getattr`` as pickle protocols < 4 use it for a nested name (``getattr(BasePolicy,
    "_dummy_schedule")``): only on a global the pickle named (imported, or an :class:`Owner`),
    and only where the dotted name it makes is trusted itself, so it reaches nothing a
    protocol-4 pickle naming the same global could not. ``name_of(obj)`` is the dotted name
    the pickle imported ``obj`` by, else ``None``."""

    def getattr_(obj: Any, attribute: Any) -> Any:
        if isinstance(obj, Owner):
            module, qualname = obj.module, f"{obj.qualname}.{attribute}"
        else:
            owner = name_of(obj)
            module, _, qualname = (owner or "").rpartition(".")
            qualname = f"{qualname}.{attribute}"
        dunder = not isinstance(attribute, str) or attribute.startswith("__")
        if not module or dunder or not policy.is_trusted(module, qualname):
            raise UnsafeGlobalError(
                "builtins.getattr",
                hint=f"It is allowed only to reach a trusted name below a global the pickle names, not "
                f"`{module}.{qualname}`. " + CODE_HINT,
            )
        if isinstance(obj, Owner):
            owners.pending.pop(id(obj), None)
            return policy.resolve(module, qualname, **where)
        return getattr(obj, attribute)

    return getattr_


def substitutes(
    error: Callable[[str], Exception],
    imported_name: Callable[[Any], str | None],
    policy: Any,
    where: dict[str, Any],
    owners: Owners,
) -> dict[str, Any]:
    """The stand-ins for :data:`SUBSTITUTED` and ``builtins.getattr``, raising
    ``error(message)`` on anything a saved tensor never holds. ``imported_name(obj)`` is the
    dotted name the pickle imported ``obj`` by, else ``None``; ``policy`` the trust policy."""

    def storage_from_bytes(data: Any) -> Any:
        # torch.storage._load_from_bytes is `torch.load(bytes, weights_only=False)`; the same
        # bytes through torch's weights-only unpickler build the storage and run nothing.
        import torch

        if type(data) is not bytes:
            raise error(f"torch.storage._load_from_bytes takes bytes, got {type(data).__name__}.")
        # torch.load trusts the zip's sizes and builds the pickle's dicts unchecked.
        if data[:2] == b"PK":
            check_torch_zip(
                io.BytesIO(data), size=len(data), max_bytes=alloc_budget(len(data)), max_ratio=200.0, **where
            )
        else:  # torch pickles a storage in its legacy format
            check_legacy_torch(data, **where)
        try:
            # torch >= 2.13 reads a pickled storage without its "TypedStorage is deprecated" warning
            storage = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except Exception as err:  # noqa: BLE001 - any failure of the inner load is this value's
            raise error(
                f"a pickled torch storage does not load with weights_only ({type(err).__name__}: {err})."
            ) from err
        if not isinstance(storage, torch.storage.TypedStorage):
            raise error(f"a pickled torch storage holds a {type(storage).__name__}, not a storage.")
        return storage

    def rebuild_tensor(
        storage: Any,
        offset: Any,
        size: Any,
        stride: Any,
        requires_grad: Any = False,
        backward_hooks: Any = None,
        metadata: Any = None,
    ) -> Any:
        import torch
        from torch._utils import _rebuild_tensor_v2

        ints = (offset, *size, *stride) if isinstance(size, tuple) and isinstance(stride, tuple) else (None,)
        if not (
            isinstance(storage, torch.storage.TypedStorage)
            and all(type(v) is int and 0 <= v < 1 << 63 for v in ints)
            and len(size) == len(stride)
            and type(requires_grad) is bool
            and not backward_hooks
            and not metadata  # hooks are callables; metadata sets internals
        ):
            raise error("torch._utils._rebuild_tensor_v2 got arguments a saved tensor never has.")
        # set_() would grow a storage too small for the view with memory it never fills (an 8 GiB
        # tensor over a 64-byte record); a saved tensor lies inside its storage.
        nbytes = storage._untyped_storage.nbytes()
        if not view_fits(offset, size, stride, storage.dtype.itemsize, nbytes):
            raise error(
                f"a pickled tensor (size {tuple(size)[:8]}, stride {tuple(stride)[:8]}, offset {offset}) "
                f"reaches past its {nbytes}-byte storage; a saved tensor lies inside its storage."
            )
        tensor = _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, collections.OrderedDict())
        check_tensor(tensor)
        return tensor

    def rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any = None) -> Any:
        import torch

        if not isinstance(data, torch.Tensor) or type(requires_grad) is not bool or backward_hooks:
            raise error("torch._utils._rebuild_parameter got arguments a saved parameter never has.")
        return torch.nn.Parameter(data, requires_grad)

    def builtin_type(name: Any) -> Any:
        # cloudpickle's `_builtin_type(name)` is `getattr(types, name)`, how it writes a class of
        # `types` that pickle cannot name (SB3 saves a `SimpleNamespace` so, and zipsave did
        # before 0.2): answered with the class where `types.<name>` is trusted itself.
        shown = f"types.{name}" if type(name) is str else f"cloudpickle's _builtin_type({type(name).__name__})"
        if type(name) is not str or not name.isidentifier() or not policy.is_trusted("types", name):
            raise UnsafeGlobalError(shown, **where)
        found = policy.resolve("types", name, **where)
        owners.imported[id(found)], owners.names[id(found)] = found, shown  # as if the pickle named it
        return found

    out: dict[str, Any] = {
        "builtins.getattr": attribute_getter(imported_name, policy, where, owners),
        "cloudpickle.cloudpickle._builtin_type": builtin_type,
        "torch.storage._load_from_bytes": storage_from_bytes,
        "torch._utils._rebuild_tensor_v2": rebuild_tensor,
        "torch._utils._rebuild_parameter": rebuild_parameter,
    }
    import torch

    for name, dtype in _LEGACY_STORAGES.items():
        out[f"torch.{name}Storage"] = StorageType(getattr(torch, dtype))
    return out


def legacy_space_state(state: dict) -> dict:
    """A space's pickled state in gymnasium's spelling. gym <= 0.21 (SB3 < 2.0) pickled
    ``shape`` and ``np_random``; gymnasium's ``Space.__setstate__`` renames them, but some
    subclasses (``MultiDiscrete``) read ``_shape`` before it does."""
    renamed = {"shape": "_shape", "np_random": "_np_random"}
    if not any(old in state and new not in state for old, new in renamed.items()):
        return state
    out = dict(state)
    for old, new in renamed.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    return out
