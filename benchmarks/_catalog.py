"""Every operation of ``run.py``: the model and rows of ``_ops.py``, issue 18's floors,
checksums and zero-copy rows of ``_ops_floor.py`` and issue 31's first-load rows of
``_ops_first.py``, joined here so that none of those imports another but ``_ops`` (the
others build on it; nothing imports back)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import _ops
import _ops_first
import _ops_floor

OPS: list[_ops.Op] = [*_ops.OPS, *_ops_floor.MORE_OPS, *_ops_first.FIRST_OPS]
SETUPS: dict[str, Callable[[_ops.Ctx], None]] = {**_ops.SETUPS, **_ops_floor.MORE_SETUPS}
BY_NAME: dict[str, _ops.Op] = {op.name: op for op in OPS}


def prepare(folder: str, n_params: float, ops: Iterable[str] | None = None) -> dict[str, int]:
    """Write one size's input files (the PPO archives only when an op of ``ops`` reads one);
    return their sizes in bytes."""
    sizes = _ops.prepare(folder, n_params)
    if ops is None or any((BY_NAME[name].reads or "").endswith("_ppo") for name in ops):
        sizes |= _ops_first.prepare(folder, n_params)
    return sizes
