"""Train/eval modes of a model's modules: recorded in ``init.json`` on save, applied when
``load`` builds the object, so a policy saved after ``.eval()`` loads in eval mode (as a
module pickled whole by ``torch.save`` does). ``state_dict`` holds no mode, and ``restore``
leaves the live object's modes as they are: resuming training must not switch dropout off.

The record is ``{"<module path>": "eval" | "train"}``, holding only the modules whose mode
differs from their parent's (a top-level module's parent counts as training, the mode every
module is made in): ``{"policy": "eval"}`` for ``policy.eval()``."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch

from ..exceptions import ZipsaveWarning
from ._address import resolve

__all__ = ["apply_modes", "module_modes"]


def module_modes(obj: Any, state: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """The modes to record for ``obj``, whose state entries are ``state``."""
    out: dict[str, str] = {}
    seen: set[int] = set()

    def walk(path: str, module: torch.nn.Module, parent_training: bool) -> None:
        if id(module) in seen:
            return  # shared: recorded where it was met first
        seen.add(id(module))
        if module.training != parent_training:
            out[path] = "train" if module.training else "eval"
        for name, child in module.named_children():
            walk(f"{path}.{name}" if path else name, child, module.training)

    if isinstance(obj, torch.nn.Module):
        walk("", obj, True)
    else:
        for name, provider in state:
            if isinstance(provider, torch.nn.Module):
                walk(name, provider, True)
    return out


def apply_modes(obj: Any, modes: Any, where: str) -> None:
    """Set the recorded modes on the modules of a freshly built ``obj``, parents first. A
    record that is not a mode, or names no module, is skipped with a warning naming it."""
    if not isinstance(modes, dict):
        warnings.warn(f"{where}: `modes` is not an object; the modules keep their modes.", ZipsaveWarning, stacklevel=4)
        return
    for path in sorted(modes, key=lambda p: (p.count(".") + bool(p), p)):
        mode = modes[path]
        try:
            module = resolve(obj, path) if path else obj
        except (AttributeError, KeyError, IndexError, TypeError):
            module = None
        module = getattr(module, "_orig_mod", module)
        if mode not in ("train", "eval") or not isinstance(module, torch.nn.Module):
            warnings.warn(
                f'{where}: `modes` has {path!r}: {mode!r}, which is not "train" or "eval" of a module of '
                f"{type(obj).__name__}; left as the constructor made it.",
                ZipsaveWarning,
                stacklevel=4,
            )
            continue
        module.train(mode == "train")
