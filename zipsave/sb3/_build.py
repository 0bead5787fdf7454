"""The one rebuild path of an SB3 algorithm from an archive, the way ``BaseAlgorithm.load`` does
it, with tensors read straight into the freshly built policy and optimizers. Every door uses
it: ``zipsave.load(path, cls=PPO)``, and ``PPO.load``/``set_parameters`` under ``install()``."""

from __future__ import annotations

import base64
import binascii
import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from .. import _format
from .._codec import SERIALIZED_KEY, TYPE_KEY
from .._core import LoadSession, check_data_key, no_model_error
from .._printable import shown
from ..exceptions import AlgorithmMismatchError, DecodeError, ParameterMismatchError, ZipsaveWarning, caller_stacklevel
from ._checks import (
    check_data,
    check_her_env,
    check_names,
    drop_her_wrapper_class,
    drop_old_her_arguments,
    drop_saved_env,
)
from ._estimate import check_model_size
from ._extras import apply_vec_normalize, has_extra, restore_extra, warn_unused_vec_normalize
from ._keys import blame_given, given_values, warn_near_options, warn_unknown_keys, warn_unmatched_custom_objects
from ._noise import fit_noise
from ._params import load_parameters, load_variables
from ._required import (
    ARS_WEIGHTS,
    REBUILT_FROM_SAVED,
    SCHEDULE_GROUPS,
    SCHEDULE_KEYS,
    build_error,
    check_required,
    foreign_policy,
    is_ars,
    named_classes,
    needs,
)
from ._same import same
from ._schedules import NotASchedule, recognise_schedule
from ._values import integral_arguments, unusable_values, upgrade_old_train_freq
from ._zoo import recognise as recognise_zoo_schedule

__all__ = ["ARS_WEIGHTS", "build_sb3", "is_ars", "sync_ars_weights"]

#: Keywords of ``load`` that are not ``data`` keys.
_NOT_DATA = frozenset({"env", "force_reset"})
#: ``data`` keys decoded even when given: the saved value is checked against the given one.
_CHECKED = frozenset({"policy_kwargs"})


def build_sb3(
    src: LoadSession,
    cls: Any,
    *,
    custom_objects: dict[str, Any] | None,
    exclude: list[str],
    overrides: dict[str, Any],
    door: str = "zipsave.load",
) -> Any:
    """Rebuild an SB3 algorithm from an archive, as ``cls.load(path, env=..., **kwargs)`` does.

    The differences from SB3: ``data`` is read and decoded once, under zipsave's trust policy
    and skip rules; SB3's and the RL Zoo's schedule closures are recognised without running
    them; a skipped entry that SB3 cannot do without is reported with its cause (instead of
    SB3's ``KeyError``, #1682); tensors are read straight into the freshly built policy and
    optimizers; and the replay buffer and ``VecNormalize`` statistics are restored when the
    archive holds them. ``door`` names the call for the keyword check (``"zipsave.load"``,
    or ``"PPO.load"`` for SB3's own under ``install()``).
    """
    from stable_baselines3.common.utils import check_for_correct_spaces
    from stable_baselines3.common.vec_env.patch_gym import _convert_space

    kwargs = dict(overrides)
    src.trust_references(named_classes(cls))
    env = kwargs.pop("env", None)
    force_reset = kwargs.pop("force_reset", True)
    passed = given_values(custom_objects, {k: v for k, v in kwargs.items() if k not in _CHECKED})
    table = needs(cls)
    # A key the caller passes by keyword is taken as given, never decoded nor warned about;
    # the keys SB3 cannot do without are reported once, by the error `check_required` raises.
    given = {**{k: v for k, v in kwargs.items() if k not in _NOT_DATA | _CHECKED}, **(custom_objects or {})}
    quiet = [*table.required, *table.replaced, *SCHEDULE_KEYS] + (
        [] if "policy_kwargs" in kwargs else ["policy_kwargs"]
    )
    recovery = _ScheduleRecovery()
    data = src.decode_data("", custom_objects=given, exclude=exclude, quiet=quiet, recover=recovery)
    if data is None:
        raise no_model_error(
            src,
            f"Load its weights into a model with `model.set_parameters(path)` or `zipsave.restore(model, path)`; "
            f"{cls.__name__} is built only from an archive `model.save` wrote.",
        )
    raw = _raw_data(src)
    warn_near_options(kwargs, data, cls, src.name, door=door)
    check_required(src, cls, data, given)
    drop_saved_env(data, src.report.notes)
    drop_her_wrapper_class(data, src.report.notes)
    drop_old_her_arguments(data, src.report.notes, src.name)
    upgrade_old_train_freq(data, src.report.notes)
    integral_arguments(cls, data, src.report.notes, given=given)  # before the model's size is estimated
    check_data(data, archive=src.name, references=src.policy.references)
    check_names(cls, data=data, params=(), variables=(), archive=src.name)
    _fix_policy_kwargs(src, data, kwargs)
    for key in ("observation_space", "action_space"):
        data[key] = _convert_space(data[key])

    if env is not None:
        # The caller's env, not the archive, is wrong here: said as such, not as a damaged archive.
        if has_extra(src, "vec_normalize", exclude):
            # inside VecTransposeImage, as SB3 stacks `Algo.load(path, env=VecNormalize.load(...))`
            # and as it was trained: the statistics are of the observations the env returns
            with _given_env(cls, env, data, src.name):
                env = _vectorised(env)
            env = apply_vec_normalize(src, env)
        with _given_env(cls, env, data, src.name):
            env = cls._wrap_env(env, data.get("verbose", 0))
        with _given_env(cls, env, data, src.name):
            check_for_correct_spaces(env, data["observation_space"], data["action_space"])
        if force_reset:
            data["_last_obs"] = None  # SB3 #597: reset before training
        data["n_envs"] = env.num_envs
    else:
        check_her_env(cls, data, src.name)
    if "action_noise" not in given:  # the caller's own is taken as it is
        fit_noise(data, src.report.notes, n_envs=None if env is None else env.num_envs)

    try:
        model = cls(policy=data["policy_class"], env=env, device=src.device, _init_setup_model=False)
    except Exception as err:
        raise build_error(src, cls, data, raw, err, door) from err
    for key in data:  # what `__dict__.update` writes must not replace the model's code
        check_data_key(model, key, archive=src.name, member=_format.DATA, key=key)
    check_model_size(cls, {**vars(model), **data, **kwargs}, src, limits=src.limits)  # before SB3 allocates it
    if _skip_unusable(src, cls, model, data, raw, door, taken={*given, *kwargs}):
        check_model_size(cls, {**vars(model), **data, **kwargs}, src, limits=src.limits)  # with the defaults kept
    try:
        model.__dict__.update(data)
        model.__dict__.update(kwargs)
        model._setup_model()
    except Exception as err:
        blamed = blame_given(cls, err, passed, raw, src.name) if passed else None
        if blamed is not None:
            raise blamed from err
        raise build_error(src, cls, data, raw, err, door) from err

    if env is None and has_extra(src, "vec_normalize", exclude):  # said once the model is built, not before an error
        warn_unused_vec_normalize(src)
    warn_unmatched_custom_objects(custom_objects, raw or data, src.name)
    warn_unknown_keys(model, data, src.name, given=set(given))
    _warn_lost_schedules(src, model, recovery.why)
    load_parameters(src, model, exclude)
    if is_ars(cls):
        sync_ars_weights(model)
        if any(e.key == ARS_WEIGHTS and e.member == _format.DATA for e in src.report.skipped):
            src.report.notes.append(
                f"`{ARS_WEIGHTS}` (a pickled tensor) was not decoded; ARS took it from the loaded policy."
            )
    load_variables(src, model, exclude)
    # Checked last, so a model whose state dicts do not fit says so as it always did: one that
    # fits, built with another algorithm's policy, would predict and fail at its first `learn`.
    foreign = None if "policy_class" in given else foreign_policy(cls, model.policy_class)
    if foreign is not None:
        cause = TypeError(
            f"its policy {model.policy_class.__name__} is {foreign}'s, which {cls.__name__} does not train"
        )
        raise build_error(src, cls, data, raw, cause, door)
    if has_extra(src, "replay_buffer", exclude):
        restore_extra(src, model, "replay_buffer")
    if model.use_sde:
        model.policy.reset_noise()  # sample the gSDE matrix on the right device (SB3 #44)
    return model


def _skip_unusable(src: LoadSession, cls: type, model: Any, data: dict, raw: Any, door: str, taken: set) -> bool:
    """Skip the ``data`` values the model's first ``learn`` cannot use (the model keeps its
    default; returns whether one was skipped); the caller's own are taken as given. Another algorithm's archive (a SAC's
    ``ent_coef='auto'`` where PPO keeps a number) is named as such, as when it fails to build."""
    problems = {k: p for k, p in unusable_values(model, data).items() if k not in taken}
    if not problems:
        return False
    key = next(iter(problems))
    mismatch = build_error(src, cls, data, raw, ValueError(f"`{key}` {problems[key]}"), door)
    if isinstance(mismatch, AlgorithmMismatchError):
        raise mismatch
    for key, problem in problems.items():
        value = data.pop(key)
        src.record_skip(_format.DATA, key, str(type(value)), DecodeError(problem, member=_format.DATA, key=key))
    return True


def _raw_data(src: LoadSession) -> dict[str, Any] | None:
    """The archive's ``data`` as JSON (the session's one read of it), for messages that quote it."""
    try:
        raw = src.read_json(_format.DATA)
    except Exception:  # noqa: BLE001 - the decode reported it
        return None
    return raw if isinstance(raw, dict) else None


class _ScheduleRecovery:
    """``recover=`` of the decode: SB3's own schedule closures (every cloudpickle layout) and
    the RL Zoo's become the installed libraries' schedule objects; nothing of the archive runs.
    Why the others were not recognised is kept for the warning."""

    def __init__(self) -> None:
        self.why: dict[str, str] = {}

    def __call__(self, key: str, value: Any) -> Any:
        hint = str(value.get(TYPE_KEY, "")) if isinstance(value, dict) else ""
        if key not in SCHEDULE_KEYS and "function" not in hint and "Schedule" not in hint:
            raise NotASchedule(key)  # a schedule is stored as one, or under a schedule's key
        try:
            return recognise_schedule(value)
        except NotASchedule as err:
            zoo = _zoo_schedule(value)
            if zoo is not None:
                return zoo
            if key in SCHEDULE_KEYS:
                self.why[key] = str(err)
            raise


def _zoo_schedule(value: Any) -> Any:
    """The RL Zoo's schedule closure (rl-zoo3 < 2.7) of a ``data`` entry, rebuilt; else ``None``."""
    if not isinstance(value, dict) or not isinstance(value.get(SERIALIZED_KEY), str):
        return None
    try:
        payload = base64.b64decode(value[SERIALIZED_KEY], validate=True)
    except (binascii.Error, ValueError):
        return None
    return recognise_zoo_schedule(payload)


def _warn_lost_schedules(src: LoadSession, model: Any, why: dict[str, str]) -> None:
    """One warning per hyper-parameter whose saved schedule could not be decoded, saying what
    the model uses instead. A schedule SB3 rebuilds from saved numbers (``lr_schedule`` from
    ``learning_rate``, DQN's ``exploration_schedule``) loses nothing: a report note only."""
    skipped = {e.key: e for e in src.report.skipped if e.member == _format.DATA and e.key in SCHEDULE_KEYS}
    for param, keys in SCHEDULE_GROUPS.items():
        lost = [k for k in keys if k in skipped]
        if not lost or not hasattr(model, param):
            continue
        if set(lost) <= REBUILT_FROM_SAVED:
            src.report.notes.append(
                f"`{lost[0]}` could not be decoded; {type(model).__name__} rebuilt it from the saved values."
            )
            continue
        keys_text = " and ".join(f"`{k}`" for k in lost)
        warnings.warn(
            ZipsaveWarning(
                f"archive `{src.name}`: {keys_text} could not be decoded ({_reason(lost[0], skipped, why)}); "
                f"the model falls back to `{param}={getattr(model, param)!r}`. To keep the original, pass it: "
                f"`custom_objects={{{param!r}: ...}}` (or `{param}=...`), or `allow_pickle=True` if you trust the archive."
            ),
            stacklevel=caller_stacklevel(),
        )


def _reason(key: str, skipped: dict, why: dict[str, str]) -> str:
    if key in why:  # a pickled function that is not one of SB3's schedules: code, never run
        return f"{why[key].rstrip('.')}, and a safe load runs no code from the archive"
    return str(skipped[key].cause).split(" To allow it")[0].rstrip(".")


def _vectorised(env: Any) -> Any:
    """``env`` as a VecEnv, the way SB3's ``_wrap_env`` makes one of a gymnasium env (a
    ``Monitor`` unless it has one, in a ``DummyVecEnv``), before any ``VecTransposeImage``."""
    from stable_baselines3.common.env_util import is_wrapped
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

    if isinstance(env, VecEnv):
        return env
    if not hasattr(env, "observation_space"):
        raise ValueError("not an environment")  # said by _given_env, naming what was passed
    if not is_wrapped(env, Monitor):
        env = Monitor(env)
    return DummyVecEnv([lambda: env])


@contextlib.contextmanager
def _given_env(cls: type, env: Any, data: dict[str, Any], archive: str | None) -> Iterator[None]:
    """Turn SB3's ``ValueError`` about the ``env=`` a caller passed (not an environment, or one
    whose spaces differ from the saved ones) into an error that names the env, not the archive."""
    try:
        yield
    except ValueError as err:
        if isinstance(env, str):
            raise ParameterMismatchError(
                f"`env=` is the string {env!r}, not an environment.",
                archive=archive,
                hint=f"Pass the environment itself: `env=gymnasium.make({env!r})`.",
            ) from err
        if not hasattr(env, "observation_space"):
            raise ParameterMismatchError(
                f"`env=` is of type {type(env).__name__}, not an environment.",
                archive=archive,
                hint="Pass a gymnasium environment or an SB3 VecEnv.",
            ) from err
        raise ParameterMismatchError(
            f"the environment given as `env=` has observation_space={env.observation_space!r} and "
            f"action_space={env.action_space!r}, but the saved {cls.__name__} was trained with "
            f"observation_space={data['observation_space']!r} and action_space={data['action_space']!r}."
            f"{_how_spaces_differ(str(err), data, env)}",
            archive=archive,
            hint="Pass an environment with the saved spaces (the one it was trained on).",
        ) from err


def _how_spaces_differ(cause: str, data: dict[str, Any], env: Any) -> str:
    """Which space SB3 found different (it names the first), and how, so that a reader need not
    compare two long reprs: bounds of a Box of the same shape are the usual surprise."""
    for name, said in (("observation_space", "Observation spaces"), ("action_space", "Action spaces")):
        if not cause.startswith(f"{said} do not match"):
            continue
        saved, given = data.get(name), getattr(env, name, None)
        old_shape, new_shape = getattr(saved, "shape", None), getattr(given, "shape", None)
        if type(saved) is not type(given):
            how = f": a {type(given).__name__} where the saved one is a {type(saved).__name__}"
        elif old_shape != new_shape:
            # an image's channels move first in SB3's VecTransposeImage: that is no difference to name
            moved = isinstance(old_shape, tuple) and sorted(old_shape) == sorted(new_shape or ())
            how = "" if moved else f": shape {shown(new_shape)} where the saved one has {shown(old_shape)}"
        elif getattr(saved, "dtype", None) != getattr(given, "dtype", None):
            how = f": dtype {getattr(given, 'dtype', None)} where the saved one has {getattr(saved, 'dtype', None)}"
        elif hasattr(saved, "low") and hasattr(saved, "high"):
            how = " only in its bounds (`low`, `high`): the same shape and dtype"
        elif hasattr(saved, "n") or hasattr(saved, "nvec"):
            field = "n" if hasattr(saved, "n") else "nvec"
            new, old = (shown(np.asarray(getattr(space, field)).tolist()) for space in (given, saved))
            how = f": {field}={new} where the saved one has {old}"
        else:
            how = ""
        return f" The {name} differs{how}."
    return ""


def sync_ars_weights(model: Any) -> None:
    """ARS searches around ``weights``, a flat copy of the policy's parameters that
    ``_setup_model`` takes *before* the saved parameters are loaded; unless the policy was zeroed
    (``zero_policy=True``, whose parameters are views of it), ``learn`` would go on from the
    freshly initialised weights and throw the training away (SB3's own ``load`` does). Take the
    copy from the loaded policy. SB3 pickles ``weights`` (a tensor) in ``data``; nothing of it is
    lost when that pickle is refused."""
    model.weights = torch.nn.utils.parameters_to_vector(model.policy.parameters()).detach()


def _fix_policy_kwargs(src: LoadSession, data: dict[str, Any], kwargs: dict[str, Any]) -> None:
    stored = data.get("policy_kwargs")
    if isinstance(stored, dict):
        stored.pop("device", None)  # the loading device wins
        net_arch = stored.get("net_arch")
        if net_arch and isinstance(net_arch, list) and isinstance(net_arch[0], dict):
            stored["net_arch"] = net_arch[0]  # SB3 < 1.8 layout
    if "policy_kwargs" in kwargs and "policy_kwargs" in data and not same(kwargs["policy_kwargs"], stored):
        raise ParameterMismatchError(
            f"the `policy_kwargs` given ({kwargs['policy_kwargs']!r}) differ from the saved ones ({shown(stored)}).",
            archive=src.name,
            member=_format.DATA,
            key="policy_kwargs",
            hint="The saved weights fit only the saved architecture; leave `policy_kwargs` out.",
        )
