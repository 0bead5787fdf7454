"""SB3's action noises as a pickle builds them: what each must hold for its first call to work
(the unpickler asks :func:`noise_problem` of every one it creates, once the pickle is read),
and what one must draw to fit the model's actions (:func:`check_noise`, where a model is built).

A pickle sets a noise's state as it is: a sigma of another shape than the mean, a negative or
NaN sigma, an ``n_envs`` its list of noises disagrees with, or a mean that is a list loaded,
and the first ``learn`` step (SB3 adds the noise to every action) raised numpy's errors."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from .._printable import shown
from ..exceptions import DecodeError
from ._same import global_name

__all__ = ["NOISE_CHECKS", "check_noise", "fit_noise", "noise_problem"]

_NOISE = "stable_baselines3.common.noise."
_NORMAL, _OU, _VECTORIZED = (
    f"{_NOISE}NormalActionNoise",
    f"{_NOISE}OrnsteinUhlenbeckActionNoise",
    f"{_NOISE}VectorizedActionNoise",
)
#: What each kind keeps (SB3 1.0 to 2.9; ``_dtype`` came with 2.0, see :func:`fit_noise`): the
#: attributes every call reads, then those that broadcast into the shape the noise draws.
_PARTS = {
    _NORMAL: (("_mu", "_sigma"), ()),
    _OU: (("_mu", "_sigma", "_theta", "_dt", "noise_prev", "initial_noise"), ("_theta", "_dt", "noise_prev")),
}


def _shape(value: Any) -> tuple[int, ...] | str:
    """The shape of a finite real number or array of them, else what it is instead."""
    if type(value) is np.ndarray and value.dtype.kind in "biuf":
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return "an array holding NaN or infinity"
        return value.shape
    if isinstance(value, (bool, np.bool_, np.integer)) or (type(value) is int and value.bit_length() <= 64):
        return ()
    if isinstance(value, (float, np.floating)):
        return () if math.isfinite(value) else f"{shown(value)}"
    return shown(value) if isinstance(value, int) else f"a {type(value).__name__}"


def noise_shape(noise: Any) -> tuple[int, ...] | str:
    """The shape one call of a Normal or Ornstein-Uhlenbeck noise returns, or what is wrong."""
    state, kind = vars(noise), global_name(type(noise))
    required, inside = _PARTS[kind]
    missing = sorted(set(required) - set(state))
    if missing:
        return f"it lacks {missing}, which its every call reads"
    shapes = {}
    for part in required:
        if part == "initial_noise" and state[part] is None:
            continue
        shape = _shape(state[part])
        if isinstance(shape, str):
            return f"`{part}` is {shape}, where SB3 keeps a finite number or array of numbers"
        shapes[part] = shape
    try:
        drawn = np.broadcast_shapes(shapes["_mu"], shapes["_sigma"])
        if drawn not in (shapes["_mu"], shapes["_sigma"]) or any(
            np.broadcast_shapes(drawn, shapes[part]) != drawn for part in inside + ("initial_noise",) if part in shapes
        ):
            raise ValueError
    except ValueError:
        return f"its parts have the shapes {shapes}, which do not broadcast to the shape of its mean or sigma"
    if kind == _NORMAL and drawn == ():  # SB3 >= 2.0 casts each draw (SB3 1.x did not)
        return "its mean and sigma are scalars, of which numpy draws a Python float, which SB3 cannot cast"
    if kind == _OU and not isinstance(state["_mu"], (np.ndarray, np.generic)):
        return f"`_mu` is a {type(state['_mu']).__name__}, where SB3 reads the shape of a numpy array"
    sigma = np.asarray(state["_sigma"])
    if kind == _NORMAL and (sigma < 0).any():
        return "`_sigma` holds a negative number, where a normal distribution takes a scale of at least 0"
    if kind == _OU and np.asarray(state["_dt"] < 0).any():
        return "`_dt` holds a negative number, whose square root SB3 takes"
    dtype = state.get("_dtype", np.float64)
    try:
        ok = isinstance(dtype, (np.dtype, str)) or dtype in (float, int) or issubclass(dtype, np.generic)
        ok = ok and len(str(dtype)) <= 40 and np.dtype(dtype).kind in "biuf" and np.dtype(dtype).shape == ()
    except Exception:  # noqa: BLE001 - not a dtype at all
        ok = False
    return drawn if ok else f"`_dtype` is {shown(dtype)}, where SB3 keeps a numeric numpy dtype"


def noise_problem(noise: Any) -> str | None:
    """What is wrong with an SB3 action noise a pickle built, or ``None``: its parts are finite
    numbers or arrays whose shapes broadcast to that of its mean or sigma (so a call draws no
    more than the noise holds), a normal noise's sigma is at least 0, and a vectorized noise
    holds ``n_envs`` noises of its base noise's kind, each drawing the same shape."""
    if global_name(type(noise)) != _VECTORIZED:
        drawn = noise_shape(noise)
        return drawn if isinstance(drawn, str) else None
    state = vars(noise)
    n_envs, base, noises = (state.get(k) for k in ("n_envs", "_base_noise", "_noises"))
    if type(n_envs) is not int or n_envs < 1:
        return f"`n_envs` is {shown(n_envs)}, where SB3 keeps an integer of at least 1"
    if global_name(type(base)) not in _PARTS:
        return f"`_base_noise` is a {type(base).__name__}, where SB3 keeps a normal or Ornstein-Uhlenbeck noise"
    if type(noises) is not list or len(noises) != n_envs or any(type(n) is not type(base) for n in noises):
        return f"`_noises` is not a list of {n_envs} noises of its base noise's kind (`n_envs` = {n_envs})"
    shapes = set()
    for inner in {id(n): n for n in (base, *noises)}.values():  # one noise listed n times is checked once
        drawn = noise_shape(inner)
        if isinstance(drawn, str):
            return f"one of its noises is refused: {drawn}"
        shapes.add(drawn)
    return "its noises draw different shapes, which SB3 cannot stack" if len(shapes) > 1 else None


def check_noise(noise: Any, action_space: Any, n_envs: Any, where: dict[str, Any]) -> None:
    """A noise of SB3's kinds draws what fits the model's ``Box`` actions: SB3 adds it to a batch
    of ``n_envs`` actions (a vectorized noise's own ``n_envs``), which must keep its shape."""
    import gymnasium as gym

    name = global_name(type(noise))
    if name not in (*_PARTS, _VECTORIZED) or not isinstance(action_space, gym.spaces.Box):
        return  # a noise of the caller's own kind (trusted), or one SB3 never adds (discrete actions)
    problem = noise_problem(noise)
    drawn = noise_shape(noise._base_noise if name == _VECTORIZED else noise) if problem is None else problem
    if isinstance(drawn, tuple):
        rows = noise.n_envs if name == _VECTORIZED else n_envs if type(n_envs) is int and 1 <= n_envs < 2**31 else 1
        stacked = (rows, *drawn) if name == _VECTORIZED or rows > 1 else drawn
        batch = (rows, *action_space.shape)
        try:
            fits = np.broadcast_shapes(stacked, batch) == batch
        except ValueError:
            fits = False
        if not fits:
            problem = (
                f"it draws noise of shape {stacked}, which does not fit {rows} action(s) of shape {action_space.shape}"
            )
    if problem:
        raise DecodeError(
            f"is an action noise SB3 cannot use: {problem}.",
            hint="Pass `custom_objects={'action_noise': ...}` with a noise for this model (or None).",
            **where,
        )


NOISE_CHECKS = {_NORMAL: noise_problem, _OU: noise_problem, _VECTORIZED: noise_problem}


def fit_noise(data: dict[str, Any], notes: list[str], *, n_envs: int | None) -> None:
    """Make ``data``'s checked action noise one SB3 >= 2.0 can call for the model: a noise SB3
    1.x pickled has no ``_dtype`` (2.0's every call casts to it: ``AttributeError`` at the first
    ``learn`` step), so it gets ``numpy.float64``, what 1.x drew; and a ``VectorizedActionNoise``
    for another number of envs than the env the caller passed (``n_envs``; SB3 stacked 2 noises
    onto 1 action and failed at the first step, or at the first episode end) is made again from
    its base noise for the env's number, as SB3 makes one for a new model. Each is noted."""
    noise: Any = data.get("action_noise")
    name = global_name(type(noise))
    if name not in (*_PARTS, _VECTORIZED):
        return
    inner = [noise] if name != _VECTORIZED else [noise._base_noise, *noise._noises]
    old = {id(n): n for n in inner if "_dtype" not in vars(n)}
    for each in old.values():
        each._dtype = np.float64
    if old:
        notes.append(
            "`action_noise` was pickled by SB3 1.x, without the `_dtype` SB3 2.x casts each draw to; it was given "
            "numpy.float64, what SB3 1.x drew."
        )
    if name == _VECTORIZED and n_envs is not None and noise.n_envs != n_envs:
        from stable_baselines3.common.noise import VectorizedActionNoise

        base = noise._base_noise
        data["action_noise"] = VectorizedActionNoise(base, n_envs) if n_envs > 1 else copy.deepcopy(base)
        notes.append(
            f"`action_noise` was a VectorizedActionNoise for {noise.n_envs} envs, and the env passed has {n_envs}: "
            f"it was made again from its base noise for {n_envs}, as SB3 makes one for a new model (each env's "
            "noise starts afresh)."
        )
