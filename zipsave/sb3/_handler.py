"""The SB3 handler: how the core collects, rebuilds and trusts Stable-Baselines3 algorithms
(and sb3-contrib's, which share ``BaseAlgorithm``'s hooks). What it trusts is known when it is
imported; what saves, builds and restores models (and torch) is imported when a method needs it,
so that inspecting an SB3 archive, which asks for the allowlist alone, imports no torch."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from .. import _core, _format, sb3  # sb3: its modules that build models (`sb3._build`), on first use
from .._printable import visible
from .._registry import Handler
from ..exceptions import ArchiveFormatError, ZipsaveWarning, caller_stacklevel
from ._allowlist import SB3_ALLOWLIST
from ._allowlist_contrib import SB3_CONTRIB_ALLOWLIST
from ._guess import import_line, suggest_algorithm
from ._noise import NOISE_CHECKS
from ._schedule_check import SCHEDULE_CHECKS
from ._schedules import closures_in, rebuilt_on_load, schedule_texts

if TYPE_CHECKING:
    from .._core import LoadSession, Parts

__all__ = ["SB3Handler"]


def _suggested(session: LoadSession, folder: str) -> str | None:
    """The algorithm the archive's ``data`` names by its policy class, if it can tell."""
    try:  # the session's one read of `data`: an edited member is reported once, whoever reads first
        return suggest_algorithm(session.read_json(_format.join(folder, _format.DATA)))
    except Exception:  # noqa: BLE001 - only a suggestion
        return None


def _is_sb3_like(obj: Any) -> bool:
    """SB3's save hooks, without importing SB3: ``BaseAlgorithm`` and anything shaped like it."""
    return hasattr(obj, "_get_torch_save_params") and hasattr(obj, "_excluded_save_params")


def _warn_absent(obj: Any, include: set[str]) -> None:
    """``include=["replay_bufer"]`` (a name the model has no attribute of) saves nothing for it:
    SB3 is silent, and the run learns that the buffer is missing when it resumes."""
    known = [*obj.__dict__, *sb3._extras.EXTRAS]
    for name in sorted(n for n in include if n.split(".")[0] not in known):
        import difflib  # only for a name that is missing

        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        warnings.warn(
            ZipsaveWarning(
                visible(
                    f"include={[name]!r}: {type(obj).__name__} has no attribute `{name}`, so nothing was saved for it"
                    + (f" (did you mean `{close[0]}`?)." if close else ".")
                )
            ),
            stacklevel=caller_stacklevel(),
        )


class SB3Handler(Handler):
    """Stable-Baselines3 algorithms: SB3's own rules decide what is saved (its hooks), and
    ``load(path, cls=PPO)`` rebuilds them as ``PPO.load`` does."""

    name = "sb3"
    libraries = ("stable_baselines3", "sb3_contrib", "rl_zoo3", "zipsave.sb3")
    markers = (_format.SB3_VERSION,)
    data_keys = ("policy_class",)  # zipsave's own SB3 archives have no version member; their data names the policy
    allowlist = SB3_ALLOWLIST | SB3_CONTRIB_ALLOWLIST
    value_checks = {**NOISE_CHECKS, **SCHEDULE_CHECKS}  # what a first call needs, checked once a pickle is read

    def claims(self, obj: Any) -> bool:
        return not isinstance(obj, _core.Component) and not isinstance(obj, type) and _is_sb3_like(obj)

    def collect(self, obj: Any, *, exclude: set[str], include: set[str]) -> Parts:
        """SB3's rules (``BaseAlgorithm.save``): its hooks decide what is torch-saved.
        ``include`` may also name the extras SB3 keeps in separate pickles (:data:`EXTRAS`)."""
        extras = sb3._extras.collect_extras(obj, include)
        _warn_absent(obj, include)
        include = include - set(sb3._extras.EXTRAS)
        state_names, var_names = obj._get_torch_save_params()
        excluded = (set(obj._excluded_save_params()) | exclude) - include
        for name in list(state_names) + list(var_names):
            excluded.add(name.split(".")[0])
        data = {
            k: v
            for k, v in obj.__dict__.items()
            if k not in excluded and not k.startswith(_core.ALWAYS_EXCLUDED_PREFIXES)
        }
        state = [(name, _core.unwrap(_core.recursive_getattr(obj, name))) for name in state_names]
        variables = {name: _core.recursive_getattr(obj, name) for name in var_names}
        return _core.Parts(
            data,
            state,
            variables,
            list(extras),
            encoder_options={"stand_in": sb3._extras.sb3_stand_in},
            rebuilt_on_load=rebuilt_on_load,
        )

    def builds(self, cls: type) -> bool:
        return isinstance(cls, type) and not issubclass(cls, _core.Component) and hasattr(cls, "_setup_model")

    def recognises(self, session: LoadSession, folder: str) -> bool:
        if session.has(_format.SB3_VERSION):
            return True
        member = _format.join(folder, _format.DATA)
        if not session.has(member):
            return False
        raw = session.read_json(member)  # read once per load: the decode reuses it
        return isinstance(raw, dict) and "policy_class" in raw and session.has(_format.join(folder, "policy.pth"))

    def build(
        self,
        session: LoadSession,
        folder: str,
        *,
        cls: Any,
        custom_objects: dict | None,
        exclude: list[str],
        overrides: dict[str, Any],
    ) -> Any:
        if cls is None:
            name = _suggested(session, folder)
            example = (
                f"`{import_line(name)}` and `zipsave.load(path, cls={name}, env=env)`"
                if name and " " not in name
                else "`zipsave.load(path, cls=PPO, env=env)`"
            )
            raise ArchiveFormatError(
                "holds a Stable-Baselines3 model"
                + (f" ({name}, by its policy class)" if name else "")
                + ", and zipsave builds one only from the class you name.",
                archive=session.name,
                hint=f"Pass it: {example}, or read the parts with `zipsave.load_archive(path)`.",
            )
        return sb3._build.build_sb3(session, cls, custom_objects=custom_objects, exclude=exclude, overrides=overrides)

    def known_values(self, session: LoadSession, obj: Any, folder: str) -> dict[str, Any]:
        """SB3's and the RL Zoo's schedule closures, rebuilt without running them (as ``load``)."""
        member = _format.join(folder, _format.DATA)
        if session.policy.allow_pickle or not session.has(member):
            return {}
        try:
            raw = session.read_json(member)  # read once per load: the decode reuses it
        except Exception:  # noqa: BLE001 - the decode that follows reports the cause
            return {}
        return closures_in(raw)

    def describe_values(self, session: Any, folder: str) -> dict[str, str]:
        """SB3's and the RL Zoo's schedules that :meth:`known_values` rebuilds, said in words from
        the same recognition (``constant 0.0003``), importing neither SB3 nor torch."""
        member = _format.join(folder, _format.DATA)
        if not session.has(member):
            return {}
        try:
            raw = session.read_json(member)
        except Exception:  # noqa: BLE001 - the tool reports an unreadable `data` itself
            return {}
        return schedule_texts(raw)

    def checked_data(self, session: LoadSession, obj: Any, data: dict[str, Any], given: Any) -> dict[str, Any]:
        """What ``load`` checks of ``data``, for a live model (``_checks.restore_checks``)."""
        return sb3._checks.restore_checks(session, obj, data, given)

    def restore_component(self, session: LoadSession, obj: Any, name: str) -> bool:
        if name not in sb3._extras.EXTRAS or not hasattr(obj, "_setup_model"):
            return False
        sb3._extras.restore_extra(session, obj, name, in_place=True)  # fills the live model's own buffer / wrapper
        return True

    def describe_mismatch(self, session: LoadSession, obj: Any, folder: str) -> tuple[str, str] | None:
        """A restore of another algorithm's archive (a SAC's into a PPO, a PPO's into an A2C: the
        same state dicts, and the first ``learn`` failed): the algorithm its ``data`` names by the
        policy class, unless ``obj``'s class is it or derives from it."""
        name = _suggested(session, folder)
        own = {k.__name__ for k in type(obj).__mro__}
        if name is None or " " in name or name in own or (name == "DDPG" and "TD3" in own):
            return None  # DDPG is TD3 with `policy_delay=1`, which a TD3 may have too
        return (
            f"{'an' if name[:1] in 'AEIOU' else 'a'} {name} model",
            f"Restore it into a model of {name}, or load it as a new model: `{name}.load(path)` or "
            f"`zipsave.load(path, cls={name})` (`{import_line(name)}`). To start this model from its "
            f"weights on purpose, copy the policy's: `model.policy.load_state_dict({name}.load(path)"
            ".policy.state_dict())`.",
        )
