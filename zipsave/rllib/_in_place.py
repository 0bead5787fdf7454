"""A restore into live RLlib components in the driver: saved module weights and optimizer moments
read straight into the live tensors that RLlib's ``set_state`` would copy them into.

Read into fresh memory, the weights are copied once more by ``load_state_dict`` and the
optimizer's moments replace the live ones, which are then freed: with a learner in the driver
that was most of a restore's time (twice RLlib's own ``restore_from_path`` for a PPO of 1.3e7
parameters). Only where RLlib's own code sets the state (``TorchRLModule.set_state``, and the
optimizers of a ``TorchLearner``), which turns numpy arrays into torch tensors anyway: handed the
filled live tensors, ``load_state_dict`` copies each onto itself (a no-op) and the optimizer keeps
the same tensors, holding exactly the saved bytes.

A read that fails half way into a live tensor would leave the learner neither the saved one
nor its own, so no live byte changes before every member to be read in place has passed a
check of its stored bytes (the CRC-32 its zip directory records, itself checked against the
manifest), read from the page cache into nothing the caller holds; the reads into live
tensors also wait until the whole tree was read and decoded and every read into fresh memory
was made (:class:`Fills`), so an archive that fails anywhere leaves the live algorithm as it
was. Those reads are checked again as a fresh read is; only a file that changed between the
check and the read can fail there, and the error then says the learner may be partly
overwritten. Only a checked restore (``verify=True``, the default) reads in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


class _Planned(BaseException):
    """Raised by :func:`_stop_before_reading` to end a planning read; a BaseException so that
    no reader's ``except Exception`` turns it into an error about the archive."""


def _stop_before_reading(tree: Any) -> None:
    raise _Planned


class _Weights:
    """A ``.pth`` member read into a module's live parameters and buffers where they fit."""

    def __init__(
        self, session: Any, folder: str, member: str, state: dict, targets: dict, kind: str | None, touched: list
    ) -> None:
        self.session, self.folder, self.member = session, folder, member
        self.state, self.targets, self.kind = state, targets, kind
        self.touched = touched  # the restore's fills that have read into live tensors

    def members(self) -> list[str]:
        return [self.member]

    def plan(self) -> None:
        """Read and check the member's state dict against its targets, up to where its reader
        would read the first byte into one, and stop there: a state the reader refuses is found
        before a live byte of the learner changes (its stored bytes passed their CRC check)."""
        try:
            self.session.load_tensors(self.member, self.targets, validate=_stop_before_reading)
        except _Planned:
            return

    def prepare(self, broken: dict[str, ZipsaveError]) -> None:
        if self.member in broken:
            raise broken[self.member]

    def write(self) -> None:
        reading: list[bool] = []  # the reader validates the whole tree before it reads a byte into a target
        try:
            tree, _ = self.session.load_tensors(self.member, self.targets, validate=lambda _tree: reading.append(True))
        except ZipsaveError as err:
            if reading:
                raise _changed_error(self.session, err, None) from err
            if self.touched:  # refused before its own first byte, after other parts were read in place
                err.hint = (
                    f"{err.hint + ' ' if err.hint else ''}The restore had read {', '.join(self.touched)} into the "
                    "live learner already: it may be partly restored; restore it again from a sound archive."
                )
                err.args = (err._compose(),)
            raise  # refused before a byte of the live learner changed: its checked bytes are not a state dict
        except OSError as err:
            raise _changed_error(self.session, err, None) from err
        self.touched.append(f"`{self.member}`")
        targets, kind = self.targets, self.kind
        self.state.update({k: v if v is targets.get(k) or kind == "torch" else v.numpy() for k, v in tree.items()})


class _Optimizers:
    """A learner's optimizer state (``state["optimizer"]``, its arrays left unread as
    :class:`NpyHeader`): each array read into the live state tensor it would replace where
    one fits (matched as torch's ``load_state_dict`` matches them), else into fresh memory."""

    def __init__(self, session: Any, member: str, state: dict, optimizers: dict, leave_out: str, touched: list) -> None:
        self.session, self.member, self.state, self.optimizers = session, member, state, optimizers
        self.leave_out, self.touched = leave_out, touched
        saved = state.get(OPTIMIZER_KEY)
        self.saved = saved if isinstance(saved, dict) else None
        self.targets: dict[int, torch.Tensor] = {}
        self.in_place: list[str] = []
        for name, entry in (self.saved or {}).items():
            if name in optimizers:
                self.targets.update(_saved_targets(optimizers[name], entry))

        def note(header: NpyHeader) -> NpyHeader:
            if id(header) in self.targets:
                self.in_place.append(header.member)
            return header

        _resolve(self.saved, note)

    def members(self) -> list[str]:
        return self.in_place

    def prepare(self, broken: dict[str, ZipsaveError]) -> None:
        """Read the arrays that go to fresh memory; a broken one (there, or found by the check
        of those to be read in place) leaves the optimizer state out under the skip rule."""
        if self.saved is None:
            return

        def fresh(header: NpyHeader) -> Any:
            if id(header) not in self.targets:
                return header.as_declared(self.session.load_array(header.member), self.session.name)
            if header.member in broken:
                raise broken[header.member]
            return header

        try:
            _resolve(self.saved, fresh)
        except ZipsaveError as err:
            self.state.pop(OPTIMIZER_KEY)
            self.saved = None
            self.session.skip(self.member, OPTIMIZER_KEY, None, err, exclude=self.leave_out)

    def write(self) -> None:
        session, saved = self.session, self.saved
        if saved is None:
            return
        for name, entry in list(saved.items()):
            filled: list[torch.Tensor] = []

            def into(header: NpyHeader, filled: list = filled) -> Any:
                target = self.targets[id(header)]
                filled.append(target)  # before the read: a read that fails may have written part
                session.read_array_into(header.member, target.numpy(), leave_out=self.leave_out)
                return target

            try:
                saved[name] = _resolve(entry, into)
            except (ZipsaveError, OSError) as err:
                if filled:
                    self.optimizers[name].state.clear()  # neither the saved nor its own moments
                raise _changed_error(session, err, name if filled else None) from err
            finally:
                if filled:
                    increment_version(filled)  # as an in-place copy_ would
            if filled:
                self.touched.append(f"the state of optimizer `{name}`")


class Fills:
    """The reads into live tensors of one restore, made after the whole tree was read.

    :meth:`run` first checks every member that is to be read into a live tensor (its stored
    bytes against the CRC-32 the zip directory records, and that against the manifest),
    then makes every read into fresh memory, and only then reads into live tensors: a broken
    member, wherever it is, fails the restore (or is skipped) before a live byte changes.

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
        self._fills: list[_Weights | _Optimizers] = []
        self._touched: list[str] = []

    def weights(self, folder: str, member: str, state: dict, targets: dict, kind: str | None) -> None:
        """Read the ``.pth`` member ``member`` into ``targets`` where they fit (fresh memory
        elsewhere), then put its tensors into ``state``: the filled live tensors as themselves,
        the others as ``kind`` (``"numpy"``: as RLlib's ``get_state`` gave them)."""
        self._fills.append(_Weights(self.session, folder, member, state, targets, kind, self._touched))

    def optimizers(self, folder: str, member: str, state: dict, optimizers: dict) -> None:
        """Resolve the unread array members (:class:`NpyHeader`) of ``state["optimizer"]``: into
        the live state tensors of ``optimizers`` where they fit, else into fresh memory."""
        leave_out = "/".join(p for p in (self._relative(folder), OPTIMIZER_KEY) if p)
        self._fills.append(_Optimizers(self.session, member, state, optimizers, leave_out, self._touched))

    def run(self, root: Any) -> None:
        """Check, read fresh, then read in place, in the tree's order. A component whose
        weights member is broken is left out of ``root`` under the skip rule (an error unless
        the caller passed ``skip_broken_tensors=True``), as a component that failed to read
        is; a broken optimizer array leaves that learner's optimizer state out."""
        session = self.session
        broken: dict[str, ZipsaveError] = {}
        fails = session.strict or not session.options.skip_broken_tensors  # on the first broken member
        for member in dict.fromkeys(m for fill in self._fills for m in fill.members()):
            try:
                session.check_stored(member)
            except ZipsaveError as err:
                broken[member] = err
                if fails:
                    break  # the restore fails on it: the rest need no check
        for fill in self._fills:
            if isinstance(fill, _Weights) and fill.member not in broken and not (fails and broken):
                try:
                    fill.plan()
                except ZipsaveError as err:
                    broken[fill.member] = err
        for fill in list(self._fills):
            try:
                fill.prepare(broken)
            except ZipsaveError as err:
                if (
                    not isinstance(fill, _Weights)
                    or fill.folder == self.folder
                    or isinstance(err, UnsafeGlobalError)
                    or session.strict
                ):
                    raise
                session.skip(fill.folder, None, None, err)
                parent, _, name = self._relative(fill.folder).rpartition("/")
                root.find(parent).children.pop(name, None)
                self._fills.remove(fill)
        for fill in self._fills:
            fill.write()

    def _relative(self, folder: str) -> str:
        return folder[len(self.folder) :].strip("/") if self.folder else folder


def _changed_error(session: Any, err: BaseException, reset: str | None) -> IntegrityError:
    """The error for a read into live tensors that failed after the member's stored bytes had
    passed their check: the archive changed while it was read."""
    detail = err.detail if isinstance(err, ZipsaveError) else f"{type(err).__name__}: {err}"
    what = f": the state of its optimizer `{reset}` was reset, as a freshly built optimizer's is" if reset else ""
    return IntegrityError(
        f"{detail.rstrip('.')}. Its stored bytes had passed their CRC-32 check just before they were read "
        "into the live learner, and the read found them otherwise: the archive changed while it was being "
        f"restored (another process writing it?). The live learner may be partly overwritten{what}.",
        archive=session.name,
        member=getattr(err, "member", None),
        expected=getattr(err, "expected", None),
        found=getattr(err, "found", None),
        hint="Restore it again from an archive nothing writes, or rebuild it; it is neither the saved "
        "learner nor the one it was.",
    )
