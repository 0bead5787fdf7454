"""What an SB3 archive's decoded ``data`` may hand to SB3 code that calls it: each class in the
slot SB3 calls it from (``policy_class`` a policy, ``features_extractor_class`` an extractor...),
names safe to set on the model, no environment made from a string, spaces of plain data."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np
import torch

from .. import _format
from .._core import check_name, check_path
from .._printable import shown
from .._trust import space_problem
from ..exceptions import DecodeError, UnsafeGlobalError, ZipsaveWarning
from ._noise import check_noise, fit_noise
from ._same import same
from ._values import (
    her_buffer_class,
    integral_arguments,
    live_kind_problems,
    unusable_values,
    upgrade_old_train_freq,
)

__all__ = [
    "check_data",
    "check_her_env",
    "check_names",
    "check_policy_arguments",
    "drop_her_wrapper_class",
    "drop_old_her_arguments",
    "drop_saved_env",
    "restore_checks",
]

#: ``policy_kwargs`` entries SB3 policies call, and the base class each must derive from.
_POLICY_KWARG_BASES = {
    "features_extractor_class": ("stable_baselines3.common.torch_layers", "BaseFeaturesExtractor"),
    "optimizer_class": ("torch.optim", "Optimizer"),
    "activation_fn": ("torch.nn", "Module"),
}
#: Top-level ``data`` entries SB3 calls, and the base class each must derive from.
_DATA_BASES = {
    "policy_class": ("stable_baselines3.common.policies", "BasePolicy"),
    "replay_buffer_class": ("stable_baselines3.common.buffers", "BaseBuffer"),
    "rollout_buffer_class": ("stable_baselines3.common.buffers", "BaseBuffer"),
}
#: ``data`` entries SB3 passes on as keyword arguments (``**replay_buffer_kwargs``), and the
#: ``policy_kwargs`` entries a policy passes on: each a dict, or None for SB3's default.
_DATA_DICTS = ("policy_kwargs", "replay_buffer_kwargs", "rollout_buffer_kwargs")
_POLICY_KWARG_DICTS = ("features_extractor_kwargs", "optimizer_kwargs", "lstm_kwargs")
#: ``data`` entries SB3 calls as functions of the progress (schedules): never a class, whose
#: call would construct whatever the archive named.
_CALLED = ("learning_rate", "lr_schedule", "clip_range", "clip_range_vf", "exploration_schedule")


def _base(spec: tuple[str, str]) -> type:
    import importlib

    return getattr(importlib.import_module(spec[0]), spec[1])


def drop_saved_env(data: dict[str, Any], notes: list[str] | None = None) -> None:
    """SB3 saves no environment; an ``env`` entry that is not ``None`` (a string such as
    ``"module:Env-v0"``) is information only: ``gymnasium.make`` would import the module it
    names. It is kept out of what builds the model; pass ``env=`` to give the model one."""
    saved = data.get("env")
    if saved is None:
        return
    data["env"] = None
    if notes is not None:
        notes.append(
            f"`env` in data ({type(saved).__name__} {shown(saved)}) is information only: no environment "
            "is made from an archive. Pass `env=` to give the model one."
        )


def drop_her_wrapper_class(data: dict[str, Any], notes: list[str]) -> None:
    """SB3 1.0's ``HER`` wrapped a model and saved its class as ``model_class`` (the RL Zoo's
    HER agents hold ``SAC``); no SB3 since reads it. A model class is never set on a model
    (SB3 would construct it from there), so it is left out, with a note."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    saved = data.get("model_class")
    if isinstance(saved, type) and issubclass(saved, BaseAlgorithm):
        del data["model_class"]
        notes.append(
            f"`model_class` ({saved.__name__}) is what SB3 1.0's HER wrapper saved; no SB3 since reads it, "
            "so it was left out."
        )


#: ``HerReplayBuffer`` arguments of SB3 1.x that SB3 2.0 removed: ``online_sampling`` (2.0
#: always samples online) and ``max_episode_length`` (2.0 keeps each episode's bounds itself).
_OLD_HER_ARGUMENTS = ("online_sampling", "max_episode_length")


def drop_old_her_arguments(data: dict[str, Any], notes: list[str], archive: Any) -> None:
    """SB3 1.x's HER agents (the RL Zoo's published FetchReach and PandaReach TQC and SAC) saved
    ``replay_buffer_kwargs`` with ``online_sampling`` (and possibly ``max_episode_length``),
    which SB3 2.0's ``HerReplayBuffer`` no longer takes: SB3 2.x's own ``load`` stops at a
    ``TypeError``. They are left out, with a note; ``online_sampling=False`` (virtual
    transitions stored in the buffer) has no SB3 2.x equivalent, so that one also warns.
    Only what the installed buffer class does not name is left out."""
    buffer = her_buffer_class(data)
    saved = data.get("replay_buffer_kwargs")
    if buffer is None or not isinstance(saved, dict):
        return
    taken = inspect.signature(buffer).parameters  # its constructor's
    dropped = [name for name in _OLD_HER_ARGUMENTS if name in saved and name not in taken]
    if not dropped:
        return
    data["replay_buffer_kwargs"] = {k: v for k, v in saved.items() if k not in dropped}
    listed = ", ".join(f"`{name}={shown(saved[name])}`" for name in dropped)
    notes.append(
        f"`replay_buffer_kwargs` held {listed}, arguments of SB3 1.x's HerReplayBuffer that SB3 2.0 removed "
        "(it always samples goals online); they were left out."
    )
    if "online_sampling" in dropped and saved["online_sampling"] is not True:
        warnings.warn(
            ZipsaveWarning(
                f"archive `{archive}`, member `data`, key `replay_buffer_kwargs`: the model was trained with "
                f"`online_sampling={shown(saved['online_sampling'])}` (HER transitions stored in the buffer), which "
                "SB3 2.x no longer has; "
                "its buffer samples goals online. The weights are the saved ones."
            ),
            stacklevel=4,
        )


def check_her_env(cls: type, data: dict[str, Any], archive: Any) -> None:
    """A HER model is built with an environment (SB3 asserts one: its buffer asks the env for
    ``compute_reward``); without ``env=`` say so, naming the fix, rather than blaming ``data``."""
    buffer = her_buffer_class(data)
    if buffer is not None:
        raise DecodeError(
            f"holds a {cls.__name__} model that samples with `{buffer.__name__}`, which SB3 builds only with an "
            "environment.",
            archive=archive,
            member=_format.DATA,
            key="replay_buffer_class",
            hint=f"Pass one with the saved spaces and a `compute_reward`: `{cls.__name__}.load(path, env=env)` or "
            f"`zipsave.load(path, cls={cls.__name__}, env=env)`.",
        )


def restore_checks(src: Any, model: Any, data: dict[str, Any], given: Any) -> dict[str, Any]:
    """``data`` to set on a live SB3 ``model`` (:func:`zipsave.restore`), checked as ``load``
    checks it. A key naming a live part of the model (its env, policy, buffers, logger: what
    SB3 never saves) or a space other than the model's, and a value its first ``learn`` cannot
    use, or a schedule or array of another kind than the model's (:func:`live_kind_problems`),
    are skipped (the model keeps its own); a class or noise SB3 would call unsafely is
    refused. An archive set ``env`` to a string, ``policy`` to a dict (left so when its state
    dict then failed), ``replay_buffer`` to None or ``lr_schedule`` to a class on the model."""
    parts = model._get_torch_save_params()
    live = {*model._excluded_save_params(), *(name.split(".")[0] for names in parts for name in names)}
    checked = {k: v for k, v in data.items() if k not in given}
    upgrade_old_train_freq(checked, src.report.notes)
    problems = {k: "is a live part of the model, which SB3 never saves" for k in checked if k in live}
    with_env = getattr(model, "env", None) is not None  # then n_envs is its env's
    for key in ("observation_space", "action_space", *(("n_envs",) if with_env else ())):
        if key in checked and key not in problems and not same(checked[key], getattr(model, key, None)):
            problems[key] = f"is {shown(checked[key])}, where the model has {shown(getattr(model, key, None))}"
    problems.update((k, p) for k, p in live_kind_problems(model, checked).items() if k not in problems)
    for key, problem in problems.items():
        value = checked.pop(key)
        if value is not None or key not in live:  # SB3 1.x saved `env=None`: nothing to say
            error = DecodeError(f"{problem}; the model keeps its own.", member=_format.DATA, key=key)
            src.record_skip(_format.DATA, key, str(type(value)), error)
    check_data(checked, archive=src.name, references=src.policy.references)
    integral_arguments(type(model), checked, src.report.notes)
    for key, problem in unusable_values(model, checked).items():
        src.record_skip(_format.DATA, key, str(type(checked.pop(key))), DecodeError(problem, key=key))
    if "action_noise" in checked:
        fit_noise(checked, src.report.notes, n_envs=model.n_envs if with_env else None)
    return {**checked, **{k: v for k, v in data.items() if k in given}}


def check_names(cls: type | None, *, data: Any, params: Any, variables: Any, archive: Any) -> None:
    """The names SB3's own ``load``/``set_parameters`` will follow with ``getattr``/``setattr``
    on the model: ``data`` keys, state-dict names and loose-variable names."""
    if cls is None:
        from stable_baselines3.common.base_class import BaseAlgorithm

        cls = BaseAlgorithm
    for member, names in ((_format.DATA, data), (None, params), (_format.PYTORCH_VARIABLES, variables)):
        for name in names or ():
            where = {"archive": archive, "member": member if member else f"{name}{_format.PTH_SUFFIX}", "key": name}
            if not isinstance(name, str):
                raise DecodeError(f"has the name {name!r}, which is not a string.", **where)
            if member == _format.DATA and "." in name:
                check_name(name, path=name, **where)  # set whole (`__dict__.update`), never followed
                continue
            check_path(cls, name, **where)


def check_data(data: dict[str, Any], *, archive: Any, references: tuple = ()) -> None:
    """Refuse values SB3 would call or compare unsafely: a class outside the slot that may hold
    it, a class admitted only as a reference (``cls=``'s own) anywhere but ``policy_class``, an
    action noise that is not one, a space that is not plain data.

    Raises
    ------
    UnsafeGlobalError
        A reference-only class where SB3 would call it.
    DecodeError
        A value of the wrong kind in a slot SB3 calls.
    """

    def where(key: str) -> dict[str, Any]:
        return {"archive": archive, "member": _format.DATA, "key": key}

    for key, spec in _DATA_BASES.items():
        value = data.get(key)
        if value is not None and not (isinstance(value, type) and issubclass(value, _base(spec))):
            raise DecodeError(f"must be a {spec[1]} subclass, found {_describe(value)}.", **where(key))
    for key in _DATA_DICTS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise DecodeError(f"must be a dict of keyword arguments, found {_describe(data[key])}.", **where(key))
    check_policy_arguments(data.get("policy_kwargs") or {}, **where("policy_kwargs"))
    for key in _CALLED:
        if isinstance(data.get(key), type):
            raise DecodeError(f"is a schedule SB3 calls, found the class {_describe(data[key])}.", **where(key))
    _check_noise(data.get("action_noise"), where("action_noise"))
    for key in ("observation_space", "action_space"):
        if data.get(key) is not None:
            problem = space_problem(data[key])
            if problem:
                raise DecodeError(f"is not a plain gymnasium space: {problem}.", **where(key))
    check_noise(data.get("action_noise"), data.get("action_space"), data.get("n_envs"), where("action_noise"))
    _check_classes(data, references, where)


def check_policy_arguments(kwargs: dict[str, Any], **where: Any) -> None:
    """The classes a policy constructor calls (``features_extractor_class``, ``optimizer_class``,
    ``activation_fn``) derive from what SB3 expects there, the keyword arguments it passes on
    (``optimizer_kwargs``...) are dicts, and its ``lr_schedule`` is no class."""
    for name in _POLICY_KWARG_DICTS:
        if kwargs.get(name) is not None and not isinstance(kwargs[name], dict):
            raise DecodeError(
                f"`{name}` must be a dict of keyword arguments, found {_describe(kwargs[name])}.", **where
            )
    for name, spec in _POLICY_KWARG_BASES.items():
        value = kwargs.get(name)
        if value is not None and not (isinstance(value, type) and issubclass(value, _base(spec))):
            raise DecodeError(f"`{name}` must be a {spec[1]} subclass, found {_describe(value)}.", **where)
    if isinstance(kwargs.get("lr_schedule"), type):
        raise DecodeError(
            f"`lr_schedule` is a schedule SB3 calls, found the class {_describe(kwargs['lr_schedule'])}.", **where
        )


def _check_noise(noise: Any, where: dict[str, Any]) -> None:
    """An action noise is one of SB3's, whose attributes are numbers and arrays (SB3 deep-copies
    and calls it); a vectorized one holds noises of the same kind."""
    if noise is None:
        return
    from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise

    if not isinstance(noise, ActionNoise):
        raise DecodeError(f"must be an SB3 ActionNoise, found {_describe(noise)}.", **where)
    state = vars(noise)
    if any(not isinstance(k, str) or k.startswith("__") for k in state):
        raise DecodeError(f"has attributes {sorted(map(str, state))}, which no action noise has.", **where)
    if isinstance(noise, VectorizedActionNoise):
        inner = [state.get("_base_noise"), *(state.get("_noises") or ())]
        if any(isinstance(n, VectorizedActionNoise) or not isinstance(n, ActionNoise) for n in inner):
            raise DecodeError("a VectorizedActionNoise must hold plain action noises.", **where)
        for n in inner:
            _check_noise(n, where)
        return
    for name, value in state.items():
        if isinstance(value, type) and issubclass(value, np.generic):
            continue  # the dtype it draws in (`numpy.float32`)
        if isinstance(value, (type, torch.nn.Module)) or callable(value):
            raise DecodeError(
                f"holds `{name}` = {_describe(value)}; an action noise holds numbers and arrays.", **where
            )


def _check_classes(data: dict[str, Any], references: tuple, where: Any) -> None:
    """A class admitted only as a reference may be ``policy_class`` and nothing else; no model
    class may be anywhere (SB3 would construct it: a model built from an ``env`` string makes
    that environment)."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    refs = {id(obj): name for name, obj in references}
    # Every value, however many: each container is expanded once, so the walk is linear in
    # what the decode built (a budget that stopped early would pass a class past its end).
    seen: set[int] = set()
    for key, top in data.items():
        stack = [top] if key != "policy_class" else []
        while stack:
            value = stack.pop()
            if id(value) in refs:
                raise UnsafeGlobalError(
                    refs[id(value)],
                    hint="It was admitted only because the load named it (`cls=` and its policies), as the "
                    "model's `policy_class`; SB3 would call it from here.",
                    **where(key),
                )
            if isinstance(value, type):
                if issubclass(value, BaseAlgorithm):
                    raise DecodeError(
                        f"holds the model class {_describe(value)}, which SB3 would construct.", **where(key)
                    )
                continue
            if id(value) in seen or isinstance(value, (str, bytes, int, float, torch.Tensor)):
                continue
            seen.add(id(value))
            if isinstance(value, dict):
                stack.extend(value.values())
                stack.extend(value.keys())
            elif isinstance(value, (list, tuple, set, frozenset)):
                stack.extend(value)


def _describe(value: Any) -> str:
    if isinstance(value, type):
        return f"`{value.__module__}.{value.__qualname__}`"
    return f"a {type(value).__name__}"
