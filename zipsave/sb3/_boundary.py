"""The error boundary of SB3's doors under ``install()``: what SB3's own code raises on a file's
values leaves as a zipsave error naming the file, and values SB3 would use unchecked (a
``VecNormalize`` count, a pickled buffer's position and arrays) are checked first."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._archive import binary_file
from .._printable import shown
from .._tensors import NpyHeader
from ..exceptions import ArchiveNotFoundError, DecodeError, ParameterMismatchError, ZipsaveError, as_zipsave_error
from ._her import bookkeeping_problem, her_settings_problem, is_her

__all__ = [
    "check_buffer",
    "check_statistics",
    "check_vec_normalize_settings",
    "door",
    "held_transitions",
    "transitions_mismatch",
]


@contextlib.contextmanager
def door(path: Any, what: str, *, member: str | None = None) -> Iterator[None]:
    """The error boundary of one of SB3's doors under ``install()`` (``Algo.load``,
    ``set_parameters``, ``load_replay_buffer``, ``VecNormalize.load``, ``Policy.load``): SB3's
    own code runs on the file's values inside, so whatever it raises (an ``AssertionError``, a
    torch ``RuntimeError`` for a tensor of another shape, an ``OverflowError``) leaves as a
    :class:`DecodeError` naming the file, with the original as ``__cause__``; a missing file
    stays a ``FileNotFoundError`` (:class:`ArchiveNotFoundError`), as SB3 raises it. A file
    object open in text mode is the caller's ``TypeError``, said before anything is read."""
    if hasattr(path, "read"):
        binary_file(path, "rb")
    try:
        yield
    except ZipsaveError as err:
        as_zipsave_error(err, _name(path), member=member)  # names the file where it was not
        raise
    except FileNotFoundError as err:
        raise ArchiveNotFoundError(f"no such file ({err}).", archive=_name(path), errno=err.errno) from err
    except Exception as err:
        new = as_zipsave_error(err, _name(path), member=member)
        if new is None:  # MemoryError
            raise
        if isinstance(err, (OSError, RecursionError, OverflowError)):
            raise new from err
        raise DecodeError(
            f"{what} failed on this file's values ({type(err).__name__}: {err}).",
            archive=_name(path),
            member=member,
            hint="It was not written for this object by SB3 or zipsave as it is (damaged, another model or "
            "environment, or made to break readers).",
        ) from err


def _name(path: Any) -> Any:
    return path if isinstance(path, (str, os.PathLike)) or hasattr(path, "read") else None


#: VecNormalize's flags, which its ``step`` and ``reset`` test.
_FLAGS = ("training", "norm_obs", "norm_reward")
#: VecNormalize's numbers, with the least each may be: the clips bound ``np.clip`` (``inf``: no
#: clipping), ``gamma`` discounts the return, ``epsilon`` is the floor under ``sqrt(var + epsilon)``.
_NUMBERS = {"clip_obs": 0.0, "clip_reward": 0.0, "gamma": -math.inf, "epsilon": 0.0}


def check_vec_normalize_settings(values: Any, path: Any, *, member: str | None = None) -> None:
    """The settings a ``VecNormalize`` normalizes with (a loaded one's attributes, or a model
    archive's ``vec_normalize/data``) are of the kinds its constructor takes: each flag a bool
    (or 0 or 1), each number a real number, not NaN, at least its least (:data:`_NUMBERS`),
    finite but for the clips. ``clip_obs='10'`` or ``gamma='0.9'`` loaded and the first step
    failed (``TypeError``, numpy's ``UFuncTypeError``); ``gamma=nan`` or ``epsilon=-1`` made
    every observation or reward NaN."""
    for key in _FLAGS:
        value = values.get(key, True)
        if not (isinstance(value, (bool, np.bool_)) or (type(value) is int and value in (0, 1))):
            raise DecodeError(
                f"`{key}` is {shown(value)}, where VecNormalize takes a bool.", archive=path, member=member, key=key
            )
    for key, least in _NUMBERS.items():
        value = values.get(key, least)
        number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
        try:
            fine = number and float(value) >= least and (math.isfinite(float(value)) or key.startswith("clip_"))
        except OverflowError:  # an int past float's range
            fine = False
        if not fine:
            bound = "" if least == -math.inf else f" of at least {least:g}"
            raise DecodeError(
                f"`{key}` is {shown(value)}, where VecNormalize takes a number{bound}"
                f"{' (inf: no clipping)' if key.startswith('clip_') else ', finite'}.",
                archive=path,
                member=member,
                key=key,
            )


def check_statistics(vec_normalize: Any, path: Any) -> None:
    """The running statistics of a loaded ``VecNormalize`` are arrays of floats of the shapes
    its observations (one statistic per ``norm_obs_keys``) and returns have, and a finite count
    (a count of 10**400, an int past float's range, or a mean of another shape than the
    observations, failed at the first step)."""
    import numpy as np

    check_vec_normalize_settings(vars(vec_normalize), path)
    space = getattr(vec_normalize, "observation_space", None)
    for name in ("obs_rms", "ret_rms"):
        rms = getattr(vec_normalize, name, None)
        if isinstance(rms, dict) and set(rms) != set(getattr(vec_normalize, "norm_obs_keys", None) or ()):
            raise DecodeError(
                f"`{name}` keeps statistics of {sorted(map(str, rms))}, not of `norm_obs_keys`.", archive=path
            )
        observed = getattr(space, "spaces", None)
        if isinstance(rms, dict) and not (isinstance(observed, dict) and set(rms) <= set(observed)):
            missing = sorted(map(str, set(rms) - set(observed or ())))
            raise DecodeError(  # the first step normalized `obs[key]` of each: KeyError
                f"`{name}` keeps statistics of {missing}, which its observation space has no key for.",
                archive=path,
                key="norm_obs_keys",
            )
        parts = rms.items() if isinstance(rms, dict) else [(None, rms)]
        for key, part in parts:
            if part is None:
                continue
            sub = getattr(space, "spaces", {}).get(key) if key is not None else space
            want = () if name == "ret_rms" else getattr(sub, "shape", None)
            for stat in ("mean", "var"):
                value: Any = getattr(part, stat, None)
                if want is not None and (np.shape(value) != want or np.asarray(value).dtype.kind not in "fiu"):
                    raise DecodeError(
                        f"`{name}{'' if key is None else '.' + str(key)}.{stat}` is of shape {np.shape(value)}, where "
                        f"the observations and returns it normalizes have shape {want}.",
                        archive=path,
                        key=name,
                    )
            count = getattr(part, "count", None)
            try:
                fine = (
                    not isinstance(count, bool)
                    and isinstance(count, (int, float, np.floating, np.integer))
                    and math.isfinite(float(count))
                    and count >= 0
                )
            except OverflowError:
                fine = False
            if not fine:
                raise DecodeError(f"`{name}.count` is {shown(count)}, not a finite count.", archive=path, key=name)


def check_buffer(buffer: Any, path: Any) -> None:
    """A pickled SB3 buffer (``load_replay_buffer`` of a side file) holds what SB3's own code
    keeps in one: sizes of at least 1, ``0 <= pos < buffer_size`` (``<=`` for a rollout
    buffer, which stops there), a bool ``full``, and arrays of ``(buffer_size, n_envs)`` rows
    (or one item per environment) of the buffer's observation and action shapes. A pickle sets
    the state as it is: ``pos=10**6`` or 5 rows of a 64-row buffer loaded, and the first
    ``sample()`` raised ``IndexError``."""
    import numpy as np

    state = vars(buffer)
    size, n_envs, pos, full = (state.get(k) for k in ("buffer_size", "n_envs", "pos", "full"))
    problem = None  # (the attribute, what it holds and what SB3 keeps)
    for name in ("buffer_size", "n_envs"):
        if problem is None and not (type(state.get(name)) is int and state[name] >= 1):
            problem = (name, f"{shown(state.get(name))}, where SB3 keeps an integer of at least 1")
    if problem is None and not (type(pos) is int and 0 <= pos <= size - ("timeouts" in state)):
        bound = f"< {shown(size)}" if "timeouts" in state else f"<= {shown(size)}"  # a rollout buffer stops there
        problem = ("pos", f"{shown(pos)}, where SB3 keeps 0 <= pos {bound}")
    if problem is None and type(full) is not bool:
        problem = ("full", f"{shown(full)}, where SB3 keeps a bool")
    shapes = {"observations": state.get("obs_shape"), "next_observations": state.get("obs_shape")}
    shapes["actions"] = (state["action_dim"],) if type(state.get("action_dim")) is int else None
    for name, value in state.items():
        for key, array in value.items() if isinstance(value, dict) else [(None, value)]:
            if problem is not None or not isinstance(array, np.ndarray) or array.shape == (n_envs,):
                continue
            rows = (size, n_envs)
            want = shapes.get(name)
            want = want.get(key) if isinstance(want, dict) and key is not None else want
            if array.shape[:2] != rows or (isinstance(want, tuple) and array.shape[2:] != want):
                problem = (
                    f"{name}{'' if key is None else '.' + str(key)}",
                    f"an array of shape {array.shape}, where SB3 keeps (buffer_size, n_envs) = "
                    f"({shown(size)}, {n_envs}) rows" + (f" of {want}" if isinstance(want, tuple) else ""),
                )
    if problem is not None:
        raise DecodeError(
            f"holds a {type(buffer).__name__} whose `{problem[0]}` is {problem[1]}; SB3 writes no such replay buffer.",
            archive=path,
            key=problem[0],
        )
    if is_her(buffer):
        her = her_settings_problem(state) or bookkeeping_problem(size, n_envs, state)
        if her is not None:
            raise DecodeError(
                f"holds a {type(buffer).__name__} whose {her[1]}; SB3 writes no such replay buffer.",
                archive=path,
                key=her[0],
            )


def transitions_mismatch(model: Any, held: tuple[Any, Any], saved: str = "", **where: Any) -> Exception | None:
    """A replay buffer whose transitions have ``held`` shapes (observations, action size) that
    ``model``'s spaces do not make: it was filled on another environment, and training would fail
    at its first add or sample (numpy's broadcast error). ``saved`` names the buffer's spaces
    where they are known. Every buffer door raises this; ``None`` when the transitions fit."""
    from stable_baselines3.common.preprocessing import get_action_dim, get_obs_shape

    wanted = (get_obs_shape(model.observation_space), get_action_dim(model.action_space))
    if held == wanted:
        return None
    return ParameterMismatchError(
        f"holds a replay buffer of transitions with observations of shape {shown(held[0])} and actions of size "
        f"{shown(held[1])}{saved}, but this {type(model).__name__} has observation_space="
        f"{shown(model.observation_space)} and action_space={shown(model.action_space)}, whose transitions have "
        f"{shown(wanted[0])} and {shown(wanted[1])}: training would fail at its first add or sample.",
        hint="Load it into a model of the environment it was collected on; this model keeps its own buffer.",
        **where,
    )


def held_transitions(arrays: dict[str, Any]) -> tuple[Any, int] | None:
    """The shapes (observations, action size) of the saved rows, as SB3's buffers name them."""

    def row(value: Any) -> Any:
        if isinstance(value, dict) and value:
            rows = {key: row(inner) for key, inner in value.items()}
            return None if None in rows.values() else rows
        return tuple(value.shape[2:]) if isinstance(value, (np.ndarray, NpyHeader)) else None

    observations, actions = row(arrays.get("observations")), row(arrays.get("actions"))
    if observations is None or not isinstance(actions, tuple) or len(actions) != 1:
        return None
    return observations, actions[0]
