"""The values of an SB3 archive's ``data`` that the model's first ``learn`` calls with: each of
the kind SB3 computes with there (a number, a ``TrainFreq``, an integer where SB3 takes a size
or a count), old spellings made today's, and the rest skipped before ``__dict__.update``."""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np

from .._printable import shown

__all__ = [
    "her_buffer_class",
    "integral_arguments",
    "live_kind_problems",
    "unusable_values",
    "upgrade_old_train_freq",
    "whole_number_keys",
]

#: The least value SB3 computes with for a size or a count, with the class that uses it so (its
#: name in the model's class hierarchy): a rollout of ``n_steps=0`` leaves ``collect_rollouts``'
#: ``new_obs`` unbound, ``n_epochs=0`` PPO's ``approx_kl_divs``, a ``batch_size`` below 1 is no
#: batch (numpy's ``size=`` and PPO's reshape refuse it), ``policy_delay`` and SAC's
#: ``target_update_interval`` are taken modulo (``ZeroDivisionError`` at 0; DQN saves its own
#: clamped to 1 already), and a ``deque(maxlen=stats_window_size)`` takes no negative length.
#: Where SB3 gives values below these a meaning (``gradient_steps=-1``, ``learning_starts``,
#: ``sde_sample_freq=-1``, an off-policy ``n_steps`` of 1 or less) it is not listed.
LEAST: dict[str, tuple[int, str]] = {
    "n_steps": (1, "OnPolicyAlgorithm"),
    "n_epochs": (1, "BaseAlgorithm"),
    "batch_size": (1, "BaseAlgorithm"),
    "policy_delay": (1, "BaseAlgorithm"),
    "target_update_interval": (1, "BaseAlgorithm"),
    "stats_window_size": (0, "BaseAlgorithm"),
    # sb3-contrib's ARS: n_delta=0 indexes an empty population (IndexError), n_top=0 divides the
    # step by 1e-6 and makes the weights NaN
    "n_delta": (1, "ARS"),
    "n_top": (1, "ARS"),
}

#: The least float SB3 computes with where it asserts one or takes a root, and whether it may
#: be equal: PPO's ``_setup_model`` asserts ``clip_range_vf > 0`` of a number (the whole load
#: failed), TRPO's step is ``sqrt(2 * target_kl / ...)`` (NaN weights below 0).
FLOAT_LEAST: dict[str, tuple[float, bool, str]] = {
    "clip_range_vf": (0.0, False, "PPO"),
    "target_kl": (0.0, True, "TRPO"),
}

#: Counts SB3 derives from another in the constructor, which ``__dict__.update`` sets apart:
#: ARS's ``pop_size = 2 * n_delta`` (``learn`` evaluates ``pop_size`` candidates and steps the
#: environments only there, so ``pop_size=0`` never finished). A pair that disagrees is skipped
#: together, so the model keeps its own.
DERIVED: dict[str, tuple[str, int]] = {"pop_size": ("n_delta", 2)}

#: Float arguments SB3 reads only as a bound (``clip_grad_norm_``'s ``max_norm``, PPO's early
#: stop at ``target_kl``, TD3's noise clamp), where ``+inf`` means no bound. Every other float
#: argument is a discount, rate, coefficient or scale that SB3 multiplies by: an infinity there
#: makes the losses and then the weights NaN at the first ``train``.
BOUNDS = frozenset({"max_grad_norm", "target_kl", "target_noise_clip"})

#: What a set-up model calls at every ``train`` (its schedules): ``_setup_model`` makes each a
#: callable from the saved number, which a restore into a live model never runs.
CALLED_SCHEDULES = ("lr_schedule", "clip_range", "clip_range_vf", "exploration_schedule")


def her_buffer_class(data: dict[str, Any]) -> type | None:
    """The ``replay_buffer_class`` of ``data`` where it is SB3's ``HerReplayBuffer`` or a subclass."""
    from stable_baselines3 import HerReplayBuffer

    saved = data.get("replay_buffer_class")
    return saved if isinstance(saved, type) and issubclass(saved, HerReplayBuffer) else None


def upgrade_old_train_freq(data: dict[str, Any], notes: list[str]) -> None:
    """SB3 before 1.0 (the RL Zoo's published SAC agents) saved ``train_freq=-1`` with
    ``n_episodes_rollout=k`` to collect ``k`` episodes per rollout; SB3 1.0 spells that
    ``train_freq=(k, "episode")``, and SB3 2.x's ``learn`` asserts a frequency of at least 1 (its
    own load of such an archive fails there). The pair becomes 1.0's spelling, with a note."""
    frequency, episodes = data.get("train_freq"), data.get("n_episodes_rollout")
    if type(frequency) is int and frequency <= 0 and type(episodes) is int and 1 <= episodes < 2**63:
        data["train_freq"] = (episodes, "episode")
        notes.append(
            f"`train_freq={frequency}` with `n_episodes_rollout={episodes}` is what SB3 before 1.0 saved for "
            f"`train_freq=({episodes}, 'episode')`, which the model was given."
        )


def whole_number_keys(cls: type, data: dict[str, Any]) -> list[str]:
    """The ``data`` keys holding an argument ``cls``'s constructor takes as an ``int`` (under its
    name, or with SB3's leading underscore: ``_stats_window_size``). SB3 uses each as a size or
    a count (``np.random.randint(size=batch_size)``, ``range(gradient_steps)``, slices,
    ``deque(maxlen=...)``), which take integers only."""
    taken = inspect.signature(cls).parameters
    whole = {name for name, p in taken.items() if p.annotation in (int, "int")}
    return [key for key in data if key in whole or (key[:1] == "_" and key[1:] in whole)]


def integral_arguments(cls: type, data: dict[str, Any], notes: list[str], *, given: Any = ()) -> None:
    """Give SB3 the integer a whole-number argument stands for (:func:`whole_number_keys`): a
    float of a whole value (``batch_size=64.0``, ``learning_starts=1e4``, which a user may pass
    and SB3 saves as it is) or a bool becomes that ``int``, with a note, before the model's size
    is estimated from it; numpy's ``size=`` and ``range`` refuse either. What is no whole number
    is left to :func:`unusable_values`; the caller's own values (``given``) are taken as they are."""
    changed = []
    for key in whole_number_keys(cls, data):
        value = data[key]
        if key in given or not isinstance(value, (bool, float, np.bool_, np.floating)):
            continue
        number = float(value)
        if math.isfinite(number) and number.is_integer() and abs(number) < 2**63:
            data[key] = int(number)
            if not isinstance(value, (bool, np.bool_)):  # True is 1 to Python already
                changed.append(f"`{key}={shown(value)}`")
    if changed:
        notes.append(
            f"{', '.join(changed)}: a whole number SB3 takes as an integer (a size or a count) was saved as a float; "
            "the model was given the integer."
        )


def unusable_values(model: Any, data: dict[str, Any]) -> dict[str, str]:
    """The ``data`` keys whose values the first ``learn`` of ``model`` (built, not set up) cannot
    use, each with what is wrong. ``__dict__.update`` sets them as they are, and a model loaded
    with ``gamma=Decimal('sNaN')``, ``batch_size`` of text or ``train_freq=0`` failed only at its
    first ``learn`` (``InvalidOperation``, ``TypeError``, SB3's ``AssertionError``):

    * where the fresh model holds a number (``int`` or ``float``) and its constructor takes no
      other kind there (``train_freq``, ``clip_range``: see the signature), a real number (a
      ``bool``, ``int`` of at most 63 bits, ``float`` or numpy number), or ``None`` where it is
      no constructor argument (SB3 1.x saved ``start_time=None``; ``gamma=None`` or
      ``batch_size=None`` failed at the first ``learn`` with ``TypeError``);
    * where the constructor takes an ``int`` (:func:`whole_number_keys`), an integer of at most
      63 bits: ``batch_size=2.5`` or ``gradient_steps=1.5`` failed at the first ``learn`` with
      numpy's or ``range``'s ``TypeError`` (whole floats were made integers before);
    * a size or a count at least what SB3 computes with, a float argument finite or a bound
      (:func:`_range_problems`): ``n_steps=0``, ``policy_delay=0`` or ``gamma=nan`` failed at
      the first ``learn`` (``UnboundLocalError``, ``ZeroDivisionError``, a NaN policy);
    * a float SB3 asserts or roots at least its least (:data:`FLOAT_LEAST`), a count derived from
      another as the constructor derives it (:data:`DERIVED`), a learned ``ent_coef`` as
      ``'auto'`` or ``'auto_<x>'`` of x above 0 (``clip_range_vf=0``, ``ent_coef='auto_nan'``: the
      whole load failed on SB3's assert; ARS's ``pop_size=0``: ``learn`` never finished);
    * what the next step starts from, where the model has environments (:func:`_stale_observations`);
    * ``train_freq``: as SB3 keeps it, a ``TrainFreq`` of an integer of at least 1 and a
      ``TrainFrequencyUnit`` (SB3 1.x saved the integer, or a tuple with ``"step"``/``"episode"``);
    * a ``HerReplayBuffer``'s ``n_sampled_goal`` in ``replay_buffer_kwargs``: a finite number of
      at least 0 (``her_ratio = 1 - 1 / (n_sampled_goal + 1)`` is a fraction of each batch).
    """
    fresh, taken = vars(model), inspect.signature(type(model)).parameters
    numbers = {
        key
        for key, value in fresh.items()
        if type(value) in (int, float)  # and no argument that may be something else (a schedule)
        and (key not in taken or taken[key].annotation in (int, float, "int", "float"))
    }
    arguments = {key for key in numbers if key in taken}  # None where SB3's signature says a number: never
    out = {
        key: f"is {_kind(value)}, where {type(model).__name__} keeps a number"
        for key, value in data.items()
        if key in numbers and (value is not None or key in arguments) and not _number(value, 63)
    }
    for key in whole_number_keys(type(model), data):
        value = data[key]
        if key not in out and not _integer(value):
            out[key] = f"is {_kind(value)}, where {type(model).__name__} keeps an integer (a size or a count)"
    out.update((k, p) for k, p in _range_problems(type(model), data).items() if k not in out)
    for key, (source, factor) in DERIVED.items():
        base = data[source] if source in data and source not in out else fresh.get(source)
        if key in data and key in fresh and key not in out and _integer(base) and data[key] != factor * base:
            out[key] = (
                f"is {_kind(data[key])}, where {type(model).__name__} computes {factor} * {source} = {factor * base}"
            )
            if source in data and source not in out:  # both go: the model keeps its own pair
                out[source] = f"is {_kind(data[source])}, which `{key}` = {_kind(data[key])} does not match"
    if isinstance(data.get("ent_coef"), str) and not _auto_ent_coef(data["ent_coef"]):
        out["ent_coef"] = (
            f"is {_kind(data['ent_coef'])}, where {type(model).__name__} takes 'auto' or 'auto_<initial value above 0>'"
        )
    out.update((k, p) for k, p in _stale_observations(model, data).items() if k not in out)
    if "train_freq" in data and not _train_freq(data["train_freq"]):
        out["train_freq"] = (
            f"is {_kind(data['train_freq'])}, where SB3 keeps a TrainFreq of an integer of at least 1 and a unit"
        )
    kwargs = data.get("replay_buffer_kwargs")
    goals = kwargs.get("n_sampled_goal", 0) if isinstance(kwargs, dict) and her_buffer_class(data) else 0
    if not (_number(goals, 63) and 0 <= goals < math.inf):  # NaN: never
        out["replay_buffer_kwargs"] = (
            f"holds `n_sampled_goal` = {_kind(goals)}, where SB3 keeps a finite number of at least 0"
        )
    return out


def _range_problems(cls: type, data: dict[str, Any]) -> dict[str, str]:
    """The ``data`` keys of ``cls``'s constructor arguments that hold a number out of the range
    SB3 computes with: a size or a count below its least (:data:`LEAST`), a float argument
    (its annotation says ``float``: ``gamma``, a ``learning_rate`` or SAC's ``ent_coef`` given
    as a number) that is NaN, or infinite where it is no bound (:data:`BOUNDS`)."""
    taken = inspect.signature(cls).parameters
    bases = {c.__name__ for c in cls.__mro__}
    out = {}
    for key, value in data.items():
        name = key[1:] if key[:1] == "_" and key[1:] in taken else key
        if name not in taken or isinstance(value, (bool, np.bool_)):
            continue
        least, floor = LEAST.get(name), FLOAT_LEAST.get(name)
        if floor is not None and floor[2] in bases and _number(value, 63) and not _above(float(value), floor):
            bound = "at least" if floor[1] else "above"
            out[key] = f"is {_kind(value)}, where {cls.__name__} computes with a number {bound} {floor[0]}"
        elif least is not None and least[1] in bases and _integer(value) and value < least[0]:
            out[key] = f"is {_kind(value)}, where {cls.__name__} needs a size or count of at least {least[0]}"
        elif isinstance(value, (float, np.floating)) and "float" in str(taken[name].annotation):
            number = float(value)
            if math.isnan(number) or (math.isinf(number) and (name not in BOUNDS or number < 0)):
                out[key] = f"is {_kind(value)}, where {cls.__name__} computes with a finite number"
    return out


#: What the next step of a model's environments starts from, as SB3 keeps it after a step.
_STEP_STATE = ("_last_obs", "_last_original_obs", "_last_episode_starts")


def _stale_observations(model: Any, data: dict[str, Any]) -> dict[str, str]:
    """The ``data`` keys of what the next step starts from that the environments ``model`` holds
    cannot continue, each with what is wrong. ``load(env=..., force_reset=False)`` (and a
    restore into a model with environments) keeps them so that ``learn`` steps on from them:
    ``_last_obs`` and ``_last_original_obs`` hold numbers, one row of the space's size per
    environment (the buffer reshapes a row to the space's shape; SB3 keeps a ``Discrete`` entry
    of a ``Dict`` space as ``(n, 1)`` there), ``_last_obs`` as SB3's ``predict`` takes it
    (``is_vectorized_observation``), and ``_last_episode_starts`` one flag per environment.
    ``_last_original_obs`` is of the space of the model's ``VecNormalize`` where it has one:
    a ``VecFrameStack`` above it stacks ``_last_obs`` only.
    ``_last_obs`` of (3, 7) or (1, 3, 1) where one environment gives (3,) failed at the first
    ``learn`` (SB3's "Unexpected observation shape"). Without environments (or after
    ``force_reset``) nothing steps from them: nothing is checked."""
    from gymnasium import spaces

    env, space = getattr(model, "env", None), getattr(model, "observation_space", None)
    if env is None or not isinstance(space, spaces.Space):
        return {}
    # `_last_original_obs` is what VecNormalize gives, of its own space: under a VecFrameStack
    # the model's space is the stacked one
    original = getattr(getattr(model, "_vec_normalize_env", None), "observation_space", None)
    out = {}
    for key in _STEP_STATE:
        seen = original if key == "_last_original_obs" and isinstance(original, spaces.Space) else space
        n, parts = env.num_envs, dict(seen.spaces) if isinstance(seen, spaces.Dict) else {None: seen}
        sizes: dict[Any, int] = {k: math.prod(part.shape) for k, part in parts.items() if part.shape is not None}
        if len(sizes) != len(parts):
            continue  # a space SB3 does not step with
        value = data.get(key)
        if value is not None and not _steps_on(key, value, seen, sizes, n):
            rows = f"one row of {' and '.join(map(str, sizes.values()))} number(s) each"
            wanted = f"an array of {n} flag(s)" if key == "_last_episode_starts" else rows
            keys = f" under {sorted(map(str, parts))}" if None not in parts and key != "_last_episode_starts" else ""
            out[key] = f"is {_described(value)}, where the {n} environment(s) passed step on from {wanted}{keys}"
    return out


def _steps_on(key: str, value: Any, space: Any, sizes: dict, n: int) -> bool:
    from stable_baselines3.common.utils import is_vectorized_observation

    if key == "_last_episode_starts":
        return isinstance(value, np.ndarray) and value.shape == (n,) and value.dtype.kind in "biuf"
    rows = value if isinstance(value, dict) else {None: value}
    if set(rows) != set(sizes) or not all(
        isinstance(a, np.ndarray) and a.dtype.kind in "biuf" and a.ndim and a.shape[0] == n for a in rows.values()
    ):
        return False
    if any(rows[k].size != n * size for k, size in sizes.items()):
        return False
    if key != "_last_obs":
        return True
    try:
        return bool(is_vectorized_observation(value, space))
    except (ValueError, KeyError, TypeError, AttributeError):  # SB3's words for a shape it cannot step
        return False


def _number(value: Any, bits: int) -> bool:
    if isinstance(value, int):
        return value.bit_length() <= bits
    return isinstance(value, (float, np.integer, np.floating))


def _above(number: float, floor: tuple[float, bool, str]) -> bool:
    return number >= floor[0] if floor[1] else number > floor[0]  # NaN: never


def _auto_ent_coef(value: str) -> bool:
    """SAC's (TQC's, CrossQ's) learned entropy coefficient: 'auto', or 'auto_<x>' of a float x
    above 0 (``_setup_model`` asserts it; any other text is no float there)."""
    if value == "auto":
        return True
    try:
        return value.startswith("auto_") and float(value[5:]) > 0
    except ValueError:
        return False


def _integer(value: Any) -> bool:
    """An integer SB3 may pass to numpy as a size: a Python or numpy integer within 64 bits."""
    return isinstance(value, (int, np.integer)) and -(2**63) <= int(value) < 2**63


def _train_freq(value: Any) -> bool:
    from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

    if type(value) is int:
        return 1 <= value < 2**63
    if type(value) not in (tuple, TrainFreq) or len(value) != 2:
        return False
    frequency, unit = value
    units = (TrainFrequencyUnit.STEP, TrainFrequencyUnit.EPISODE)
    known = type(unit) is TrainFrequencyUnit or (
        type(value) is tuple and type(unit) is str and unit in ("step", "episode")
    )
    return isinstance(frequency, int) and 1 <= frequency < 2**63 and known and (type(unit) is str or unit in units)


def _kind(value: Any) -> str:
    plain = value is None or isinstance(value, (int, float, str, tuple, np.generic))
    return shown(value) if plain else f"a {type(value).__name__}"


def live_kind_problems(model: Any, data: dict[str, Any]) -> dict[str, str]:
    """The ``data`` keys a restore into the live, set-up ``model`` may not set, each with what is
    wrong: ``__dict__.update`` replaces what the model steps and trains with as it is, and no
    ``_setup_model`` runs after it. A value SB3 calls (:data:`CALLED_SCHEDULES`) is callable, or
    ``None`` where the model holds ``None`` (``lr_schedule=5``, PPO's ``clip_range_vf=0.2``:
    ``TypeError`` at the first ``train``); an
    array, or a dict of arrays, that the model holds (``_last_obs``, ``_last_episode_starts``:
    what the next step starts from) is replaced only by one of the same shapes (``_last_obs`` of
    (3, 7) where the env gives (1, 3): numpy's broadcast error at the first ``add``)."""
    out = {}
    set_up = getattr(model, "policy", None) is not None  # its schedules made: a number stays a number
    for key, value in data.items():
        live = getattr(model, key, None)
        if key in CALLED_SCHEDULES and set_up and not callable(value) and (value is not None or callable(live)):
            out[key] = f"is {_kind(value)}, where {type(model).__name__} calls a schedule"
        elif value is not None and _shapes(live) is not None and _shapes(value) != _shapes(live):
            out[key] = f"is {_described(value)}, where the model holds {_described(live)}"
    return out


def _shapes(value: Any) -> Any:
    """An array's shape, a dict of arrays' keys with their shapes, else ``None``."""
    if isinstance(value, np.ndarray):
        return value.shape
    if isinstance(value, dict) and value and all(isinstance(v, np.ndarray) for v in value.values()):
        return sorted((str(k), v.shape) for k, v in value.items())
    return None


def _described(value: Any) -> str:
    shapes = _shapes(value)
    if isinstance(value, np.ndarray):
        return f"an array of shape {shapes}"
    return f"a dict of arrays {shown(shapes)}" if shapes is not None else _kind(value)
