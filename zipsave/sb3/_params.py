"""The tensors of an SB3 archive read straight into a model's policy, optimizers and loose
variables, with SB3's shims for archives of older SB3 and sb3-contrib versions: the part of
the one rebuild path that ``model.set_parameters(path)`` uses too."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .. import _format
from .._core import (
    LoadSession,
    check_optimizer_state,
    load_state_into,
    recursive_getattr,
    resolve,
    set_variable,
    unwrap,
)
from ..exceptions import ParameterMismatchError, ZipsaveError, ZipsaveWarning, caller_stacklevel, reading
from ._extras import matches_any
from ._guess import import_line, suggest_algorithm

__all__ = ["load_parameters", "load_variables"]


def load_parameters(src: LoadSession, model: Any, exclude: list[str], *, exact_match: bool = True) -> None:
    """SB3's ``set_parameters(path, exact_match)``, reading each tensor into the model in place:
    with ``exact_match`` the archive holds exactly the model's state dicts and each fits
    exactly; without, the ones it holds are loaded where their keys match."""
    expected = [n for n in model._get_torch_save_params()[0] if not matches_any(n, exclude)]
    saved = [
        name[: -len(_format.PTH_SUFFIX)]
        for name in src.reader.names()
        if "/" not in name
        and name.endswith(_format.PTH_SUFFIX)
        and name not in (_format.PYTORCH_VARIABLES, _format.LEGACY_PYTORCH_VARIABLES)
        and not matches_any(name[: -len(_format.PTH_SUFFIX)], exclude)
    ]
    if exact_match and set(saved) != set(expected):
        other = _other_algorithm(src, model)
        raise ParameterMismatchError(
            f"holds state dicts {sorted(saved)}, but {type(model).__name__} has {sorted(expected)}.",
            archive=src.name,
            hint=f"It holds a {other} model: load it with `{other}.load(path)` or `zipsave.load(path, cls={other})` "
            f"(`{import_line(other)}`)."
            if other
            else "Was it saved from another algorithm? Leave members out with `exclude=[...]`.",
        )
    for name in saved:
        member = name + _format.PTH_SUFFIX
        try:  # a name from the archive: the model's own state, never a dunder or its code
            target = unwrap(resolve(model, name, archive=src.name, member=member))
        except AttributeError as err:
            raise ParameterMismatchError(
                f"`{name}` is not an attribute of {type(model).__name__} ({err}).", archive=src.name, member=member
            ) from None
        try:
            load_state_into(src, member, target, exact_match)
        except ParameterMismatchError as err:
            if not _load_legacy(src, name, target, err):
                raise
        except ZipsaveError as err:
            src.skip(member, None, None, err)


def _other_algorithm(src: LoadSession, model: Any) -> str | None:
    """The algorithm the archive's ``data`` says it holds (read, never decoded), when it is not
    ``model``'s own (nor one ``model``'s class derives from); else ``None``."""
    try:
        name = suggest_algorithm(src.read_json(_format.DATA))
    except Exception:  # noqa: BLE001 - no readable data: nothing to name, the mismatch is said anyway
        return None
    return None if name is None or name in {k.__name__ for k in type(model).__mro__} else name


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
        with reading(src.name, member=member):  # its refusals name the member, as the plain route's do
            check_optimizer_state(target, tree)
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


def load_variables(src: LoadSession, model: Any, exclude: list[str]) -> None:

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
