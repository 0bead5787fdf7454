"""What SB3 keeps in separate pickles (the replay buffer, ``VecNormalize`` statistics), kept in
component folders of the same archive as arrays, and SB3's stand-in for arrays moved out of ``data``."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .. import _format
from .._core import LoadSession, Parts, check_data_key, matches
from .._printable import shown
from .._tensors import NpyHeader
from ..exceptions import DecodeError, EncodeError, IntegrityError, ZipsaveError, ZipsaveWarning, caller_stacklevel
from ._boundary import check_vec_normalize_settings, held_transitions, transitions_mismatch
from ._buffer_fill import fill_buffer
from ._estimate import archive_size
from ._her import HER_ARRAYS, bookkeeping_problem, check_her, end_unfinished_episodes, her_state, is_her, settings_note
from ._same import same
from ._snapshot import replay_snapshot

__all__ = [
    "EXTRAS",
    "apply_vec_normalize",
    "build_vec_normalize",
    "collect_extras",
    "has_extra",
    "matches_any",
    "restore_extra",
    "sb3_stand_in",
    "warn_unused_vec_normalize",
]

#: Component folders zipsave adds to an SB3 archive on request (``include=[...]``).
EXTRAS = ("replay_buffer", "vec_normalize")

#: ``data`` keys without which no SB3 model can be built.

#: arrays live in ``.npy`` members, SB3 is shown ``None`` instead of a pickled copy.
_OBSERVATION_CACHES = frozenset({"_last_obs", "_last_original_obs"})

# Every array goes to a .npy member: the extras then hold no pickle at all.
_ALL_ARRAYS_EXTERNAL = {"array_bytes": -1}

_REPLAY_SCALARS = ("buffer_size", "n_envs", "pos", "full", "optimize_memory_usage", "handle_timeout_termination")
_VEC_NORMALIZE_SCALARS = ("training", "norm_obs", "norm_reward", "clip_obs", "clip_reward", "gamma", "epsilon")
_LAST_STEP = ("old_obs", "old_reward")


# -- saving --------------------------------------------------------------------------------
def sb3_stand_in(key: str, value: Any) -> Any:
    """What SB3 unpickles for a top-level entry whose arrays moved to ``.npy`` members.

    SB3 reads only ``":serialized:"``. Observation caches become ``None`` (SB3 then resets the
    environment before training, which ``load`` does by default anyway); any other value is
    pickled whole, so SB3 reads what was saved.
    """
    return None if key in _OBSERVATION_CACHES else value


def collect_extras(model: Any, include: set[str]) -> list[tuple[str, Parts]]:
    """The requested extras of an SB3 model, as component parts (arrays, no pickles)."""

    out = []
    if "replay_buffer" in include:
        buffer = getattr(model, "replay_buffer", None)
        if buffer is None:
            raise EncodeError(
                f"{type(model).__name__} has no replay buffer to save.",
                key="replay_buffer",
                hint="Only off-policy algorithms (DQN, SAC, TD3, DDPG, ...) have one; drop it from `include`.",
            )
        out.append(
            (
                "replay_buffer",
                Parts(
                    _replay_buffer_state(buffer),
                    [],
                    None,
                    [],
                    encoder_options=_ALL_ARRAYS_EXTERNAL,
                    snapshot=replay_snapshot(model, buffer),
                ),
            )
        )
    if "vec_normalize" in include:
        vec_normalize = model.get_vec_normalize_env()
        if vec_normalize is None:
            raise EncodeError(
                f"{type(model).__name__}'s environment is not wrapped in VecNormalize.",
                key="vec_normalize",
                hint="Drop it from `include`, or train with `VecNormalize(env)`.",
            )
        out.append(
            (
                "vec_normalize",
                Parts(_vec_normalize_state(vec_normalize), [], None, [], encoder_options=_ALL_ARRAYS_EXTERNAL),
            )
        )
    return out


def _class_path(obj: Any) -> str:
    return f"{type(obj).__module__}:{type(obj).__qualname__}"


def _is_array_tree(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return not value.dtype.hasobject
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(k, str) and isinstance(v, np.ndarray) and not v.dtype.hasobject for k, v in value.items())
    )


def _replay_buffer_state(buffer: Any) -> dict[str, Any]:
    her = is_her(buffer)
    if callable(getattr(buffer, "set_env", None)) and not her:
        raise EncodeError(
            f"{type(buffer).__name__} keeps a reference to its environment and is not supported.",
            key="replay_buffer",
            hint="Save it with SB3's `model.save_replay_buffer(path)` instead.",
        )
    state: dict[str, Any] = {"class": _class_path(buffer)}
    for name in _REPLAY_SCALARS:
        if hasattr(buffer, name):
            state[name] = _plain(getattr(buffer, name), name)
    state["arrays"] = {name: value for name, value in vars(buffer).items() if _is_array_tree(value)}
    if not state["arrays"]:
        raise EncodeError(f"{type(buffer).__name__} holds no numpy arrays to save.", key="replay_buffer")
    if her:  # its environment is re-attached on load, as SB3's `set_env` does
        state.update(her_state(buffer))
    return state


def _plain(value: Any, name: str) -> Any:
    """A JSON scalar (numpy scalars included), so the extras need no pickle."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise EncodeError(f"attribute `{name}` holds a {type(value).__name__}, expected a plain number or string.")


def _running_stats(vec_normalize: Any) -> dict[str, Any]:
    """The wrapper's ``RunningMeanStd`` objects by label: ``ret_rms``, and ``obs_rms`` or
    ``obs_rms.<key>`` for each normalized key of a Dict observation."""
    stats = {"ret_rms": vec_normalize.ret_rms}
    obs_rms = getattr(vec_normalize, "obs_rms", None)  # absent when built with norm_obs=False
    if isinstance(obs_rms, dict):
        stats.update({f"obs_rms.{key}": rms for key, rms in obs_rms.items()})
    elif obs_rms is not None:
        stats["obs_rms"] = obs_rms
    return stats


def _vec_normalize_state(vec_normalize: Any) -> dict[str, Any]:
    state: dict[str, Any] = {"class": _class_path(vec_normalize)}
    for name in _VEC_NORMALIZE_SCALARS:
        state[name] = _plain(getattr(vec_normalize, name), name)
    state["norm_obs_keys"] = _plain(getattr(vec_normalize, "norm_obs_keys", None), "norm_obs_keys")
    state["statistics"] = {
        label: {"mean": _moment(rms.mean), "var": _moment(rms.var), "count": float(rms.count)}
        for label, rms in _running_stats(vec_normalize).items()
    }
    # the last raw observation and reward (get_original_obs/_reward), which SB3's pickle keeps
    last = {name: getattr(vec_normalize, name, None) for name in _LAST_STEP}
    last = {name: value for name, value in last.items() if _is_array_tree(value)}
    if last:
        state["last_step"] = last
    return state


def _moment(value: Any) -> Any:
    """A running mean or variance as ``RunningMeanStd`` holds it: an array, or, for a scalar
    statistic (``ret_rms``) once updated, a ``np.float64`` (``update_from_moments`` makes it
    one), which SB3's pickle gives back as such and an array would not."""
    return np.float64(value) if isinstance(value, np.generic) else np.asarray(value)


def matches_any(name: str, patterns: list[str]) -> bool:

    return bool(patterns) and matches(name, patterns)


def has_extra(src: LoadSession, name: str, exclude: list[str]) -> bool:
    return src.has(_format.join(name, _format.DATA)) and not matches_any(name, exclude)


# -- extras --------------------------------------------------------------------------------
def restore_extra(src: LoadSession, model: Any, name: str, *, in_place: bool = False) -> None:
    """Load one extra (``"replay_buffer"``/``"vec_normalize"``) into ``model``, skipping it with
    a warning when it does not fit. ``in_place``: the model is a live one, whose buffer arrays
    the saved ones are read straight into where they can hold them (``_buffer_fill``); a model
    just built keeps its untouched zeros out of it (they are replaced, never made resident)."""
    member = _format.join(name, _format.DATA)
    before = len(src.report.skipped)
    deferred = ("arrays",) if in_place and name == "replay_buffer" and not src.mmap else ()
    try:
        state = src.decode_data(name, deferred=deferred)
        if name == "replay_buffer":
            _restore_replay_buffer(src, model, state or {})
        else:
            vec_normalize = model.get_vec_normalize_env()
            if vec_normalize is None:
                warn_unused_vec_normalize(src)
                return
            _set_statistics(vec_normalize, state or {})
    except IntegrityError:
        raise  # a corrupt array member: the decode already named it and how to leave the extra out
    except ZipsaveError as err:
        # a key the decode skipped (skip_broken_tensors=True) was warned about already
        warned = any(entry.member == member for entry in src.report.skipped[before:])
        src.skip(member, None, None, err, warn=not warned)


def _restore_replay_buffer(src: LoadSession, model: Any, state: dict[str, Any]) -> None:
    buffer = getattr(model, "replay_buffer", None)
    if buffer is None:
        raise DecodeError(f"holds a replay buffer, but {type(model).__name__} has none to fill.")
    if not same(state.get("class"), _class_path(buffer)):
        raise DecodeError(
            f"holds a `{state.get('class')}`, but the model's replay buffer is a `{_class_path(buffer)}`."
        )
    for key in ("buffer_size", "n_envs", "optimize_memory_usage"):
        if key in state and not same(state[key], getattr(buffer, key, None)):
            raise DecodeError(
                f"holds a replay buffer with {key}={shown(state[key])}, but the model's has {shown(getattr(buffer, key, None))}.",
                hint="Load with the saved settings (no `buffer_size=` override, the same number of envs).",
            )
    arrays = state.get("arrays")
    if not isinstance(arrays, dict) or not arrays:
        raise DecodeError(f"holds no `arrays` of the replay buffer (found {type(arrays).__name__}).")
    held = held_transitions(arrays)  # None: arrays of no buffer's shapes, named by `_check_like`
    if held is not None and (mismatch := transitions_mismatch(model, held)) is not None:
        raise mismatch  # another environment's transitions, as the buffer file's door says
    for n, value in arrays.items():
        check_data_key(buffer, n, key=str(n))  # a name from the archive: the buffer's own attribute
        _check_like(n, value, getattr(buffer, n, None))
    pos, full = state.get("pos"), state.get("full")
    if type(pos) is not int or not 0 <= pos < buffer.buffer_size or type(full) is not bool:
        raise DecodeError(
            f"holds pos={shown(pos)}, full={shown(full)}; expected 0 <= pos < {shown(buffer.buffer_size)} and a bool."
        )
    her = is_her(buffer)
    infos = check_her(buffer, state, arrays, nbytes=archive_size(src) or 0, limits=src.limits) if her else None
    bookkeeping = {n: _read(src, arrays.pop(n)) for n in HER_ARRAYS} if her else {}  # small: read and checked first
    problem = bookkeeping_problem(buffer.buffer_size, buffer.n_envs, bookkeeping) if her else None
    if problem:
        raise DecodeError(f"holds a HerReplayBuffer whose {problem[1]}.", key=problem[0])
    if not fill_buffer(src, buffer, arrays):
        return  # emptied, and said so (skip_broken_tensors=True)
    for n, value in bookkeeping.items():
        live = getattr(buffer, n)
        if live.shape == value.shape and live.dtype == value.dtype and live.flags.writeable:
            live[...] = value  # where it lives (a live model's buffer keeps its memory)
        else:
            setattr(buffer, n, value)
    buffer.pos, buffer.full = pos, full
    if "handle_timeout_termination" in state:
        buffer.handle_timeout_termination = bool(state["handle_timeout_termination"])
    buffer.device = model.device  # SB3 #1561
    if her:
        _finish_her(src, model, buffer, state, infos)


def _read(src: LoadSession, saved: Any) -> Any:
    return saved.as_declared(src.load_array(saved.member), src.name) if isinstance(saved, NpyHeader) else saved


def _finish_her(src: LoadSession, model: Any, buffer: Any, state: dict[str, Any], infos: Any) -> None:
    if infos is not None:
        buffer.infos[: len(infos)] = infos
    if buffer.env is None and model.env is not None:
        buffer.set_env(model.env)  # as SB3's load_replay_buffer does
    note = settings_note(buffer, state)
    if note:
        src.report.notes.append(note)
    # the environments are reset before training (the load's force_reset): end the episode
    # that was under way, as SB3's load_replay_buffer(truncate_last_traj=True) does
    if model._last_obs is None and end_unfinished_episodes(model):
        src.report.notes.append(
            "the HerReplayBuffer's unfinished episode was ended (marked done, as a time-out), since the "
            "environment is reset before training; load with `force_reset=False` to continue it."
        )


def _check_like(name: str, saved: Any, current: Any) -> None:
    if isinstance(current, dict):
        if not isinstance(saved, dict) or set(saved) != set(current):
            found = sorted(saved) if isinstance(saved, dict) else type(saved).__name__
            raise DecodeError(f"array `{name}` has keys {found}, expected {sorted(current)}.")
        for key in current:
            _check_like(f"{name}.{key}", saved[key], current[key])
        return
    if not isinstance(current, np.ndarray):
        raise DecodeError(f"holds array `{name}`, which the model's replay buffer does not have.")
    array = isinstance(saved, (np.ndarray, NpyHeader))  # a header: the member is read later, into its place
    if not array or saved.shape != current.shape or saved.dtype != current.dtype:
        found = f"{saved.dtype}{list(saved.shape)}" if array else type(saved).__name__
        raise DecodeError(f"array `{name}` is {found}, expected {current.dtype}{list(current.shape)}.")


def apply_vec_normalize(src: LoadSession, venv: Any) -> Any:
    """Fill the env's VecNormalize with the saved statistics, wrapping it in one if needed."""
    from stable_baselines3.common.vec_env import unwrap_vec_normalize

    member = _format.join("vec_normalize", _format.DATA)
    try:
        state = src.decode_data("vec_normalize") or {}
        vec_normalize = unwrap_vec_normalize(venv)
        if vec_normalize is None:
            return build_vec_normalize(state, venv)
        _set_statistics(vec_normalize, state)  # the caller's wrapper keeps the caller's settings
    except IntegrityError:
        raise  # a corrupt array member: the decode already named it and how to leave the extra out
    except ZipsaveError as err:
        src.skip(member, None, None, err)
    except (ValueError, TypeError, KeyError, AssertionError) as err:
        src.skip(member, None, None, DecodeError(f"does not fit the environment ({type(err).__name__}: {err})."))
    return venv


def build_vec_normalize(state: dict[str, Any], venv: Any) -> Any:
    """A new ``VecNormalize`` around ``venv`` with the saved settings and statistics."""
    from stable_baselines3.common.vec_env import VecNormalize

    settings = {k: state[k] for k in _VEC_NORMALIZE_SCALARS if k in state}
    check_vec_normalize_settings(settings, None)
    wrapped = VecNormalize(venv, norm_obs_keys=state.get("norm_obs_keys"), **settings)
    _set_statistics(wrapped, state)
    for name, value in _checked_last_step(state.get("last_step"), venv.observation_space).items():
        setattr(wrapped, name, value)
    return wrapped


def _checked_last_step(last: Any, space: Any) -> dict[str, Any]:
    """The saved ``old_obs`` and ``old_reward``: numeric arrays, one row per environment, of the
    observation space's shape (its keys for a ``Dict``) and a 1-d reward."""
    if last is None:
        return {}
    if not isinstance(last, dict) or not set(last) <= set(_LAST_STEP):
        found = sorted(map(str, last)) if isinstance(last, dict) else type(last).__name__
        raise DecodeError(f"`last_step` holds {found}, expected {list(_LAST_STEP)}.")
    subspaces = getattr(space, "spaces", None)
    for name, value in last.items():
        if isinstance(subspaces, dict) and name == "old_obs":
            if not isinstance(value, dict) or set(value) != set(subspaces):
                found = sorted(map(str, value)) if isinstance(value, dict) else type(value).__name__
                raise DecodeError(f"`last_step.old_obs` has keys {found}, expected {sorted(subspaces)}.")
            for key, sub in subspaces.items():
                _check_rows(f"old_obs.{key}", value[key], tuple(sub.shape))
        else:
            _check_rows(name, value, tuple(space.shape) if name == "old_obs" else ())
    return last


def _check_rows(name: str, value: Any, shape: tuple[int, ...]) -> None:
    if not (isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.shape[1:] == shape):
        found = f"{value.dtype}{list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
        raise DecodeError(f"`last_step.{name}` is {found}, expected a numeric array of rows of shape {list(shape)}.")


def _set_statistics(vec_normalize: Any, state: dict[str, Any]) -> None:
    """Load the running means and variances; all are checked before any is changed."""
    current = _running_stats(vec_normalize)
    saved = state.get("statistics")
    if not isinstance(saved, dict) or set(saved) != set(current):
        found = sorted(saved) if isinstance(saved, dict) else None
        raise DecodeError(f"holds statistics {found}, but the environment's VecNormalize keeps {sorted(current)}.")
    checked = {label: _checked_stats(label, saved[label], np.shape(rms.mean)) for label, rms in current.items()}
    for label, (mean, var, count) in checked.items():
        current[label].mean, current[label].var, current[label].count = mean, var, count


def _checked_stats(label: str, saved: Any, shape: tuple[int, ...]) -> tuple[Any, Any, float]:
    if not isinstance(saved, dict):
        raise DecodeError(f"statistics `{label}` are a {type(saved).__name__}, expected mean, var and count.")
    arrays: list[Any] = []
    for what in ("mean", "var"):
        arr = saved.get(what)
        if isinstance(arr, np.floating) and shape == ():  # a scalar statistic, kept a np.float64
            arrays.append(np.float64(arr))
            continue
        if not isinstance(arr, np.ndarray) or arr.shape != shape:
            found = f"shape {arr.shape}" if isinstance(arr, np.ndarray) else f"a {type(arr).__name__}"
            raise DecodeError(f"`{label}.{what}` is {found}, expected shape {shape}.")
        arrays.append(arr.astype(np.float64, copy=False))
    count = saved.get("count")
    if not isinstance(count, (int, float)) or isinstance(count, bool):
        raise DecodeError(f"`{label}.count` is {shown(count)}, expected a number.")
    return arrays[0], arrays[1], float(count)


def warn_unused_vec_normalize(src: LoadSession) -> None:
    message = (
        "holds VecNormalize statistics (its `vec_normalize/` folder), but the load got no `env=` to wrap with "
        "them, so the model's observations are not normalized. Pass `env=venv` to the load, which wraps `venv` "
        f"for you, or restore them with `env = VecNormalize.load({src.name!r}, venv)` and pass `env=env`; "
        "`zipsave.load(..., exclude=['vec_normalize'])` leaves them out."
    )
    src.report.notes.append(message)
    warnings.warn(ZipsaveWarning(f"archive `{src.name}`: {message}"), stacklevel=caller_stacklevel())
