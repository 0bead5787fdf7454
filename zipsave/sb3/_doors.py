"""SB3's own doors onto the extras of a model archive: ``model.load_replay_buffer(archive)``,
``VecNormalize.load(archive, venv)`` (``Algo.load`` restores both beside the model through
the one rebuild path, ``_build``).

A model archive (``zipsave.save(model, include=[...])``, a ``CheckpointManager`` checkpoint)
keeps the replay buffer and ``VecNormalize`` statistics in its ``replay_buffer/`` and
``vec_normalize/`` folders; SB3's doors expect separate pickles. Each door here reads the
folder through the same functions as ``zipsave.load``, so every door gives the same arrays,
``pos``, ``full`` and statistics.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import _format
from .._bounds import alloc_budget
from .._core import LoadOptions, LoadSession
from .._printable import shown
from ..exceptions import ArchiveLimitError, DecodeError, ParameterMismatchError
from ._boundary import door, transitions_mismatch
from ._estimate import archive_size
from ._extras import build_vec_normalize, restore_extra
from ._state import current_options, original

__all__ = ["handed", "holds_extra", "is_address", "is_zip", "load_replay_buffer", "opened", "vec_normalize_from_model"]


#: A stand-in last observation: the episode under way goes on (``truncate_last_traj=False``).
_KEEP_EPISODE = object()


def _options() -> LoadOptions:
    options = current_options()
    if options is None:
        return LoadOptions(strict=True)
    return LoadOptions(
        allow_pickle=options.allow_pickle,
        trusted=options.trusted,
        strict=True,
        limits=options.limits,
        trust=options.trust,
    )


def is_address(path: Any) -> bool:
    """A URL (fsspec's, ``file://`` too): the doors read it as :func:`zipsave.load` does (the one
    destination rule: the URL, then with ``.zip``), never by SB3's suffix rules or as a pickle."""
    return isinstance(path, str) and "://" in path


def is_zip(path: Any) -> bool:
    """Whether ``path`` (a path or an open binary file, left where it was) is a zip file."""
    import zipfile

    try:
        if hasattr(path, "read"):
            at = path.tell()
            try:
                return zipfile.is_zipfile(path)
            finally:
                path.seek(at)
        return zipfile.is_zipfile(os.fspath(path))
    except (OSError, TypeError):
        return False


#: ``(path, session)``: the file a door opened, for SB3's own method it calls (``load_from_pkl``).
_opened: contextvars.ContextVar[tuple[Any, LoadSession] | None] = contextvars.ContextVar(
    "zipsave_sb3_opened", default=None
)


@contextlib.contextmanager
def opened(path: Any) -> Iterator[LoadSession | None]:
    """The one open of the file a door reads: a strict load session under the installation's
    options when it is a zip (or a URL), ``None`` otherwise (a pickle SB3 wrote, a missing file:
    the door's pickle path decides). The zip's directory is read here once: the door reads the
    extra's folder from this session, or hands it to the read of a whole file (:func:`handed`).
    Closed at the end; a file object is left where it was found."""
    if not is_address(path) and not is_zip(path):
        yield None
        return
    at = path.tell() if hasattr(path, "read") else None
    try:
        src = LoadSession(path, _options())
        try:
            token = _opened.set((path, src))
            try:
                yield src
            finally:
                _opened.reset(token)
        finally:
            src.close()
    finally:
        if at is not None:
            path.seek(at)


def handed(path: Any) -> LoadSession | None:
    """The session :func:`opened` holds on ``path`` (the same file object, or the same path)."""
    held = _opened.get()
    if held is None:
        return None
    at, src = held
    paths = isinstance(at, (str, os.PathLike)) and isinstance(path, (str, os.PathLike))
    return src if at is path or (paths and os.fspath(at) == os.fspath(path)) else None


def holds_extra(src: LoadSession, name: str) -> bool:
    """Whether the opened file is a zipsave model archive with the extra ``name``
    (``"replay_buffer"``, ``"vec_normalize"``) in its own folder."""
    return src.has(_format.join(name, _format.DATA))


def _archive_path(path: Any, *suffixes: str) -> Any:
    """The file SB3's door would open: ``path``, else ``path`` with one of ``suffixes``."""
    if hasattr(path, "read") or is_address(path) or os.path.exists(path):
        return path
    for suffix in suffixes:
        candidate = f"{os.fspath(path)}.{suffix}"
        if os.path.exists(candidate):
            return candidate
    return path


# -- model.load_replay_buffer ----------------------------------------------------------------
def load_replay_buffer(self: Any, path: Any, truncate_last_traj: bool = True) -> None:
    """``OffPolicyAlgorithm.load_replay_buffer``: a model archive's ``replay_buffer/`` folder
    fills the model's buffer (as ``zipsave.load`` does); any other file goes to SB3's own
    method (a buffer file ``save_replay_buffer`` wrote, zipsave's or SB3's pickle)."""
    archive = _archive_path(path, "pkl", "zip")
    with door(archive, f"{type(self).__name__}.load_replay_buffer"), opened(archive) as src:
        if src is None or not holds_extra(src, "replay_buffer"):
            own = getattr(self, "replay_buffer", None)
            original(_owner(), "load_replay_buffer")(self, path, truncate_last_traj)
            try:
                _check_transitions(self, archive)
            except ParameterMismatchError:
                self.replay_buffer = own  # refused: the model keeps its own buffer
                raise
            return None
        with src:
            _buffer_from_folder(self, src, truncate_last_traj)
    return None


def _buffer_from_folder(self: Any, src: LoadSession, truncate_last_traj: bool) -> None:
    buffer = getattr(self, "replay_buffer", None)
    live = not _fit_buffer(src, self)  # a buffer built for the saved size holds untouched zeros
    before = getattr(self, "_last_obs", None)
    # the restore ends HER's episode under way when there is no last observation (a reset
    # comes): what truncate_last_traj asks for, and only then
    self._last_obs = None if truncate_last_traj else _KEEP_EPISODE
    try:
        restore_extra(src, self, "replay_buffer", in_place=live)  # strict: a buffer that does not fit raises
    except BaseException:
        if not live:  # refused: the model keeps its own buffer, not the empty one built for the saved size
            self.replay_buffer = buffer
        raise
    finally:
        self._last_obs = before


def _check_transitions(model: Any, archive: Any) -> None:
    """A buffer file holds transitions of the spaces it was filled with: those of another
    environment would load, and fail at the first ``add`` or sample with numpy's broadcast error.
    The archive folder's door checks its arrays; this checks what SB3's door loaded."""
    buffer = model.replay_buffer
    held = (getattr(buffer, "obs_shape", None), getattr(buffer, "action_dim", None))
    saved = f" (observation_space={shown(getattr(buffer, 'observation_space', None))} and action_space=" + shown(
        getattr(buffer, "action_space", None)
    )
    mismatch = transitions_mismatch(model, held, f"{saved})", archive=archive)
    if mismatch is not None:
        raise mismatch


def _owner() -> type:
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

    return OffPolicyAlgorithm


def _fit_buffer(src: LoadSession, model: Any) -> bool:
    """SB3's door replaces the model's buffer with the saved one, whatever its size: a model
    built with another ``buffer_size`` (or ``n_envs``) gets a fresh buffer of its own class
    with the saved ones, which the restore then fills. Returns whether it built one."""
    buffer = getattr(model, "replay_buffer", None)
    if buffer is None:
        raise DecodeError(
            f"holds a replay buffer, but this {type(model).__name__} has none to fill yet.",
            archive=src.name,
            member=_format.join("replay_buffer", _format.DATA),
            hint="Call `model.learn(0)` or build the model with `_init_setup_model=True` first.",
        )
    raw = src.read_json(_format.join("replay_buffer", _format.DATA))  # read once: the restore reuses it
    if not isinstance(raw, dict):
        return False  # the restore names what is wrong with it
    size, n_envs = raw.get("buffer_size"), raw.get("n_envs")
    if type(size) is not int or type(n_envs) is not int or size <= 0 or n_envs <= 0:
        return False
    if (size, n_envs) == (buffer.buffer_size, buffer.n_envs):
        return False
    _check_buffer_fits(src, buffer, size, n_envs)
    kwargs = dict(getattr(model, "replay_buffer_kwargs", None) or {})
    if "env" in kwargs or hasattr(buffer, "env"):  # HerReplayBuffer samples through the env
        kwargs["env"] = model.env
    model.replay_buffer = type(buffer)(
        size,
        model.observation_space,
        model.action_space,
        device=model.device,
        n_envs=n_envs,
        optimize_memory_usage=getattr(buffer, "optimize_memory_usage", False),
        **kwargs,
    )
    return True


def _check_buffer_fits(src: LoadSession, buffer: Any, size: int, n_envs: int) -> None:
    """Refuse a buffer of ``size`` rows of ``n_envs`` (from ``replay_buffer/data``) that the
    archive's bytes cannot hold, before SB3 allocates it: its arrays (the model's own, a row's
    bytes each as now) may take at most ``Limits.alloc_floor`` plus ``Limits.alloc_ratio`` times
    the archive's bytes, which a saved buffer's arrays are within. ``buffer_size=10**13`` in a
    few bytes asked numpy for 146 TiB."""
    rows = max(1, buffer.buffer_size * buffer.n_envs)
    row_bytes = 0
    for value in vars(buffer).values():
        for array in value.values() if isinstance(value, dict) else (value,):
            if isinstance(array, np.ndarray):
                row_bytes += -(-array.nbytes // rows)
    need, budget = row_bytes * size * n_envs, alloc_budget(archive_size(src) or 0, src.limits)
    if need > budget:
        raise ArchiveLimitError(
            f"holds a replay buffer with buffer_size={size} and n_envs={n_envs}, which this model's buffer would "
            f"hold in {need} bytes, more than the {budget} an archive of its size may ask for (`Limits.alloc_floor` "
            "plus `Limits.alloc_ratio` times its bytes; a saved buffer holds its rows).",
            archive=src.name,
            member=_format.join("replay_buffer", _format.DATA),
            key="buffer_size",
            hint="If you trust the archive, raise them: `zipsave.sb3.install(limits=zipsave.Limits(alloc_ratio=...))`.",
        )


# -- VecNormalize.load -----------------------------------------------------------------------
def vec_normalize_from_model(src: LoadSession, venv: Any) -> Any:
    """``VecNormalize.load(archive, venv)`` of a model archive (``src``, :func:`opened`): a new
    ``VecNormalize`` around ``venv`` with the saved settings and statistics (what SB3's load of
    a pickle gives)."""
    with src:
        state = src.decode_data("vec_normalize") or {}
        try:
            return build_vec_normalize(state, venv)
        except (ValueError, TypeError, KeyError, AssertionError) as err:
            if isinstance(err, DecodeError):
                err.archive = err.archive or src.name
                err.member = err.member or _format.join("vec_normalize", _format.DATA)
                err.args = (err._compose(),)
                raise
            raise DecodeError(
                f"the saved VecNormalize does not fit this environment ({type(err).__name__}: {err}).",
                archive=src.name,
                member=_format.join("vec_normalize", _format.DATA),
            ) from err
