"""``CheckpointCallback``: an SB3 callback that checkpoints the model through a
``zipsave.CheckpointManager`` (replay buffer, ``VecNormalize`` statistics and RNG state in the
same archive) and resumes a run from its newest checkpoint in one line."""

from __future__ import annotations

import collections
import functools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from .._api import RNGState
from .._calls import keyword_options
from .._core import pattern_list
from .._manager import Checkpoint, CheckpointManager
from .._printable import visible
from ..exceptions import CheckpointDirectoryError, UsageError
from ._env_state import VecEnvState
from ._her import end_unfinished_episodes

__all__ = ["CheckpointCallback"]

#: The ``data`` key of a checkpoint that holds what SB3 itself does not save (RNG state,
#: episode statistics, environment state). SB3's own ``load`` just sets it as an attribute.
STATE_KEY = "checkpoint_state"

_RESUME_HINT = (
    "Resume with `callback.restore_latest(model)`, then `model.learn(total - model.num_timesteps, "
    "callback=callback, reset_num_timesteps=False)` (without `reset_num_timesteps=False`, learn counts "
    "from 0 again); or use a new directory."
)


#: SB3's ``CheckpointCallback`` arguments, and what this one takes instead.
_SB3_ARGUMENTS = {
    "save_path": "the directory, first: `CheckpointCallback(save_path, ...)`",
    "save_freq": "`every_steps=` (counted in `model.num_timesteps`, so SB3's `save_freq` times the number of envs)",
    "name_prefix": "nothing: checkpoints are named by their step in the directory",
    "save_replay_buffer": '`include=["replay_buffer"]` (the default includes it), in the same archive',
    "save_vecnormalize": '`include=["vec_normalize"]` (the default includes it), in the same archive',
}


#: SB3's ``CheckpointCallback`` arguments in the order it takes them by position.
_SB3_ORDER = ("save_freq", "save_path", "name_prefix", "save_replay_buffer", "save_vecnormalize", "verbose")


def _sb3_order(init: Callable[..., None]) -> Callable[..., None]:
    """A number first is SB3's order, ``CheckpointCallback(1000, "./logs/")`` (SB3's
    ``save_freq``, ``save_path``): said so with the call to make, where the count of positional
    arguments (or a directory named ``1000``) said nothing of it."""

    @functools.wraps(init)
    def call(self: Any, *args: Any, **kwargs: Any) -> None:
        if args and type(args[0]) is int:
            given = dict(zip(_SB3_ORDER, args))
            path = given.get("save_path", kwargs.get("directory"))
            shown = repr(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else "directory"
            rest = [
                f"`{name}`: {_SB3_ARGUMENTS[name]}" for name in given if name in _SB3_ARGUMENTS and name != "save_path"
            ]
            raise UsageError(
                visible(
                    f"`zipsave.sb3.CheckpointCallback({', '.join(map(repr, args))[:120]})` is called in SB3's order "
                    f"({', '.join(f'`{n}`' for n in given)}): this callback takes the checkpoint directory first and "
                    f"its options by name. Call it as `zipsave.sb3.CheckpointCallback({shown}, every_steps={args[0]})`. "
                    f"SB3's {'; '.join(rest)}."
                )
            )
        init(self, *args, **kwargs)

    return call


def _check_arguments(directory: Any, given: dict[str, Any]) -> None:
    """SB3's own arguments (``save_freq=``, ``save_path=``) are a ``TypeError`` that says what
    this callback takes instead, and that SB3's callback saves through zipsave under install()."""
    if not given and directory is not None:
        return
    known = [name for name in given if name in _SB3_ARGUMENTS]
    unknown = sorted(name for name in given if name not in _SB3_ARGUMENTS)
    if unknown:
        raise UsageError(f"CheckpointCallback() got unexpected keyword arguments {unknown}.")
    if not known:
        raise UsageError("CheckpointCallback() needs the checkpoint directory: `CheckpointCallback(directory, ...)`.")
    instead = "; ".join(f"`{name}=`: {_SB3_ARGUMENTS[name]}" for name in known)
    raise UsageError(
        f"zipsave.sb3.CheckpointCallback does not take SB3's arguments {known}. Instead: {instead}. "
        "Or keep SB3's own `stable_baselines3.common.callbacks.CheckpointCallback(save_freq=..., save_path=...)`: "
        "under `zipsave.sb3.install()` it saves through zipsave."
    )


class CheckpointCallback(BaseCallback):
    """Save an SB3 model every few steps (or seconds) into a checkpoint directory, and resume
    from the newest checkpoint.

    Checkpoints are taken between updates (when a rollout starts, and when ``learn`` ends),
    where the model is consistent: the policy and optimizers, ``num_timesteps``, the last
    observation, the replay buffer and ``VecNormalize`` statistics (when the model has them),
    the random generators (torch, numpy, Python, the action space's), the episode statistics
    and, with ``env_state=True``, the environments' own state. Resuming from one with
    :meth:`restore_latest` and ``learn(..., reset_num_timesteps=False)`` continues the run
    bit for bit as if it had never stopped.

    Parameters
    ----------
    directory
        A checkpoint directory (path or fsspec URL), or a :class:`zipsave.CheckpointManager`.
    every_steps, every_seconds, keep_last, keep_best, background, storage_options, sign, trust
        As for :class:`zipsave.CheckpointManager` (ignored when ``directory`` is a manager);
        steps are ``model.num_timesteps``. The metrics are ``ep_rew_mean`` and
        ``ep_len_mean`` (as SB3 logs them) and what ``metrics`` returns, so
        ``keep_best=("ep_rew_mean", "max")`` keeps the best-scoring policy.
    include
        Extras stored in the same archive: ``"replay_buffer"`` (a ``HerReplayBuffer`` too),
        ``"vec_normalize"``. ``None`` (the default) includes each one the model has.
    env_state
        Also save the environments' state (:class:`VecEnvState`; a ``DummyVecEnv`` only), so
        a resumed run continues the same episodes. Without it, a resumed run resets the
        environments, as SB3's ``load`` does.
    metrics
        ``metrics(model) -> dict`` of more numbers to record with each checkpoint.
    final
        Also save when ``learn`` ends.
    verbose
        1 prints a line per checkpoint.

    Examples
    --------
    >>> checkpoints = zipsave.sb3.CheckpointCallback("runs/ppo", every_steps=10_000, keep_last=3)  # doctest: +SKIP
    >>> checkpoints.restore_latest(model)  # resume, or do nothing on a first run  # doctest: +SKIP
    >>> model.learn(1_000_000 - model.num_timesteps, callback=checkpoints, reset_num_timesteps=False)  # doctest: +SKIP
    """

    @_sb3_order
    @keyword_options("zipsave.sb3.CheckpointCallback", order=("every_steps",))
    def __init__(
        self,
        directory: Any = None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep_last: int | None = None,
        keep_best: tuple[str, str] | tuple[str, str, int] | None = None,
        background: bool = True,
        include: Iterable[str] | None = None,
        env_state: bool = False,
        metrics: Callable[[Any], Mapping[str, Any]] | None = None,
        final: bool = True,
        storage_options: dict[str, Any] | None = None,
        verbose: int = 0,
        sign: Any = None,
        trust: Any = None,
        **sb3_arguments: Any,
    ) -> None:
        _check_arguments(directory, sb3_arguments)
        super().__init__(verbose)
        if isinstance(directory, CheckpointManager):
            self.manager = directory
        else:
            self.manager = CheckpointManager(
                directory,
                every_steps=every_steps,
                every_seconds=every_seconds,
                keep_last=keep_last,
                keep_best=keep_best,
                background=background,
                storage_options=storage_options,
                sign=sign,
                trust=trust,
            )
        self.include = None if include is None else pattern_list(include, "include")
        self.env_state = env_state
        self.metrics_fn = metrics
        self.final = final

    def __repr__(self) -> str:
        return f"<CheckpointCallback {self.manager!r}>"

    # -- saving ------------------------------------------------------------------------------
    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        self._in_rollout = True
        self._checkpoint(force=False)

    def _on_rollout_end(self) -> None:
        self._in_rollout = False

    def _on_training_start(self) -> None:
        self.manager.acquire()  # let go when the last learn() ended: take the directory again

    def _on_training_end(self) -> None:
        # A run stopped inside a rollout (a callback returned False) holds a partial rollout
        # that no checkpoint stores: resuming from there would not be exact, so none is taken.
        try:
            if self.final and not getattr(self, "_in_rollout", False):
                self._checkpoint(force=True)
        finally:
            # the last checkpoint is listed when learn() returns, and the directory is free for
            # a notebook to open or load from until the next learn()
            self.manager.release()

    def _extras(self) -> list[str]:
        if self.include is not None:
            return self.include
        found = []
        if getattr(self.model, "replay_buffer", None) is not None:
            found.append("replay_buffer")
        if self.model.get_vec_normalize_env() is not None:
            found.append("vec_normalize")
        return found

    def _metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        episodes = self.model.ep_info_buffer
        if episodes:
            out["ep_rew_mean"] = float(sum(e["r"] for e in episodes) / len(episodes))
            out["ep_len_mean"] = float(sum(e["l"] for e in episodes) / len(episodes))
        if self.metrics_fn is not None:
            out.update(self.metrics_fn(self.model))
        return out

    def _checkpoint(self, *, force: bool) -> None:
        model = self.model
        step = int(model.num_timesteps)
        try:
            due = self.manager.due(step)
        except CheckpointDirectoryError as err:  # the manager's hint knows nothing of learn()
            raise CheckpointDirectoryError(err.detail, hint=_RESUME_HINT) from None
        if not (due or (force and step != getattr(self.manager.latest(), "step", None))):
            return
        extra = {"rng": _rng(model).state_dict(), "episodes": _episodes(model)}
        if self.env_state:
            extra["env"] = VecEnvState(model.get_env()).state_dict()
        setattr(model, STATE_KEY, extra)
        try:
            # the model is collected (and its tensors copied) before save returns
            self.manager.save(step, model, metrics=self._metrics(), force=force, include=self._extras())
        finally:
            delattr(model, STATE_KEY)
        if self.verbose >= 1:
            print(f"zipsave: checkpoint at step {step} in {visible(self.manager.directory)}")

    # -- resuming ----------------------------------------------------------------------------
    def restore_latest(self, model: Any, **restore_options: Any) -> Checkpoint | None:
        """Restore the newest checkpoint into ``model`` (built as the run built it, with its
        environment), or do nothing when there is none; then continue with
        ``model.learn(total - model.num_timesteps, callback=self, reset_num_timesteps=False)``.

        Returns
        -------
        The :class:`zipsave.Checkpoint` restored, or ``None``.
        """
        checkpoint = self.manager.restore_latest(model, **restore_options)
        if checkpoint is None:
            return None
        extra = model.__dict__.pop(STATE_KEY, None) or {}
        if "rng" in extra:
            _rng(model).load_state_dict(extra["rng"])
        if "episodes" in extra:
            for name, items in extra["episodes"].items():
                buffer = collections.deque(items, maxlen=model._stats_window_size)
                setattr(model, name, buffer)
        if "env" in extra and self.env_state:
            VecEnvState(model.get_env()).load_state_dict(extra["env"])
        else:
            model._last_obs = None  # learn() resets the environments, as SB3's load does
            end_unfinished_episodes(model)  # so HER does not join the next episode to the last one
        return checkpoint

    def close(self) -> None:
        """Wait for pending checkpoints and close the manager (``learn`` already lets the
        directory go when it returns; a closed callback cannot save again)."""
        self.manager.close()


def _rng(model: Any) -> Any:
    return RNGState(generators={"action_space": model.action_space.np_random})


def _episodes(model: Any) -> dict[str, list]:
    out = {}
    for name in ("ep_info_buffer", "ep_success_buffer"):
        buffer = getattr(model, name, None)
        if buffer is not None:
            out[name] = list(buffer)
    return out
