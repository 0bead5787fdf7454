"""Which rows of an SB3 replay buffer a background save must copy again: those written since
its last snapshot, known from the buffer's ``pos``/``full`` and the model's ``num_timesteps``
(the shadow itself is kept by ``zipsave/_api/_shadow.py``)."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

__all__ = ["replay_snapshot"]

#: Arrays smaller than this are copied whole at each save: cheaper than tracking their rows.
_ROW_MIN_BYTES = 1 << 20

#: Bookkeeping that ``HerReplayBuffer.add`` rewrites for past rows (an episode's length is
#: written when it ends, and zeroed for an old episode being overwritten).
_REWRITTEN = frozenset({"ep_start", "ep_length", "_current_ep_start"})

_CLASSES = ("ReplayBuffer", "DictReplayBuffer", "NStepReplayBuffer", "HerReplayBuffer")


def _sb3_classes() -> tuple[type, ...]:
    from stable_baselines3.common import buffers
    from stable_baselines3.her import HerReplayBuffer

    found = [getattr(buffers, name, None) for name in _CLASSES] + [HerReplayBuffer]
    return tuple(cls for cls in found if isinstance(cls, type))


class ReplaySnapshot:
    """The snapshot source (``_api/_shadow.py``) of one SB3 replay buffer."""

    def __init__(self, model: Any, buffer: Any) -> None:
        self.owner = buffer
        self._model = weakref.ref(model)
        self._rows = {
            id(arr)
            for name, value in vars(buffer).items()
            if name not in _REWRITTEN
            for arr in (value.values() if isinstance(value, dict) else (value,))
            if isinstance(arr, np.ndarray)
            and arr.ndim
            and arr.shape[0] == buffer.buffer_size
            and arr.nbytes >= _ROW_MIN_BYTES
        }

    def row_indexed(self, arr: np.ndarray) -> bool:
        return id(arr) in self._rows

    def state(self) -> tuple[Any, ...]:
        buffer, model = self.owner, self._model()
        steps = getattr(model, "num_timesteps", None)
        return (
            type(buffer),
            buffer.buffer_size,
            buffer.n_envs,
            bool(buffer.optimize_memory_usage),
            int(buffer.pos),
            bool(buffer.full),
            steps if type(steps) is int else None,
        )

    def dirty_rows(self, previous: tuple[Any, ...]) -> tuple[list[tuple[int, int]] | None, str]:
        """The row ranges ``add`` wrote since ``previous`` (each call writes row ``pos``,
        and with ``optimize_memory_usage`` the next observation into row ``pos + 1``)."""
        kind, size, n_envs, optimized, pos, full, steps = self.state()
        old_kind, old_size, old_envs, old_optimized, old_pos, old_full, old_steps = previous
        if (kind, size, n_envs, optimized) != (old_kind, old_size, old_envs, old_optimized):
            return None, "the buffer's class or settings changed"
        if steps is None or old_steps is None:
            return None, "the model has no integer `num_timesteps`"
        added, left = divmod(steps - old_steps, n_envs)
        if left or not 0 <= added < size:
            return None, f"num_timesteps moved by {steps - old_steps} with n_envs={n_envs} and buffer_size={size}"
        if pos != (old_pos + added) % size:
            return None, f"pos is {pos}, but {added} rows after pos {old_pos} it should be {(old_pos + added) % size}"
        if full != (old_full or old_pos + added >= size):
            return None, f"full is {full} after {added} rows from pos {old_pos} (full was {old_full})"
        if not added:
            # HER's `truncate_last_trajectory` ends the last episode without adding a row: it
            # writes `dones`/`timeouts` of the row before `pos` (which `added` rows would cover).
            last = (pos - 1) % size
            return ([(last, last + 1)] if pos or full else []), "no rows added"
        ranges = [(old_pos, min(old_pos + added, size))]
        if old_pos + added > size:
            ranges.append((0, old_pos + added - size))
        if optimized:  # the last `add` also wrote observations[pos]
            ranges.append((pos, pos + 1))
        return ranges, f"{added} rows added"


def replay_snapshot(model: Any, buffer: Any) -> ReplaySnapshot | None:
    """The incremental snapshot source of ``model``'s replay ``buffer``; ``None`` for a class
    other than SB3's own (a subclass may write rows elsewhere): it is copied whole each time."""
    return ReplaySnapshot(model, buffer) if type(buffer) in _sb3_classes() else None
