"""A restore into live RLlib components in the driver: saved module weights and optimizer moments
read straight into the live tensors that RLlib's ``set_state`` would copy them into.

Read into fresh memory, the weights are copied once more by ``load_state_dict`` and the
optimizer's moments replace the live ones, which are then freed: with a learner in the driver
that was most of a restore's time (twice RLlib's own ``restore_from_path`` for a PPO of 1.3e7
parameters). Only where RLlib's own code sets the state (``TorchRLModule.set_state``, and the
optimizers of a ``TorchLearner``), which turns numpy arrays into torch tensors anyway: handed the
filled live tensors, ``load_state_dict`` copies each onto itself (a no-op) and the optimizer keeps
the same tensors, holding exactly the saved bytes. Every read is checked as a fresh one is (each
header before a byte is read, each member's CRC-32); the reads into live tensors wait until the
whole tree was read and decoded (:class:`Fills`), so an archive that fails anywhere else leaves
the live algorithm as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.autograd.graph import increment_version

from .._tensors import NpyHeader
from ..exceptions import IntegrityError, UnsafeGlobalError, ZipsaveError

__all__ = ["Fills", "live_children", "live_component", "optimizer_targets", "weight_targets"]

OPTIMIZER_KEY = "optimizer"


def _is_actor_manager(obj: Any) -> bool:
    from ray.rllib.utils.actor_manager import FaultTolerantActorManager

    return isinstance(obj, FaultTolerantActorManager)


def live_children(live: Any) -> dict[str, Any]:
    """``live``'s sub-components in this process, by name (remote actors' are not)."""
    if live is None:
        return {}
    return {name: comp for name, comp in live.get_checkpointable_components() if not _is_actor_manager(comp)}


def live_component(obj: Any, path: str | None) -> Any:
    """The component of ``obj`` at ``path`` (``obj`` itself for none) where it lives in this
    process, else ``None`` (behind a remote learner's actor, or no such component)."""
    live = obj
    for part in (path or "").strip("/").split("/"):
        if part:
            live = live_children(live).get(part)
            if live is None:
                return None
    return live


def weight_targets(live: Any) -> dict[str, torch.Tensor] | None:
    """The tensors a saved module's weights can be read into: a torch RLModule's own
    parameters and buffers, where RLlib's ``TorchRLModule.set_state`` sets them."""
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

    if not isinstance(live, TorchRLModule) or type(live).set_state is not TorchRLModule.set_state:
        return None
    return live.state_dict(keep_vars=True)


def optimizer_targets(live: Any) -> dict[str, torch.optim.Optimizer] | None:
    """A learner's optimizers by name, where RLlib's ``TorchLearner`` sets their state (which
    turns each saved array into a torch tensor and hands it to ``load_state_dict``)."""
    from ray.rllib.core.learner.learner import Learner
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    if (
        not isinstance(live, TorchLearner)
        or type(live).set_state is not Learner.set_state
        or type(live)._set_optimizer_state is not TorchLearner._set_optimizer_state
    ):
        return None
    named = getattr(live, "_named_optimizers", None)
    return dict(named) if isinstance(named, dict) else None


def _fillable(live: Any, header: NpyHeader) -> bool:
    """Can the member be read straight into the live state tensor ``live``: plain CPU memory of
    its own (no view, not shared with another process), of the member's shape and dtype?"""
    if not (
        type(live) is torch.Tensor
        and live.device.type == "cpu"
        and live.layout == torch.strided
        and not live.requires_grad
        and not live.is_shared()
        and not live.is_conj()
        and not live.is_neg()
        and live.is_contiguous()
        and live.storage_offset() == 0
        and live.untyped_storage().nbytes() == live.nbytes
        and tuple(live.shape) == header.shape
        and not (header.fortran_order and live.dim() > 1)
    ):
        return False
    try:
        arr = live.numpy()
    except (RuntimeError, TypeError):  # a dtype numpy has no name for (bfloat16)
        return False
    return arr.dtype == header.dtype and arr.flags.writeable


def _saved_targets(optimizer: torch.optim.Optimizer, saved: Any) -> dict[int, torch.Tensor]:
    """``id(header)`` -> the live state tensor it would replace, matched as torch's
    ``load_state_dict`` matches saved state to parameters (by their order in the groups)."""
    state = saved.get("state") if isinstance(saved, dict) else None
    groups = state.get("param_groups") if isinstance(state, dict) else None
    per_param = state.get("state") if isinstance(state, dict) else None
    if not isinstance(groups, list) or not isinstance(per_param, dict):
        return {}
    ids = [i for g in groups if isinstance(g, dict) for i in (g.get("params") or ())]
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if len(ids) != len(params) or len(groups) != len(optimizer.param_groups):
        return {}  # torch refuses this state; RLlib's own error follows
    try:
        id_map = dict(zip(ids, params, strict=True))
    except TypeError:  # an unhashable saved id
        return {}
    out: dict[int, torch.Tensor] = {}
    taken = {p.data_ptr() for p in params}
    for index, entry in per_param.items():
        param = id_map.get(index) if isinstance(index, int) else None
        live = optimizer.state.get(param) if param is not None else None
        if not isinstance(entry, dict) or not isinstance(live, dict):
            continue
        for key, header in entry.items():
            target = live.get(key)
            if (
                isinstance(header, NpyHeader)
                and isinstance(target, torch.Tensor)
                and _fillable(target, header)
                and target.data_ptr() not in taken
            ):
                taken.add(target.data_ptr())
                out[id(header)] = target
    return out


def _resolve(value: Any, read: Callable[[NpyHeader], Any]) -> Any:
    """``value`` with each :class:`NpyHeader` leaf replaced by ``read(header)`` (dicts and lists
    changed in place, tuples rebuilt)."""
    if isinstance(value, NpyHeader):
        return read(value)
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = _resolve(item, read)
    elif isinstance(value, list):
        value[:] = [_resolve(item, read) for item in value]
    elif type(value) is tuple:
        return tuple(_resolve(item, read) for item in value)
    return value


class Fills:
    """The reads into live tensors of one restore, made after the whole tree was read.

    Parameters
    ----------
    session
        The core's load session.
    folder
        The archive folder being restored (errors name components relative to it).
    """

    def __init__(self, session: Any, folder: str) -> None:
        self.session = session
        self.folder = folder
        self._fills: list[tuple[str, Callable[[], None], bool]] = []  # (folder, read, under the skip rule)

    def weights(self, folder: str, member: str, state: dict, targets: dict, kind: str | None) -> None:
        """Read the ``.pth`` member ``member`` into ``targets`` where they fit (fresh memory
        elsewhere), then put its tensors into ``state``: the filled live tensors as themselves,
        the others as ``kind`` (``"numpy"``: as RLlib's ``get_state`` gave them)."""

        def fill() -> None:
            tree, _ = self.session.load_tensors(member, targets)
            state.update({k: v if v is targets.get(k) or kind == "torch" else v.numpy() for k, v in tree.items()})

        self._fills.append((folder, fill, True))

    def optimizers(self, folder: str, member: str, state: dict, optimizers: dict) -> None:
        """Resolve the unread array members (:class:`NpyHeader`) of ``state["optimizer"]``: into
        the live state tensors of ``optimizers`` where they fit, else into fresh memory."""
        # It applies the skip rule itself: only the optimizer's state is left out, not the learner.
        self._fills.append((folder, lambda: self._fill_optimizers(folder, member, state, optimizers), False))

    def run(self, root: Any) -> None:
        """Make every read, in the tree's order. A component whose weights fail is left out of
        ``root`` under the skip rule (a broken tensor member is an error unless the caller passed
        ``skip_broken_tensors=True``), as a component that failed to read is."""
        for folder, fill, skip_rule in self._fills:
            try:
                fill()
            except ZipsaveError as err:
                if not skip_rule or folder == self.folder or isinstance(err, UnsafeGlobalError) or self.session.strict:
                    raise
                self.session.skip(folder, None, None, err)
                parent, _, name = self._relative(folder).rpartition("/")
                root.find(parent).children.pop(name, None)

    def _relative(self, folder: str) -> str:
        return folder[len(self.folder) :].strip("/") if self.folder else folder

    def _fill_optimizers(self, folder: str, member: str, state: dict, optimizers: dict) -> None:
        saved = state.get(OPTIMIZER_KEY)
        if not isinstance(saved, dict):
            return
        session = self.session
        targets: dict[int, torch.Tensor] = {}
        for name, entry in saved.items():
            if name in optimizers:
                targets.update(_saved_targets(optimizers[name], entry))
        # Fresh memory first: a member that fails there leaves the live optimizers untouched.
        try:
            _resolve(saved, lambda header: header if id(header) in targets else _read_fresh(session, header))
        except ZipsaveError as err:
            state.pop(OPTIMIZER_KEY)
            session.skip(member, OPTIMIZER_KEY, None, err)
            return
        leave_out = "/".join(p for p in (self._relative(folder), OPTIMIZER_KEY) if p)
        for name, entry in list(saved.items()):
            filled: list[torch.Tensor] = []

            def into(header: NpyHeader, filled: list = filled) -> Any:
                target = targets[id(header)]
                session.read_array_into(header.member, target.numpy(), leave_out=leave_out)
                filled.append(target)
                return target

            try:
                saved[name] = _resolve(entry, into)
            except (ZipsaveError, OSError) as err:
                optimizers[name].state.clear()  # only a live optimizer's tensors are read into
                error = _reset_error(session, name, err)
                if session.strict or not session.options.skip_broken_tensors:
                    raise error from err
                session.record_skip(member, f"{OPTIMIZER_KEY}.{name}", None, error)
                saved.pop(name)
            finally:
                if filled:
                    increment_version(filled)  # as an in-place copy_ would


def _read_fresh(session: Any, header: NpyHeader) -> np.ndarray:
    """The member read into fresh memory, still what its header declared when it was checked."""
    arr = session.load_array(header.member)
    if arr.shape != header.shape or arr.dtype != header.dtype:
        raise IntegrityError(
            f"holds {arr.dtype}{list(arr.shape)}, but declared {header.dtype}{list(header.shape)} when it was "
            "checked (the archive changed while it was read).",
            archive=session.name,
            member=header.member,
        )
    return arr


def _reset_error(session: Any, name: str, err: BaseException) -> IntegrityError:
    detail = err.detail if isinstance(err, ZipsaveError) else f"{type(err).__name__}: {err}"
    return IntegrityError(
        f"{detail.rstrip('.')}. It was being read in place into the state of the learner's optimizer "
        f"`{name}`, which therefore held neither the saved nor its own moments: its state was reset, as a "
        "freshly built optimizer's is (the moments start again from the next update).",
        archive=session.name,
        member=getattr(err, "member", None),
        expected=getattr(err, "expected", None),
        found=getattr(err, "found", None),
        hint=getattr(err, "hint", None),
    )
