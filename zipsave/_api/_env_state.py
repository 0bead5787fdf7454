"""``EnvState``: the Python-level state of live environments (a gymnasium ``Env`` and its
wrappers, a ``SyncVectorEnv`` and gymnasium's vector wrappers, an SB3 ``DummyVecEnv`` and
``VecNormalize``) as a stateful object for an app state, stored as tensors and plain values."""

from __future__ import annotations

import collections
import random
from typing import Any

import numpy as np
import torch

from .._core import check_data_key
from ..exceptions import EncodeError, ParameterMismatchError
from ._env_checks import check_env_entry
from ._rng import RNGState

__all__ = ["EnvState"]

_GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)
_TAG = ":type:"  # marks a numpy value or a deque in the stored form; the codec's tag key too
_NO_RNG = {"torch": False, "cuda": False, "numpy": False, "python": False}
_TORCH_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "bool",
    )
)
_OUT_OF_PROCESS = ("AsyncVectorEnv", "SubprocVecEnv")


def _plain(value: Any, depth: int = 0) -> bool:
    """A value made of numbers, strings, arrays and containers of them, and nothing else."""
    if depth > 8:
        return False
    if value is None or isinstance(value, (bool, int, float, str, np.generic, np.ndarray)):
        return not isinstance(value, np.ndarray) or value.dtype != object
    if type(value) in (list, tuple, collections.deque):
        return all(_plain(v, depth + 1) for v in value)
    if type(value) in (dict, collections.OrderedDict):
        return all(isinstance(k, (str, int)) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _copy(value: Any, each: Any = None) -> Any:
    """A deep copy of a plain value, its items passed through ``each`` (``_copy`` itself)."""
    each = each or _copy
    if isinstance(value, np.ndarray):
        return value.copy()
    if type(value) in (list, tuple):
        return type(value)(each(v) for v in value)
    if isinstance(value, collections.deque):
        return collections.deque((each(v) for v in value), maxlen=value.maxlen)
    if isinstance(value, dict):
        return type(value)((k, each(v)) for k, v in value.items())
    return value


def _statistics(value: Any) -> bool:
    """An object that only holds plain values, such as the ``RunningMeanStd`` of gymnasium's
    ``NormalizeObservation`` and ``NormalizeReward`` (``obs_rms``, ``return_rms``)."""
    if isinstance(value, type) or type(value).__module__ == "builtins" or not hasattr(value, "__dict__"):
        return False
    attrs = vars(value)
    return bool(attrs) and all(_plain(v) for v in attrs.values())


def _is_space(value: Any) -> bool:
    return any(c.__name__ == "Space" and c.__module__.startswith("gymnasium.spaces") for c in type(value).__mro__)


def _space_generators(name: str, space: Any, out: dict[str, Any]) -> None:
    """The generators of a space and of its subspaces (``Dict``, ``Tuple``, ``OneOf``), by path."""
    gen = getattr(space, "_np_random", None)
    if isinstance(gen, np.random.Generator):
        out[name] = gen
    subspaces = getattr(space, "spaces", None)
    items = subspaces.items() if isinstance(subspaces, dict) else enumerate(subspaces or ())
    for key, sub in items:
        if _is_space(sub):
            _space_generators(f"{name}.{key}", sub, out)


def _generators(layer: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(layer).items() if isinstance(v, _GENERATORS)}


def _spaces(layer: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in vars(layer).items():
        if _is_space(value):
            _space_generators(key, value, out)
    return out


def _kind(env: Any) -> str:
    return f"{type(env).__module__}.{type(env).__qualname__}"


def _inner_vector(venv: Any) -> Any:
    """The vector env a vector wrapper wraps: SB3's ``venv``, gymnasium 1.x's ``env``."""
    inner = getattr(venv, "venv", None)
    if inner is None and not hasattr(venv, "envs"):
        inner = getattr(venv, "env", None)
    return inner


def _is_vector(env: Any) -> bool:
    try:
        import gymnasium

        if isinstance(env, gymnasium.vector.VectorEnv):  # wrappers too; on 0.29 a subclass of Env
            return True
        if isinstance(env, gymnasium.Env):  # before getattr: a 0.29 wrapper forwards it, warning
            return False
    except ImportError:  # pragma: no cover - gymnasium is a dependency
        pass
    return callable(getattr(env, "step_async", None)) and callable(getattr(env, "step_wait", None))  # SB3


def _out_of_reach(env: Any) -> EncodeError:
    name = type(env).__name__
    return EncodeError(
        f"EnvState cannot capture `{name}`: its environments run in other processes, out of reach "
        "of this one; nothing was captured.",
        hint=(
            "Build the environments with `gymnasium.vector.SyncVectorEnv` (SB3: `DummyVecEnv`) to checkpoint "
            "them, or save what a resume needs as app-state values (e.g. `vars(envs.obs_rms)`) and reset the "
            "environments on resume."
        ),
    )


def _layers(env: Any) -> list[tuple[str, Any]]:
    """Every object that holds environment state, by a stable name: the vector wrappers down to
    the vector env (``vec0``, ``vec1``, ...), then each environment's wrappers down to the
    unwrapped env (``env0.0``, ``env0.1``, ...; a single env: ``env.0``, ``env.1``, ...)."""
    out: list[tuple[str, Any]] = []
    if _is_vector(env):
        depth = 0
        while not hasattr(env, "envs"):
            if type(env).__name__ in _OUT_OF_PROCESS:
                raise _out_of_reach(env)
            inner = _inner_vector(env)
            if inner is None:
                raise _out_of_reach(env)
            out.append((f"vec{depth}", env))
            env, depth = inner, depth + 1
        out.append((f"vec{depth}", env))
        chains = [(f"env{i}", sub) for i, sub in enumerate(env.envs)]
    else:
        chains = [("env", env)]
    for prefix, sub in chains:
        layer = 0
        while True:
            out.append((f"{prefix}.{layer}", sub))
            inner = getattr(sub, "env", None)
            if inner is None or inner is sub:
                break
            sub, layer = inner, layer + 1
    return out


def _parent(layer: Any) -> str | None:
    mro = type(layer).__mro__
    return mro[1].__qualname__ if len(mro) > 2 else None


def _same_kind(entry: dict[str, Any], layer: Any) -> bool:
    """The saved layer and the live one are the same class, or one directly subclasses the
    other: rl_zoo3 replaces gymnasium's ``TimeLimit`` with its ``PatchedTimeLimit`` on import,
    so the same environment has either, depending on what the process imported."""
    saved, live = entry.get("class"), type(layer).__qualname__
    return saved == live or saved == _parent(layer) or (entry.get("parent") is not None and entry["parent"] == live)


def _mismatch(saved: dict[str, Any], found: dict[str, Any]) -> str:
    """What differs between the saved layers and the live ones, in words: the number of
    environments, then the first chain of wrappers that differs (outermost first)."""

    def chains(layers: dict[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, cls in layers.items():
            head = "vector env" if name.startswith("vec") else f"`{name.split('.')[0]}`"
            out.setdefault(head, []).append(str(cls))
        return out

    def count(layers: dict[str, Any]) -> str:
        n = len({name.split(".")[0] for name in layers if name.startswith("env")})
        return "a single environment" if "env.0" in layers else f"{n} environment{'s' * (n != 1)}"

    parts = []
    if count(saved) != count(found):
        parts.append(f"it has {count(saved)}, this one has {count(found)}")
    was, now = chains(saved), chains(found)
    for head in [h for h in was if h in now]:
        if was[head] != now[head]:
            parts.append(f"{head} was {' > '.join(was[head])}, is {' > '.join(now[head])}")
            break
    return "; ".join(parts)


def _stored(value: Any) -> Any:
    """``value`` with numpy arrays and scalars as tagged tensors or lists, and deques as tagged
    lists: what ``torch.load(weights_only=True)`` reads back, without pickled code."""
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        dtype = arr.dtype
        if dtype.kind in "mM":
            arr = arr.view(np.int64)
        native = arr.dtype.newbyteorder("=")
        tag = "numpy.ndarray" if isinstance(value, np.ndarray) else "numpy.generic"
        if native in _TORCH_DTYPES:
            data: Any = torch.from_numpy(np.array(arr, dtype=native, order="C", copy=True))
        else:
            data = arr.tolist()
        return {_TAG: tag, "dtype": dtype.str, "shape": list(arr.shape), "data": data}
    if isinstance(value, collections.deque):
        return {_TAG: "collections.deque", "maxlen": value.maxlen, "items": [_stored(v) for v in value]}
    if type(value) in (list, tuple):
        return type(value)(_stored(v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _stored(v)) for k, v in value.items())
    return value


def _live(value: Any) -> Any:
    """The inverse of :func:`_stored`; numpy values (a state taken by ``VecEnvState``) pass."""
    if isinstance(value, dict) and value.get(_TAG) in ("numpy.ndarray", "numpy.generic"):
        dtype = np.dtype(value["dtype"])
        data = value["data"]
        # An item holds what the stored one held: _stored writes a tensor of the dtype's own
        # size, or a list (texts); '(300,300,300)f8' or '<U99999999' would make each stored
        # item a block of megabytes, '|O' an array of Python objects.
        held = data.element_size() if isinstance(data, torch.Tensor) else max(32, np.asarray(data).dtype.itemsize)
        if dtype.shape or dtype.hasobject or dtype.itemsize > held:
            raise ValueError(f"the stored dtype {dtype.str!r} is not one EnvState writes for these items")
        if isinstance(data, torch.Tensor):
            arr = data.detach().cpu().numpy().copy()
        else:
            arr = np.array(data, dtype=np.int64 if dtype.kind in "mM" else dtype)
        arr = arr.reshape(value["shape"])
        arr = arr.view(dtype) if dtype.kind in "mM" else arr.astype(dtype, copy=False)
        return arr[()] if value[_TAG] == "numpy.generic" else arr
    if isinstance(value, dict) and value.get(_TAG) == "collections.deque":
        return collections.deque((_live(v) for v in value["items"]), maxlen=value["maxlen"])
    return _copy(value, _live)


class EnvState:
    """The state of live environments, as a stateful object for an app state.

    Put it in the dict you save and restore, and a resumed run steps its environments exactly
    as the run that was saved: the same observations, rewards, normalization statistics,
    episode statistics and random draws. It holds no state of its own: :meth:`state_dict`
    reads the environments, :meth:`load_state_dict` writes into them.

    From every layer (vector wrappers, the vector env, each wrapper and unwrapped environment)
    it takes the attributes made only of numbers, strings, numpy arrays and lists, tuples,
    dicts and deques of them; the objects made only of those (the running statistics
    ``obs_rms`` and ``return_rms`` of ``NormalizeObservation`` and ``NormalizeReward``); the
    random generators; and the generators of the spaces the layer holds (for
    ``action_space.sample()``). That is the whole state of environments written in Python
    (classic control, most custom environments); a simulator that keeps its state in native
    memory (MuJoCo, Box2D, Atari) is not captured beyond its Python attributes.

    The state holds tensors and plain values only (numpy values as tagged tensors), so it is
    stored as a ``.pth`` member that loads without pickled code, as :class:`RNGState` is.

    Parameters
    ----------
    env
        A gymnasium ``Env`` with its wrappers, a gymnasium ``SyncVectorEnv`` (with gymnasium
        1.x's vector wrappers around it, or per-environment wrappers inside it), or an SB3
        ``DummyVecEnv`` (with ``VecNormalize`` and other VecEnv wrappers).

    Raises
    ------
    EncodeError
        ``env`` runs its environments in other processes (``AsyncVectorEnv``,
        ``SubprocVecEnv``), where their state cannot be read.

    Examples
    --------
    >>> app_state = {"agent": agent, "envs": zipsave.EnvState(envs), "rng": zipsave.RNGState()}  # doctest: +SKIP
    >>> zipsave.save(app_state, "ckpt.zip")  # doctest: +SKIP
    >>> zipsave.restore(app_state, "ckpt.zip", strict=True)  # doctest: +SKIP
    """

    def __init__(self, env: Any) -> None:
        _layers(env)  # an environment out of reach fails here, not at the first save
        self.env = env

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.env).__name__})"

    def _capture(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for name, layer in _layers(self.env):
            attrs = {k: _copy(v) for k, v in vars(layer).items() if _plain(v)}
            rng = RNGState(**_NO_RNG, generators=_generators(layer))
            entry = {
                "class": type(layer).__qualname__,
                "parent": _parent(layer),
                "attrs": attrs,
                "generators": rng.state_dict(),
            }
            objects = {k: _copy(vars(v)) for k, v in vars(layer).items() if _statistics(v)}
            if objects:
                entry["objects"] = objects
            spaces = _spaces(layer)
            if spaces:
                entry["spaces"] = RNGState(**_NO_RNG, generators=spaces).state_dict()["generators"]
            state[name] = entry
        return state

    def state_dict(self) -> dict[str, Any]:
        """The environments' current state: one entry per layer, tensors and plain values only."""
        return _stored(self._capture())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Set the environments to ``state`` (from :meth:`state_dict`, or from
        ``zipsave.sb3.VecEnvState``).

        Raises
        ------
        ParameterMismatchError
            The environments are built differently from the saved ones (another number of
            environments, another wrapper or environment class); nothing is changed then. A
            class that directly subclasses the saved one, or the reverse, counts as the same
            (rl_zoo3 replaces gymnasium's ``TimeLimit`` by its ``PatchedTimeLimit``).
        """
        layers = _layers(self.env)
        found = {name: type(layer).__qualname__ for name, layer in layers}
        saved = {name: entry.get("class") for name, entry in state.items()}
        if found.keys() != saved.keys() or not all(_same_kind(state[n], layer) for n, layer in layers):
            raise ParameterMismatchError(
                f"the saved environment state does not fit these environments: {_mismatch(saved, found)}.",
                hint="Build the environments as the saved run did (same number, same wrappers, same classes).",
            )
        for name, layer in layers:
            for key in state[name].get("objects", {}):
                live = vars(layer).get(key)
                if not _statistics(live):
                    raise ParameterMismatchError(
                        f"the saved environment state has the statistics `{name}.{key}`, but this environment's "
                        f"{type(layer).__qualname__} holds {type(live).__name__} there.",
                        key=key,
                        hint="Build the environments as the saved run did (same wrappers, same arguments).",
                    )
        for name, layer in layers:
            check_env_entry(layer, state[name], name, _live)
        for name, layer in layers:
            _apply(layer, state[name])


def _apply(layer: Any, entry: dict[str, Any]) -> None:
    # The names come from the archive: each is a plain attribute of the layer (no dunder, no
    # method), checked before the first is set.
    for key in (*entry["attrs"], *entry.get("spaces", {}), *(entry["generators"].get("generators") or {})):
        check_data_key(layer, str(key).split(".")[0], key=str(key))
    for key, value in entry["attrs"].items():
        setattr(layer, key, _live(value))
    for key, saved_attrs in entry.get("objects", {}).items():
        vars(getattr(layer, key)).update(_live(saved_attrs))
    generators = _generators(layer)
    saved_generators = entry["generators"].get("generators") or {}
    for key in set(saved_generators) - set(generators):
        if saved_generators[key].get("kind") == "numpy":  # e.g. an env never reset before
            generators[key] = np.random.default_rng()
            setattr(layer, key, generators[key])
    generators = {k: v for k, v in generators.items() if k in saved_generators}
    RNGState(**_NO_RNG, generators=generators).load_state_dict({"generators": saved_generators})
    saved_spaces = entry.get("spaces") or {}
    if saved_spaces:
        live = _spaces(layer)
        for path in set(saved_spaces) - set(live):  # a space never sampled before
            attr, *subpath = path.split(".")
            space = vars(layer).get(attr)
            if not _is_space(space):
                raise ParameterMismatchError(
                    f"the saved state has the space `{path}`, which this environment lacks.", key=path
                )
            for part in subpath:
                space = space.spaces[part] if isinstance(space.spaces, dict) else space.spaces[int(part)]
            space._np_random = live[path] = np.random.default_rng()
        RNGState(**_NO_RNG, generators={k: live[k] for k in saved_spaces}).load_state_dict({"generators": saved_spaces})
