"""What an SB3 algorithm needs from an archive's ``data`` to be rebuilt, in one table, and the one
set of messages every door (``zipsave.load(cls=...)``, ``Algo.load`` under ``install()``) gives
when it is not there."""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from typing import Any

from .. import _format
from .._core import LoadSession
from .._trust import BY_VALUE_MARK
from ..exceptions import AlgorithmMismatchError, ArchiveFormatError, DecodeError, named_key
from ._guess import algorithm_of_policy, import_line, suggest_algorithm

__all__ = [
    "ARS_WEIGHTS",
    "build_error",
    "OBJECT_CLASS",
    "OBJECT_VALUE",
    "REBUILT_FROM_SAVED",
    "SCHEDULE_GROUPS",
    "SCHEDULE_KEYS",
    "Needs",
    "check_required",
    "foreign_policy",
    "is_ars",
    "named_classes",
    "needs",
    "policy_hint",
]

#: ``data`` keys without which no SB3 model can be built.
_ALWAYS = ("policy_class", "observation_space", "action_space")
#: Hyper-parameters stored as schedules, with the ``data`` keys that hold them; SB3 < 2.7 pickled
#: them as closures. ``_setup_model`` rebuilds those in ``REBUILT_FROM_SAVED`` from saved numbers.
SCHEDULE_GROUPS = {
    "learning_rate": ("learning_rate", "lr_schedule"),
    "clip_range": ("clip_range",),
    "clip_range_vf": ("clip_range_vf",),
    "exploration_schedule": ("exploration_schedule",),
    "delta_std_schedule": ("delta_std_schedule",),  # sb3-contrib's ARS
}
SCHEDULE_KEYS = frozenset(k for keys in SCHEDULE_GROUPS.values() for k in keys)
REBUILT_FROM_SAVED = frozenset({"lr_schedule", "exploration_schedule"})
#: ARS's flat copy of its policy's parameters, taken from the loaded policy (``sync_ars_weights``).
ARS_WEIGHTS = "weights"
#: ``data`` key naming the class of an object archive (a replay buffer or ``VecNormalize`` that
#: ``save_replay_buffer``/``VecNormalize.save`` wrote under ``install()``).
OBJECT_CLASS = "_zipsave_object_class"
#: ``data`` key of an object archive holding one plain value instead of attributes.
OBJECT_VALUE = "_zipsave_object_value"


@dataclasses.dataclass(frozen=True)
class Needs:
    """What building one algorithm class takes from ``data``.

    ``required``: keys it cannot be built without. ``with_weights``: keys required when saved
    (``policy_kwargs``: the saved weights fit only the saved architecture). ``replaced``: keys
    the load takes from elsewhere once the model is built, never decoded (ARS's ``weights``).
    """

    required: tuple[str, ...] = _ALWAYS
    with_weights: tuple[str, ...] = ("policy_kwargs",)
    replaced: tuple[str, ...] = ()


def is_ars(cls: type) -> bool:
    """sb3-contrib's ARS (and subclasses), without importing sb3-contrib."""
    return any(f"{k.__module__}.{k.__qualname__}" == "sb3_contrib.ars.ars.ARS" for k in getattr(cls, "__mro__", ()))


def needs(cls: type) -> Needs:
    """The one table: every SB3 and sb3-contrib algorithm needs the same keys; ARS also keeps a
    flat copy of its policy's parameters that the load takes from the loaded policy."""
    return Needs(replaced=(ARS_WEIGHTS,)) if is_ars(cls) else Needs()


def named_classes(cls: type) -> list[Any]:
    """The classes the caller named by naming ``cls`` (``zipsave.load(cls=SAC)`` or
    ``SAC.load``): itself, its ``policy_aliases`` and the policy base class its ``policy``
    attribute is annotated with. Trusted as references only."""
    named: list[Any] = [cls, *(p for p in getattr(cls, "policy_aliases", {}).values() if isinstance(p, type))]
    try:
        base = typing.get_type_hints(cls).get("policy")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve names nothing
        base = None
    if isinstance(base, type):
        named.append(base)
    return named


def policy_hint(cls: type, policy_class: Any) -> str | None:
    """Say so when the saved policy is not one of ``cls``'s: the usual reason a build fails."""
    bases = tuple(p for p in getattr(cls, "policy_aliases", {}).values() if isinstance(p, type))
    if bases and isinstance(policy_class, type) and not issubclass(policy_class, bases):
        return (
            f"Its `policy_class` is {policy_class.__name__}, not a {cls.__name__} policy; "
            "was it saved by another algorithm?"
        )
    return None


def foreign_policy(cls: type, policy_class: Any) -> str | None:
    """The algorithm whose policy ``policy_class`` is, when it is not one of ``cls``'s: SB3 builds
    TQC from SAC's archive (``SACPolicy``), SAC from TQC's and PPO from RecurrentPPO's (a subclass
    of PPO's policy), and only their first ``learn`` fails, deep inside. The nearest of its bases
    that is a policy of some algorithm decides: one of ``cls``'s aliases (a user's subclass of
    ``ActorCriticPolicy`` for PPO, TD3's policy for DDPG), or another algorithm's."""
    aliases = tuple(p for p in getattr(cls, "policy_aliases", {}).values() if isinstance(p, type))
    if not aliases or not isinstance(policy_class, type):
        return None
    own = {k.__name__ for k in getattr(cls, "__mro__", ())}
    for base in policy_class.__mro__:
        if base in aliases:
            return None
        algorithm = algorithm_of_policy(base)
        if algorithm is not None:
            return None if algorithm in own or any(issubclass(a, base) for a in aliases) else algorithm
    return None


def build_error(src: LoadSession, cls: type, data: dict[str, Any], raw: Any, err: Exception, door: str) -> DecodeError:
    """The error for ``cls`` failing to build from the archive's values (its constructor or
    ``_setup_model`` raised ``err``): an :class:`AlgorithmMismatchError` naming both algorithms
    when the archive holds another algorithm's model (its policy, or what ``suggest_algorithm``
    reads from ``data``), else a :class:`DecodeError`."""
    cause = f"({type(err).__name__}: {err})"
    saved = suggest_algorithm(raw)
    if saved is not None and saved in {k.__name__ for k in getattr(cls, "__mro__", ())}:
        saved = None  # the archive's own algorithm (or cls subclasses it): not a mismatch
    hint = policy_hint(cls, data.get("policy_class"))
    if saved is None and hint is None:
        return DecodeError(
            f"{cls.__name__} cannot be built from this archive's data {cause}.", archive=src.name, member=_format.DATA
        )
    what = f"a {saved} model" if saved else "a model of another algorithm"
    fix = (
        f"Load it with `{saved}.load(path)` or `zipsave.load(path, cls={saved})` (`{import_line(saved)}`)."
        if saved
        else f"Load it with the algorithm that saved it (`zipsave.load(path, cls=...)`); {door} cannot."
    )
    return AlgorithmMismatchError(
        f"holds {what}; {cls.__name__} cannot be built from it {cause}.",
        archive=src.name,
        member=_format.DATA,
        hint=fix if saved else f"{hint} {fix}",
        saved=saved,
        requested=cls.__name__,
    )


def _keys(keys: list[str]) -> str:
    return ", ".join(f"`{k}`" for k in keys)


def _provide(keys: list[str]) -> str:
    return "Provide the value with `custom_objects={" + ", ".join(f"{k!r}: ..." for k in keys) + "}`"


def _release(version: str) -> tuple[int, ...]:
    # digits bounded: an archive's version of 5 000 digits is past what int() reads from text
    match = re.match(r"(\d{1,9})\.(\d{1,9})(?:\.(\d{1,9}))?", version)
    return tuple(int(part or 0) for part in match.groups()) if match else ()


def _newer_sb3(src: LoadSession) -> str:
    """For an archive a newer SB3 wrote: the value may name what only that version defines."""
    saved = src.saved_versions().get("Stable-Baselines3", "")
    installed = getattr(sys.modules.get("stable_baselines3"), "__version__", "")
    if not installed or not _release(saved) > _release(installed) > ():
        return ""
    return (
        f" The archive was written by Stable-Baselines3 {saved}, newer than the {installed} installed here; if the "
        "value names something that version added, upgrade (`pip install -U stable-baselines3 sb3-contrib`)."
    )


def check_required(src: LoadSession, cls: type, data: dict[str, Any], given: Any) -> None:
    """Name the root cause when a key ``cls`` needs is missing, instead of SB3's ``KeyError``
    later (SB3 #1682) or a policy built with default layers that the weights do not fit.

    Raises
    ------
    DecodeError
        A required key was skipped (its cause, and how to provide or trust it).
    ArchiveFormatError
        A required key is absent: the archive holds no SB3 model (or another kind of file).
    """
    table = needs(cls)
    skipped = {e.key: e.cause for e in src.report.skipped if e.member == _format.DATA and e.key}
    needed = [k for k in table.required if k not in given]
    needed += [k for k in table.with_weights if k in skipped and k not in given]
    lost = sorted(key for key in needed if key not in data and key in skipped)
    absent = sorted(key for key in needed if key not in data and key not in skipped)
    if lost:
        causes = " ".join(f"`{key}`: {named_key(skipped[key], key)}" for key in lost)
        trust = not any(BY_VALUE_MARK in skipped[key] for key in lost)  # a class stored as code: no trust helps
        raise DecodeError(
            f"cannot build {cls.__name__}: {_keys(lost)} could not be decoded and {cls.__name__} needs "
            f"{'it' if len(lost) == 1 else 'them'} ({causes})",
            archive=src.name,
            member=_format.DATA,
            key=lost[0] if len(lost) == 1 else None,
            hint=_provide(lost)
            + (
                ", or trust the global named above with `trusted=[...]` (`zipsave.sb3.install(trusted=[...])` "
                "for SB3's own `load`)."
                if trust
                else "."
            )
            + _newer_sb3(src),
        )
    if absent:
        if OBJECT_CLASS in data or OBJECT_VALUE in data:
            raise ArchiveFormatError(
                "holds a replay buffer or VecNormalize saved on its own (`save_replay_buffer`, `VecNormalize.save`): "
                f"its `data` has no {_keys(absent)}.",
                archive=src.name,
                member=_format.DATA,
                hint="Read it with `model.load_replay_buffer(path)` or `VecNormalize.load(path, venv)`.",
            )
        if not _holds_sb3_keys(data) and src.has(_format.VERSION) and not src.has(_format.INIT):
            raise ArchiveFormatError(
                f"holds an app state saved by `zipsave.save` (no SB3 model): its `data` has no {_keys(absent)}.",
                archive=src.name,
                member=_format.DATA,
                hint="Read it with `zipsave.load(path)` (a dict of its values and state dicts), or into live "
                "objects with `zipsave.restore(app_state, path)`.",
            )
        raise ArchiveFormatError(
            f"holds no {_keys(absent)}, which {cls.__name__} needs; is this an SB3 model archive?",
            archive=src.name,
            member=_format.DATA,
            key=absent[0] if len(absent) == 1 else None,
            hint=_provide(absent) + ".",
        )
    defaults = sorted(set(skipped) - set(given) - set(needed))
    if defaults:
        src.report.notes.append(
            f"{_keys(defaults)} could not be decoded; {cls.__name__} uses what its constructor and "
            "`_setup_model` set instead. Pass them as keyword arguments to `load` to choose."
        )


def _holds_sb3_keys(data: dict[str, Any]) -> bool:
    """Whether ``data`` holds any of the keys every SB3 model saves (its policy class and spaces)."""
    return any(key in data for key in ("policy_class", "observation_space", "action_space"))
