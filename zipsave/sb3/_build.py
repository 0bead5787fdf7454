"""Rebuilding an SB3 algorithm from an archive the way ``BaseAlgorithm.load`` does, with tensors
read straight into the freshly built policy and optimizers."""

from __future__ import annotations

import typing
import warnings
from typing import Any

import torch

from .. import _format
from .._trust import BY_VALUE_MARK
from .._core import LoadSession, check_data_key, load_state_into, recursive_getattr, set_variable, unwrap
from ..exceptions import ArchiveFormatError, DecodeError, ParameterMismatchError, ZipsaveError, ZipsaveWarning, caller_stacklevel
from ._schedules import NotASchedule, recognise_schedule
from ._checks import check_data, check_names, drop_saved_env
from ._estimate import check_model_size
from ._extras import apply_vec_normalize, matches_any, has_extra, restore_extra, warn_unused_vec_normalize
from ._keys import blame_given, given_values, warn_unknown_keys, warn_unmatched_custom_objects
from ._zoo import with_zoo_schedules

__all__ = ["ARS_WEIGHTS", "build_sb3", "is_ars", "sync_ars_weights"]

#: ``data`` keys without which no SB3 model can be built.
_REQUIRED = ("policy_class", "observation_space", "action_space")
#: Hyper-parameters stored as schedules, with the ``data`` keys that hold them; SB3 < 2.7 pickled
#: them as closures. ``_setup_model`` rebuilds those in ``_REBUILT_FROM_SAVED`` from saved numbers.
_SCHEDULE_GROUPS = {
    "learning_rate": ("learning_rate", "lr_schedule"),
    "clip_range": ("clip_range",),
    "clip_range_vf": ("clip_range_vf",),
    "exploration_schedule": ("exploration_schedule",),
}
_SCHEDULE_KEYS = frozenset(k for keys in _SCHEDULE_GROUPS.values() for k in keys)
_REBUILT_FROM_SAVED = frozenset({"lr_schedule", "exploration_schedule"})
#: ARS's flat copy of its policy's parameters (see sync_ars_weights).
ARS_WEIGHTS = "weights"
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
    src.trust_references(_named_classes(cls))
    env = kwargs.pop("env", None)
    force_reset = kwargs.pop("force_reset", True)
    passed_objects = custom_objects
    passed = given_values(custom_objects, {k: v for k, v in kwargs.items() if k not in _CHECKED})
    custom_objects = with_zoo_schedules(src, custom_objects)  # rl-zoo3 < 2.7 closures, rebuilt safely
    # A key the caller passes by keyword is taken as given, never decoded nor warned about;
    # the keys SB3 cannot do without are reported once, by the error `_check_required` raises.
    given = {**{k: v for k, v in kwargs.items() if k not in _NOT_DATA | _CHECKED}, **(custom_objects or {})}
    quiet = list(_REQUIRED) + ([] if "policy_kwargs" in kwargs else ["policy_kwargs"]) + list(_SCHEDULE_KEYS)
    quiet += [ARS_WEIGHTS] if is_ars(cls) else []
    recovery = _ScheduleRecovery()
    data = src.decode_data("", custom_objects=given, exclude=exclude, quiet=quiet, recover=recovery)
    if data is None:
        raise ArchiveFormatError(
            f"has no `{_format.DATA}` member, so there is no {cls.__name__} to build.",
            archive=src.name,
            hint="Load only the weights with `model.set_parameters(path)` or `zipsave.restore(model, path)`.",
        )
    _check_required(src, cls, data, kwargs)
    drop_saved_env(data, src.report.notes)
    check_data(data, archive=src.name, references=src.policy.references)
    check_names(cls, data=data, params=(), variables=(), archive=src.name)
    _fix_policy_kwargs(src, data, kwargs)
    for key in ("observation_space", "action_space"):
        data[key] = _convert_space(data[key])

    if env is not None:
        env = cls._wrap_env(env, data.get("verbose", 0))
        if has_extra(src, "vec_normalize", exclude):
            env = apply_vec_normalize(src, env)
        check_for_correct_spaces(env, data["observation_space"], data["action_space"])
        if force_reset:
            data["_last_obs"] = None  # SB3 #597: reset before training
        data["n_envs"] = env.num_envs
    else:
        if has_extra(src, "vec_normalize", exclude):
            warn_unused_vec_normalize(src)

    try:
        model = cls(policy=data["policy_class"], env=env, device=src.device, _init_setup_model=False)
    except Exception as err:
        raise DecodeError(
            f"{cls.__name__} cannot be built from this archive's data ({type(err).__name__}: {err}).",
            archive=src.name,
            member=_format.DATA,
            hint=_policy_hint(cls, data["policy_class"]),
        ) from err
    for key in data:  # what `__dict__.update` writes must not replace the model's code
        check_data_key(model, key, archive=src.name, member=_format.DATA, key=key)
    check_model_size(cls, {**vars(model), **data, **kwargs}, src, limits=src.limits)  # before SB3 allocates it
    try:
        model.__dict__.update(data)
        model.__dict__.update(kwargs)
        model._setup_model()
    except Exception as err:
        blamed = blame_given(cls, err, passed, _raw_data(src), src.name) if passed else None
        if blamed is not None:
            raise blamed from err
        raise DecodeError(
            f"{cls.__name__} cannot be built from this archive's data ({type(err).__name__}: {err}).",
            archive=src.name,
            member=_format.DATA,
            hint=_policy_hint(cls, data["policy_class"]),
        ) from err

    warn_unmatched_custom_objects(passed_objects, _raw_data(src) or data, src.name)
    warn_unknown_keys(model, data, src.name, given=set(given))
    _warn_lost_schedules(src, model, recovery.why)
    _load_parameters(src, model, exclude)
    if is_ars(cls):
        sync_ars_weights(model)
        if any(e.key == ARS_WEIGHTS and e.member == _format.DATA for e in src.report.skipped):
            src.report.notes.append(f"`{ARS_WEIGHTS}` (a pickled tensor) was not decoded; ARS took it from the loaded policy.")
    _load_variables(src, model, exclude)
    if has_extra(src, "replay_buffer", exclude):
        restore_extra(src, model, "replay_buffer")
    if model.use_sde:
        model.policy.reset_noise()  # sample the gSDE matrix on the right device (SB3 #44)
    return model


def _raw_data(src: LoadSession) -> dict[str, Any] | None:
    """The archive's ``data`` as JSON (read again: the decode kept only the values)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an edited `data` was reported by the decode
        try:
            raw = src.read_json(_format.DATA)
        except Exception:  # noqa: BLE001 - the decode reported it
            return None
    return raw if isinstance(raw, dict) else None


class _ScheduleRecovery:
    """``recover=`` of the decode: SB3's own schedule closures become schedule objects; why the
    others were not recognised is kept for the warning."""

    def __init__(self) -> None:
        self.why: dict[str, str] = {}

    def __call__(self, key: str, value: Any) -> Any:
        if key not in _SCHEDULE_KEYS:
            raise NotASchedule(key)
        try:
            return recognise_schedule(value)
        except NotASchedule as err:
            self.why[key] = str(err)
            raise


def _warn_lost_schedules(src: LoadSession, model: Any, why: dict[str, str]) -> None:
    """One warning per hyper-parameter whose saved schedule could not be decoded, saying what
    the model uses instead. A schedule SB3 rebuilds from saved numbers (``lr_schedule`` from
    ``learning_rate``, DQN's ``exploration_schedule``) loses nothing: a report note only."""
    skipped = {e.key: e for e in src.report.skipped if e.member == _format.DATA and e.key in _SCHEDULE_KEYS}
    for param, keys in _SCHEDULE_GROUPS.items():
        lost = [k for k in keys if k in skipped]
        if not lost or not hasattr(model, param):
            continue
        if set(lost) <= _REBUILT_FROM_SAVED:
            src.report.notes.append(f"`{lost[0]}` could not be decoded; {type(model).__name__} rebuilt it from the saved values.")
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


def is_ars(cls: type) -> bool:
    """sb3-contrib's ARS (and subclasses), without importing sb3-contrib."""
    return any(f"{k.__module__}.{k.__qualname__}" == "sb3_contrib.ars.ars.ARS" for k in cls.__mro__)


def sync_ars_weights(model: Any) -> None:
    """ARS searches around ``weights``, a flat copy of the policy's parameters that
    ``_setup_model`` takes *before* the saved parameters are loaded; unless the policy was zeroed
    (``zero_policy=True``, whose parameters are views of it), ``learn`` would go on from the
    freshly initialised weights and throw the training away (SB3's own ``load`` does). Take the
    copy from the loaded policy. SB3 pickles ``weights`` (a tensor) in ``data``; nothing of it is
    lost when that pickle is refused."""
    model.weights = torch.nn.utils.parameters_to_vector(model.policy.parameters()).detach()


def _named_classes(cls: type) -> list[Any]:
    """The classes the caller named by passing ``cls``: itself, its ``policy_aliases`` and the
    policy base class its ``policy`` attribute is annotated with. Trusted as references only."""
    named: list[Any] = [cls, *getattr(cls, "policy_aliases", {}).values()]
    try:
        base = typing.get_type_hints(cls).get("policy")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve names nothing
        base = None
    if isinstance(base, type):
        named.append(base)
    return named


def _policy_hint(cls: type, policy_class: Any) -> str | None:
    """Say so when the saved policy is not one of ``cls``'s: the usual reason a build fails."""
    bases = tuple(getattr(cls, "policy_aliases", {}).values())
    if bases and isinstance(policy_class, type) and not issubclass(policy_class, bases):
        return (
            f"Its `policy_class` is {policy_class.__name__}, not a {cls.__name__} policy; "
            "was it saved by another algorithm?"
        )
    return None



def _skipped_causes(src: LoadSession) -> dict[str, str]:
    return {entry.key: entry.cause for entry in src.report.skipped if entry.member == _format.DATA and entry.key}


def _check_required(src: LoadSession, cls: type, data: dict[str, Any], kwargs: dict[str, Any]) -> None:
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
            hint="Provide the value with `custom_objects={" + ", ".join(f"{k!r}: ..." for k in lost) + "}`"
            + (", or trust the global named above with `trusted=[...]`." if _trust_helps(skipped, lost) else "."),
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


def _trust_helps(causes: dict[str, str], keys: list[str]) -> bool:
    """False when a key holds a class stored as code, which no ``trusted=`` admits."""
    return not any(BY_VALUE_MARK in causes[key] for key in keys)


def _keys(keys: list[str]) -> str:
    return ", ".join(f"`{k}`" for k in keys)


def _fix_policy_kwargs(src: LoadSession, data: dict[str, Any], kwargs: dict[str, Any]) -> None:
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


def _load_parameters(src: LoadSession, model: Any, exclude: list[str]) -> None:
    """``set_parameters(params, exact_match=True)``, reading each tensor into the model in place."""

    expected = [n for n in model._get_torch_save_params()[0] if not matches_any(n, exclude)]
    saved = [
        name[: -len(_format.PTH_SUFFIX)]
        for name in src.reader.names()
        if "/" not in name
        and name.endswith(_format.PTH_SUFFIX)
        and name not in (_format.PYTORCH_VARIABLES, _format.LEGACY_PYTORCH_VARIABLES)
        and not matches_any(name[: -len(_format.PTH_SUFFIX)], exclude)
    ]
    if set(saved) != set(expected):
        raise ParameterMismatchError(
            f"holds state dicts {sorted(saved)}, but {type(model).__name__} has {sorted(expected)}.",
            archive=src.name,
            hint="Was it saved from another algorithm? Leave members out with `exclude=[...]`.",
        )
    for name in saved:
        member = name + _format.PTH_SUFFIX
        target = unwrap(recursive_getattr(model, name))
        try:
            load_state_into(src, member, target, True)
        except ParameterMismatchError as err:
            if not _load_legacy(src, name, target, err):
                raise
        except ZipsaveError as err:
            src.skip(member, None, None, err)


def _load_legacy(src: LoadSession, name: str, target: Any, err: ParameterMismatchError) -> bool:
    """SB3's shims for archives of older SB3 versions; True when one applied."""

    member = name + _format.PTH_SUFFIX
    if isinstance(target, torch.nn.Module) and "pi_features_extractor" in err.detail and "missing keys" in err.detail:
        # SB3 < 1.7 A2C/PPO had one shared features extractor (SB3 #1233).
        load_state_into(src, member, target, False)
        warnings.warn(
            ZipsaveWarning(
                f"archive `{src.name}`: member `{member}` comes from SB3 < 1.7 (no separate "
                "`pi_features_extractor`); loaded with `exact_match=False`. Save the model again to "
                "update the archive."
            ),
            stacklevel=caller_stacklevel(),
        )
        return True
    if isinstance(target, torch.nn.Module) and "action_net.0." in err.detail:
        # sb3-contrib < 1.7 ARS linear policies: `action_net` was one Linear, now a Sequential
        # (sb3-contrib's ARS.set_parameters renames the same keys; its PR #122).
        tree, _ = src.load_tensors(member)
        renamed = {f"action_net.{p}": f"action_net.0.{p}" for p in ("weight", "bias")}
        if not (isinstance(tree, dict) and any(k in tree for k in renamed)):
            return False
        tree = {renamed.get(k, k): v for k, v in tree.items()}
        try:
            target.load_state_dict(tree, strict=True)
        except RuntimeError:
            return False  # not this case after all: the original mismatch stands
        warnings.warn(
            ZipsaveWarning(
                f"archive `{src.name}`: member `{member}` comes from sb3-contrib < 1.7 (ARS linear policy "
                "with `action_net.weight`); loaded as `action_net.0.weight`. Save the model again to update the "
                "archive."
            ),
            stacklevel=caller_stacklevel(),
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
            stacklevel=caller_stacklevel(),
        )
        return True
    return False


def _load_variables(src: LoadSession, model: Any, exclude: list[str]) -> None:

    member = next((m for m in (_format.PYTORCH_VARIABLES, _format.LEGACY_PYTORCH_VARIABLES) if src.has(m)), None)
    if member is None:
        return
    names = model._get_torch_save_params()[1]
    targets = {}
    for name in names:
        try:
            targets[name] = recursive_getattr(model, name)
        except AttributeError:
            pass
    try:
        variables, _ = src.load_tensors(member, targets)
    except ZipsaveError as err:
        src.skip(member, None, None, err)
        return
    for name, value in (variables or {}).items():
        # None: SAC's `log_ent_coef` when the entropy coefficient was fixed.
        if value is None or matches_any(name, exclude) or value is targets.get(name):
            continue
        set_variable(model, name, value, archive=src.name, member=member, key=name)
