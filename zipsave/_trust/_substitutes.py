"""What the restricted unpickler reads differently from plain pickle, without trusting more:
weights-only stand-ins for torch's tensor-pickling helpers, and gym-era space state in
gymnasium's spelling."""

from __future__ import annotations

import collections
import io
import warnings
from typing import Any, Callable

__all__ = ["SUBSTITUTED", "legacy_space_state", "substitutes"]

#: Globals the restricted unpickler never imports but answers with its own stand-in: torch's
#: helpers for a tensor pickled by plain pickle (sb3-contrib ARS's ``weights`` in ``data``),
#: which call ``torch.load`` with pickle on. A pickle naming them needs no trust.
SUBSTITUTED = frozenset({
    "torch.storage._load_from_bytes", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
})


def substitutes(error: Callable[[str], Exception]) -> dict[str, Callable[..., Any]]:
    """The stand-ins for :data:`SUBSTITUTED`, raising ``error(message)`` on anything a saved
    tensor never holds."""

    def storage_from_bytes(data: Any) -> Any:
        # torch.storage._load_from_bytes is `torch.load(bytes, weights_only=False)`; the same
        # bytes through torch's weights-only unpickler build the storage and run nothing.
        import torch

        if type(data) is not bytes:
            raise error(f"torch.storage._load_from_bytes takes bytes, got {type(data).__name__}.")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "TypedStorage is deprecated"
                storage = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except Exception as err:  # noqa: BLE001 - any failure of the inner load is this value's
            raise error(
                f"a pickled torch storage does not load with weights_only ({type(err).__name__}: {err})."
            ) from err
        if not isinstance(storage, torch.storage.TypedStorage):
            raise error(f"a pickled torch storage holds a {type(storage).__name__}, not a storage.")
        return storage

    def rebuild_tensor(
        storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False,
        backward_hooks: Any = None, metadata: Any = None,
    ) -> Any:
        import torch
        from torch._utils import _rebuild_tensor_v2

        ints = (offset, *size, *stride) if isinstance(size, tuple) and isinstance(stride, tuple) else (None,)
        if not (
            isinstance(storage, torch.storage.TypedStorage)
            and all(type(v) is int and v >= 0 for v in ints)
            and len(size) == len(stride)
            and type(requires_grad) is bool
            and not backward_hooks and not metadata  # hooks are callables; metadata sets internals
        ):
            raise error("torch._utils._rebuild_tensor_v2 got arguments a saved tensor never has.")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            # set_() checks that offset, size and stride stay inside the storage.
            return _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, collections.OrderedDict())

    def rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any = None) -> Any:
        import torch

        if not isinstance(data, torch.Tensor) or type(requires_grad) is not bool or backward_hooks:
            raise error("torch._utils._rebuild_parameter got arguments a saved parameter never has.")
        return torch.nn.Parameter(data, requires_grad)

    return {
        "torch.storage._load_from_bytes": storage_from_bytes,
        "torch._utils._rebuild_tensor_v2": rebuild_tensor,
        "torch._utils._rebuild_parameter": rebuild_parameter,
    }


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
