"""``RNGState``: an opt-in, savable capture of the global random number generators (torch
CPU and CUDA, numpy, Python's ``random``) and of any generators you name, so a resumed run
draws the same numbers as the run that was saved."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .._trust import bit_generator_state_problem, torch_generator_state_problem
from ..exceptions import DecodeError

__all__ = ["RNGState"]


class RNGState:
    """The state of the random number generators, as a stateful object for an app-state dict.

    It holds no state of its own: :meth:`state_dict` reads the generators' current states,
    :meth:`load_state_dict` sets them. Put one in the dict you save and restore, and a
    resumed run is bit-identical to one that never stopped.

    Parameters
    ----------
    torch
        Capture torch's global CPU generator.
    cuda
        Capture every CUDA device's generator (when CUDA is available).
    numpy
        Capture numpy's global (legacy ``np.random``) generator.
    python
        Capture Python's global ``random`` generator.
    generators
        More generators to capture by name: ``torch.Generator``, ``np.random.Generator``,
        ``np.random.RandomState`` or ``random.Random`` (e.g. an environment's
        ``np_random``). They are restored in place.

    Examples
    --------
    >>> app_state = {"model": model, "optim": optim, "rng": zipsave.RNGState()}  # doctest: +SKIP
    >>> zipsave.save(app_state, "ckpt.zip")  # doctest: +SKIP
    >>> zipsave.restore(app_state, "ckpt.zip", strict=True)  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        torch: bool = True,
        cuda: bool = True,
        numpy: bool = True,
        python: bool = True,
        generators: Mapping[str, Any] | None = None,
    ) -> None:
        self.torch = torch
        self.cuda = cuda
        self.numpy = numpy
        self.python = python
        self.generators = dict(generators or {})
        for name, gen in self.generators.items():
            if not isinstance(gen, (_torch.Generator, np.random.Generator, np.random.RandomState, random.Random)):
                raise TypeError(
                    f"generator `{name}` is a {type(gen).__name__}; expected torch.Generator, "
                    "np.random.Generator, np.random.RandomState or random.Random."
                )

    def __repr__(self) -> str:
        parts = [k for k in ("torch", "cuda", "numpy", "python") if getattr(self, k)]
        parts += sorted(self.generators)
        return f"RNGState({', '.join(parts)})"

    def state_dict(self) -> dict[str, Any]:
        """The current states: tensors and plain values only, so they load without pickle."""
        state: dict[str, Any] = {}
        if self.torch:
            state["torch"] = _torch.get_rng_state()
        if self.cuda and _torch.cuda.is_available():
            state["cuda"] = list(_torch.cuda.get_rng_state_all())
        if self.numpy:
            state["numpy"] = _legacy_state(np.random.get_state(legacy=True))  # type: ignore[arg-type]
        if self.python:
            state["python"] = _python_state(random.getstate())
        if self.generators:
            state["generators"] = {name: _generator_state(gen) for name, gen in self.generators.items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Set the generators to ``state``. Parts this object does not capture, or that were
        not saved (CUDA saved on a CPU machine), are left alone. Every state is checked before
        any generator is set: numpy and torch keep the position in their buffers that a
        state names, and read there at the next draw."""
        settings: list[tuple[Any, Any]] = []  # (setter, its checked argument), applied together
        if self.torch and "torch" in state:
            settings.append((_torch.set_rng_state, _checked_torch(state["torch"], "torch")))
        if self.cuda and state.get("cuda") and _torch.cuda.is_available():
            saved = list(state["cuda"])
            for index in range(min(len(saved), _torch.cuda.device_count())):
                tensor = _byte_tensor(saved[index])
                settings.append((lambda t, i=index: _torch.cuda.set_rng_state(t, i), tensor))
        if self.numpy and "numpy" in state:
            settings.append((np.random.set_state, _legacy_tuple(state["numpy"], "numpy")))
        if self.python and "python" in state:
            settings.append((random.setstate, _python_tuple(state["python"])))
        saved_generators = state.get("generators") or {}
        missing = sorted(set(self.generators) - set(saved_generators))
        if missing:
            raise KeyError(f"the saved RNG state has no generators {missing}; it has {sorted(saved_generators)}.")
        for name, gen in self.generators.items():
            settings.append(_generator_setting(gen, saved_generators[name], f"generators.{name}"))
        for setter, value in settings:
            setter(value)


#: What an out-of-range generator state is, and what to do.
_HINT = "numpy and torch never write such a state; the archive was damaged or made to break readers."

_torch = torch  # the constructor's keyword `torch` shadows the module inside it


def _byte_tensor(value: Any) -> torch.Tensor:
    return torch.as_tensor(value).detach().to("cpu", torch.uint8).contiguous()


def _legacy_state(state: tuple) -> dict[str, Any]:
    name, key, pos, has_gauss, cached = state
    return {
        "bit_generator": str(name),
        "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def _checked_torch(value: Any, key: str) -> torch.Tensor:
    """A torch generator's saved state as the byte tensor ``set_state`` takes, checked."""
    tensor = _byte_tensor(value)
    problem = torch_generator_state_problem(tensor.numpy().tobytes())
    if problem is not None:
        raise DecodeError(f"`{key}` holds {problem}.", hint=_HINT)
    return tensor


def _legacy_tuple(state: Mapping[str, Any], key: str) -> tuple:
    """numpy's legacy state (``RandomState.set_state``'s tuple), its position checked: numpy
    stores it unchecked, and the next draw reads the key word there."""
    key_words = np.asarray(torch.as_tensor(state["key"]).cpu().numpy(), dtype=np.uint32)
    name, pos = state["bit_generator"], int(state["pos"])
    problem = bit_generator_state_problem({"bit_generator": name, "state": {"pos": pos}})
    if problem is not None:
        raise DecodeError(f"`{key}` holds a state whose {problem}.", hint=_HINT)
    return (name, key_words, pos, int(state["has_gauss"]), float(state["cached_gaussian"]))


def _python_state(state: tuple) -> dict[str, Any]:
    version, internal, gauss_next = state
    return {"version": int(version), "state": torch.tensor(internal, dtype=torch.int64), "gauss_next": gauss_next}


def _python_tuple(state: Mapping[str, Any]) -> tuple:
    internal = tuple(int(x) for x in torch.as_tensor(state["state"]).tolist())
    return (int(state["version"]), internal, state["gauss_next"])


def _plain(value: Any) -> Any:
    """numpy bit-generator states hold arrays (MT19937's key); keep them as lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _unplain(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"array", "dtype"}:
            return np.asarray(value["array"], dtype=np.dtype(value["dtype"]))
        return {k: _unplain(v) for k, v in value.items()}
    return value


def _generator_state(gen: Any) -> Any:
    if isinstance(gen, torch.Generator):
        return {"kind": "torch", "state": gen.get_state()}
    if isinstance(gen, np.random.Generator):
        return {"kind": "numpy", "state": _plain(gen.bit_generator.state)}
    if isinstance(gen, np.random.RandomState):
        return {"kind": "numpy_legacy", "state": _legacy_state(gen.get_state(legacy=True))}  # type: ignore[arg-type]
    return {"kind": "python", "state": _python_state(gen.getstate())}


def _generator_setting(gen: Any, saved: Mapping[str, Any], key: str) -> tuple[Any, Any]:
    """``(setter, checked state)`` that set ``gen`` to ``saved``."""
    kind = saved.get("kind")
    expected = _generator_state(gen)["kind"]
    if kind != expected:
        raise TypeError(f"saved a {kind} generator state, but the generator is a {type(gen).__name__}.")
    if isinstance(gen, torch.Generator):
        if gen.device.type != "cpu":
            return gen.set_state, _byte_tensor(saved["state"])
        return gen.set_state, _checked_torch(saved["state"], f"{key}.state")
    if isinstance(gen, np.random.Generator):
        value = _unplain(saved["state"])
        problem = bit_generator_state_problem(value)
        if problem is not None:
            raise DecodeError(f"`{key}.state` holds a state whose {problem}.", hint=_HINT)
        return lambda v: setattr(gen.bit_generator, "state", v), value
    if isinstance(gen, np.random.RandomState):
        return gen.set_state, _legacy_tuple(saved["state"], f"{key}.state")
    return gen.setstate, _python_tuple(saved["state"])
