"""Stable-Baselines3 models: rebuild one from an archive the way ``BaseAlgorithm.load`` does,
and keep the pieces SB3 stores in separate pickles (replay buffer, ``VecNormalize``
statistics) in the same archive, as arrays.

SB3 is imported only inside these functions, never when zipsave is imported.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _format
from .exceptions import (
    ArchiveFormatError,
    DecodeError,
    EncodeError,
    ParameterMismatchError,
    ZipsaveError,
    ZipsaveWarning,
)

if TYPE_CHECKING:
    from ._persist import _Parts, _Source

__all__ = ["EXTRAS", "build_sb3", "collect_extras", "restore_extra", "sb3_stand_in"]

#: Component folders zipsave adds to an SB3 archive on request (``include=[...]``).
EXTRAS = ("replay_buffer", "vec_normalize")

#: ``data`` keys without which no SB3 model can be built.
_REQUIRED = ("policy_class", "observation_space", "action_space")

#: Observation caches SB3 discards on load anyway (``force_reset``, SB3 #597). When their
#: arrays live in ``.npy`` members, SB3 is shown ``None`` instead of a pickled copy.
_OBSERVATION_CACHES = frozenset({"_last_obs", "_last_original_obs"})

# Every array goes to a .npy member: the extras then hold no pickle at all.
_ALL_ARRAYS_EXTERNAL = {"array_bytes": -1}

_REPLAY_SCALARS = ("buffer_size", "n_envs", "pos", "full", "optimize_memory_usage", "handle_timeout_termination")
_VEC_NORMALIZE_SCALARS = ("training", "norm_obs", "norm_reward", "clip_obs", "clip_reward", "gamma", "epsilon")


# -- saving --------------------------------------------------------------------------------
def sb3_stand_in(key: str, value: Any) -> Any:
    """What SB3 unpickles for a top-level entry whose arrays moved to ``.npy`` members.

    SB3 reads only ``":serialized:"``. Observation caches become ``None`` (SB3 then resets the
    environment before training, which ``load`` does by default anyway); any other value is
    pickled whole, so SB3 reads what was saved.
    """
    return None if key in _OBSERVATION_CACHES else value


def collect_extras(model: Any, include: set[str]) -> list[tuple[str, _Parts]]:
    """The requested extras of an SB3 model, as component parts (arrays, no pickles)."""
    from ._persist import _Parts

    out = []
    if "replay_buffer" in include:
        buffer = getattr(model, "replay_buffer", None)
        if buffer is None:
            raise EncodeError(
                f"{type(model).__name__} has no replay buffer to save.",
                key="replay_buffer",
                hint="Only off-policy algorithms (DQN, SAC, TD3, DDPG, ...) have one; drop it from `include`.",
            )
        out.append(("replay_buffer", _Parts(_replay_buffer_state(buffer), [], None, [], encoder_options=_ALL_ARRAYS_EXTERNAL)))
    if "vec_normalize" in include:
        vec_normalize = model.get_vec_normalize_env()
        if vec_normalize is None:
            raise EncodeError(
                f"{type(model).__name__}'s environment is not wrapped in VecNormalize.",
                key="vec_normalize",
                hint="Drop it from `include`, or train with `VecNormalize(env)`.",
            )
        out.append(("vec_normalize", _Parts(_vec_normalize_state(vec_normalize), [], None, [], encoder_options=_ALL_ARRAYS_EXTERNAL)))
    return out


def _class_path(obj: Any) -> str:
    return f"{type(obj).__module__}:{type(obj).__qualname__}"


def _is_array_tree(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return not value.dtype.hasobject
    return isinstance(value, dict) and bool(value) and all(
        isinstance(k, str) and isinstance(v, np.ndarray) and not v.dtype.hasobject for k, v in value.items()
    )


def _replay_buffer_state(buffer: Any) -> dict[str, Any]:
    if callable(getattr(buffer, "set_env", None)):
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
        label: {"mean": np.asarray(rms.mean), "var": np.asarray(rms.var), "count": float(rms.count)}
        for label, rms in _running_stats(vec_normalize).items()
    }
    return state


# -- loading -------------------------------------------------------------------------------
def build_sb3(
    src: _Source,
    cls: Any,
    *,
    custom_objects: dict[str, Any] | None,
    exclude: list[str],
    overrides: dict[str, Any],
) -> Any:
    """Rebuild an SB3 algorithm from an archive, as ``cls.load(path, env=..., **kwargs)`` does.

    The differences from SB3: ``data`` decodes under zipsave's trust policy and skip rules; a
    skipped entry that SB3 cannot do without is reported with its cause (instead of SB3's
    ``KeyError``, #1682); tensors are read straight into the freshly built policy and
    optimizers; and the replay buffer and ``VecNormalize`` statistics are restored when the
    archive holds them.
    """
    from stable_baselines3.common.utils import check_for_correct_spaces
    from stable_baselines3.common.vec_env.patch_gym import _convert_space

    kwargs = dict(overrides)
    env = kwargs.pop("env", None)
    force_reset = kwargs.pop("force_reset", True)
    data = src.decode_data("", custom_objects=custom_objects, exclude=exclude)
    if data is None:
        raise ArchiveFormatError(
            f"has no `{_format.DATA}` member, so there is no {cls.__name__} to build.",
            archive=src.name,
            hint="Load only the weights with `model.set_parameters(path)` or `zipsave.restore(model, path)`.",
        )
    _check_required(src, cls, data, kwargs)
    _fix_policy_kwargs(src, data, kwargs)
    for key in ("observation_space", "action_space"):
        data[key] = _convert_space(data[key])

    if env is not None:
        env = cls._wrap_env(env, data.get("verbose", 0))
        if _has_extra(src, "vec_normalize", exclude):
            env = _apply_vec_normalize(src, env)
        check_for_correct_spaces(env, data["observation_space"], data["action_space"])
        if force_reset:
            data["_last_obs"] = None  # SB3 #597: reset before training
        data["n_envs"] = env.num_envs
    else:
        if _has_extra(src, "vec_normalize", exclude):
            _warn_unused_vec_normalize(src)
        env = data.get("env")

    try:
        model = cls(policy=data["policy_class"], env=env, device=src.device, _init_setup_model=False)
        model.__dict__.update(data)
        model.__dict__.update(kwargs)
        model._setup_model()
    except Exception as err:
        raise DecodeError(
            f"{cls.__name__} cannot be built from this archive's data ({type(err).__name__}: {err}).",
            archive=src.name,
            member=_format.DATA,
            hint=_policy_hint(cls, data["policy_class"]),
        ) from err

    _load_parameters(src, model, exclude)
    _load_variables(src, model, exclude)
    if _has_extra(src, "replay_buffer", exclude):
        restore_extra(src, model, "replay_buffer")
    if model.use_sde:
        model.policy.reset_noise()  # sample the gSDE matrix on the right device (SB3 #44)
    return model


def _policy_hint(cls: type, policy_class: Any) -> str | None:
    """Say so when the saved policy is not one of ``cls``'s: the usual reason a build fails."""
    bases = tuple(getattr(cls, "policy_aliases", {}).values())
    if bases and isinstance(policy_class, type) and not issubclass(policy_class, bases):
        return (
            f"Its `policy_class` is {policy_class.__name__}, not a {cls.__name__} policy; "
            "was it saved by another algorithm?"
        )
    return None


def _matches_any(name: str, patterns: list[str]) -> bool:
    from ._persist import _matches

    return bool(patterns) and _matches(name, patterns)


def _has_extra(src: _Source, name: str, exclude: list[str]) -> bool:
    return src.has(_format.join(name, _format.DATA)) and not _matches_any(name, exclude)


def _skipped_causes(src: _Source) -> dict[str, str]:
    return {entry.key: entry.cause for entry in src.report.skipped if entry.member == _format.DATA and entry.key}


def _check_required(src: _Source, cls: type, data: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Name the root cause when a key SB3 needs is missing, instead of failing later (#1682)."""
    skipped = _skipped_causes(src)
    needed = list(_REQUIRED)
    if "policy_kwargs" in skipped and "policy_kwargs" not in kwargs:
        # Without it the policy would be built with default layers and the weights would not fit.
        needed.append("policy_kwargs")
    lost = sorted(key for key in needed if key not in data and key in skipped)
    absent = sorted(key for key in needed if key not in data and key not in skipped and key != "policy_kwargs")
    if lost:
        causes = "; ".join(f"`{key}`: {skipped[key]}" for key in lost)
        raise DecodeError(
            f"cannot build {cls.__name__}: {_keys(lost)} could not be decoded and {cls.__name__} needs "
            f"{'it' if len(lost) == 1 else 'them'} ({causes})",
            archive=src.name,
            member=_format.DATA,
            key=lost[0] if len(lost) == 1 else None,
            hint="Provide the value with `custom_objects={" + ", ".join(f"{k!r}: ..." for k in lost) + "}`, "
            "or trust the global named above with `trusted=[...]`.",
        )
    if absent:
        raise ArchiveFormatError(
            f"holds no {_keys(absent)}, which {cls.__name__} needs; is this an SB3 model archive?",
            archive=src.name,
            member=_format.DATA,
            key=absent[0] if len(absent) == 1 else None,
            hint="Provide the value with `custom_objects={" + ", ".join(f"{k!r}: ..." for k in absent) + "}`.",
        )
    defaults = sorted(set(skipped) - set(kwargs) - set(needed))
    if defaults:
        src.report.notes.append(
            f"{_keys(defaults)} could not be decoded; {cls.__name__} uses what its constructor and "
            "`_setup_model` set instead. Pass them as keyword arguments to `load` to choose."
        )


def _keys(keys: list[str]) -> str:
    return ", ".join(f"`{k}`" for k in keys)


def _fix_policy_kwargs(src: _Source, data: dict[str, Any], kwargs: dict[str, Any]) -> None:
    stored = data.get("policy_kwargs")
    if isinstance(stored, dict):
        stored.pop("device", None)  # the loading device wins
        net_arch = stored.get("net_arch")
        if net_arch and isinstance(net_arch, list) and isinstance(net_arch[0], dict):
            stored["net_arch"] = net_arch[0]  # SB3 < 1.8 layout
    if "policy_kwargs" in kwargs and "policy_kwargs" in data and kwargs["policy_kwargs"] != stored:
        raise ParameterMismatchError(
            f"the `policy_kwargs` given ({kwargs['policy_kwargs']!r}) differ from the saved ones ({stored!r}).",
            archive=src.name,
            member=_format.DATA,
            key="policy_kwargs",
            hint="The saved weights fit only the saved architecture; leave `policy_kwargs` out.",
        )


def _load_parameters(src: _Source, model: Any, exclude: list[str]) -> None:
    """``set_parameters(params, exact_match=True)``, reading each tensor into the model in place."""
    from ._persist import _load_state_into, _recursive_getattr, _unwrap

    expected = [n for n in model._get_torch_save_params()[0] if not _matches_any(n, exclude)]
    saved = [
        name[: -len(_format.PTH_SUFFIX)]
        for name in src.reader.names()
        if "/" not in name
        and name.endswith(_format.PTH_SUFFIX)
        and name not in (_format.PYTORCH_VARIABLES, _format.LEGACY_PYTORCH_VARIABLES)
        and not _matches_any(name[: -len(_format.PTH_SUFFIX)], exclude)
    ]
    if set(saved) != set(expected):
        raise ParameterMismatchError(
            f"holds state dicts {sorted(saved)}, but {type(model).__name__} has {sorted(expected)}.",
            archive=src.name,
            hint="Was it saved from another algorithm? Leave members out with `exclude=[...]`.",
        )
    for name in saved:
        member = name + _format.PTH_SUFFIX
        target = _unwrap(_recursive_getattr(model, name))
        try:
            _load_state_into(src, member, target, True)
        except ParameterMismatchError as err:
            if not _load_legacy(src, name, target, err):
                raise
        except ZipsaveError as err:
            src.skip(member, None, None, err)


def _load_legacy(src: _Source, name: str, target: Any, err: ParameterMismatchError) -> bool:
    """SB3's shims for archives of older SB3 versions; True when one applied."""
    import torch

    from ._persist import _load_state_into

    member = name + _format.PTH_SUFFIX
    if isinstance(target, torch.nn.Module) and "pi_features_extractor" in err.detail and "missing keys" in err.detail:
        # SB3 < 1.7 A2C/PPO had one shared features extractor (SB3 #1233).
        _load_state_into(src, member, target, False)
        warnings.warn(
            ZipsaveWarning(
                f"archive `{src.name}`: member `{member}` comes from SB3 < 1.7 (no separate "
                "`pi_features_extractor`); loaded with `exact_match=False`. Save the model again to "
                "update the archive."
            ),
            stacklevel=5,
        )
        return True
    if isinstance(target, torch.optim.Optimizer) and len(target.param_groups) == 1:
        # DQN < 2.4 also gave the target network's parameters to the optimizer (SB3 PR #1963).
        tree, _ = src.load_tensors(member)
        groups = tree.get("param_groups") if isinstance(tree, dict) else None
        n_params = len(target.param_groups[0]["params"])
        if not (isinstance(groups, list) and len(groups) == 1 and len(groups[0].get("params", ())) == 2 * n_params):
            return False
        groups[0]["params"] = groups[0]["params"][:n_params]
        kept = set(groups[0]["params"])
        tree["state"] = {k: v for k, v in tree.get("state", {}).items() if k in kept}
        target.load_state_dict(tree)
        warnings.warn(
            ZipsaveWarning(
                f"archive `{src.name}`: member `{member}` comes from DQN of SB3 < 2.4 (target network "
                "parameters in the optimizer); truncated them. Save the model again to update the archive."
            ),
            stacklevel=5,
        )
        return True
    return False


def _load_variables(src: _Source, model: Any, exclude: list[str]) -> None:
    from ._persist import _recursive_getattr, _set_variable

    member = next((m for m in (_format.PYTORCH_VARIABLES, _format.LEGACY_PYTORCH_VARIABLES) if src.has(m)), None)
    if member is None:
        return
    names = model._get_torch_save_params()[1]
    targets = {}
    for name in names:
        try:
            targets[name] = _recursive_getattr(model, name)
        except AttributeError:
            pass
    try:
        variables, _ = src.load_tensors(member, targets)
    except ZipsaveError as err:
        src.skip(member, None, None, err)
        return
    for name, value in (variables or {}).items():
        # None: SAC's `log_ent_coef` when the entropy coefficient was fixed.
        if value is None or _matches_any(name, exclude) or value is targets.get(name):
            continue
        _set_variable(model, name, value)


# -- extras --------------------------------------------------------------------------------
def restore_extra(src: _Source, model: Any, name: str) -> None:
    """Load one extra (``"replay_buffer"``/``"vec_normalize"``) into ``model``, skipping it with
    a warning when it does not fit."""
    member = _format.join(name, _format.DATA)
    try:
        state = src.decode_data(name)
        if name == "replay_buffer":
            _restore_replay_buffer(model, state or {})
        else:
            vec_normalize = model.get_vec_normalize_env()
            if vec_normalize is None:
                _warn_unused_vec_normalize(src)
                return
            _set_statistics(vec_normalize, state or {})
    except ZipsaveError as err:
        src.skip(member, None, None, err)


def _restore_replay_buffer(model: Any, state: dict[str, Any]) -> None:
    buffer = getattr(model, "replay_buffer", None)
    if buffer is None:
        raise DecodeError(f"holds a replay buffer, but {type(model).__name__} has none to fill.")
    if state.get("class") != _class_path(buffer):
        raise DecodeError(f"holds a `{state.get('class')}`, but the model's replay buffer is a `{_class_path(buffer)}`.")
    for key in ("buffer_size", "n_envs", "optimize_memory_usage"):
        if key in state and state[key] != getattr(buffer, key, None):
            raise DecodeError(
                f"holds a replay buffer with {key}={state[key]!r}, but the model's has {getattr(buffer, key, None)!r}.",
                hint="Load with the saved settings (no `buffer_size=` override, the same number of envs).",
            )
    arrays = state.get("arrays")
    if not isinstance(arrays, dict) or not arrays:
        raise DecodeError(f"holds no `arrays` of the replay buffer (found {type(arrays).__name__}).")
    for n, value in arrays.items():
        _check_like(n, value, getattr(buffer, n, None))
    pos, full = state.get("pos"), state.get("full")
    if type(pos) is not int or not 0 <= pos < buffer.buffer_size or type(full) is not bool:
        raise DecodeError(f"holds pos={pos!r}, full={full!r}; expected 0 <= pos < {buffer.buffer_size} and a bool.")
    for n, value in arrays.items():
        setattr(buffer, n, value)  # replace, not copy: the fresh zeros were never touched
    buffer.pos, buffer.full = pos, full
    if "handle_timeout_termination" in state:
        buffer.handle_timeout_termination = bool(state["handle_timeout_termination"])
    buffer.device = model.device  # SB3 #1561


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
    if not isinstance(saved, np.ndarray) or saved.shape != current.shape or saved.dtype != current.dtype:
        found = f"{saved.dtype}{list(saved.shape)}" if isinstance(saved, np.ndarray) else type(saved).__name__
        raise DecodeError(f"array `{name}` is {found}, expected {current.dtype}{list(current.shape)}.")


def _apply_vec_normalize(src: _Source, venv: Any) -> Any:
    """Fill the env's VecNormalize with the saved statistics, wrapping it in one if needed."""
    from stable_baselines3.common.vec_env import VecNormalize, unwrap_vec_normalize

    member = _format.join("vec_normalize", _format.DATA)
    try:
        state = src.decode_data("vec_normalize") or {}
        vec_normalize = unwrap_vec_normalize(venv)
        if vec_normalize is None:
            settings = {k: state[k] for k in _VEC_NORMALIZE_SCALARS if k in state}
            wrapped = VecNormalize(venv, norm_obs_keys=state.get("norm_obs_keys"), **settings)
            _set_statistics(wrapped, state)
            return wrapped
        _set_statistics(vec_normalize, state)  # the caller's wrapper keeps the caller's settings
    except ZipsaveError as err:
        src.skip(member, None, None, err)
    except (ValueError, TypeError, KeyError, AssertionError) as err:
        src.skip(member, None, None, DecodeError(f"does not fit the environment ({type(err).__name__}: {err})."))
    return venv


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


def _checked_stats(label: str, saved: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, float]:
    if not isinstance(saved, dict):
        raise DecodeError(f"statistics `{label}` are a {type(saved).__name__}, expected mean, var and count.")
    arrays = []
    for what in ("mean", "var"):
        arr = saved.get(what)
        if not isinstance(arr, np.ndarray) or arr.shape != shape:
            found = f"shape {arr.shape}" if isinstance(arr, np.ndarray) else f"a {type(arr).__name__}"
            raise DecodeError(f"`{label}.{what}` is {found}, expected shape {shape}.")
        arrays.append(arr.astype(np.float64, copy=False))
    count = saved.get("count")
    if not isinstance(count, (int, float)) or isinstance(count, bool):
        raise DecodeError(f"`{label}.count` is {count!r}, expected a number.")
    return arrays[0], arrays[1], float(count)


def _warn_unused_vec_normalize(src: _Source) -> None:
    message = (
        "holds VecNormalize statistics, but the model has no environment with a VecNormalize "
        "wrapper to receive them, so its observations are not normalized. Pass `env=` to "
        "`zipsave.load`, or `exclude=['vec_normalize']` to leave them out."
    )
    src.report.notes.append(message)
    warnings.warn(ZipsaveWarning(f"archive `{src.name}`: {message}"), stacklevel=5)
