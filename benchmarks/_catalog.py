"""Every operation of ``run.py``: the model and rows of ``_ops.py`` and issue 18's floors,
checksums and zero-copy rows of ``_ops_floor.py``, joined here so that neither of those two
imports the other (``_ops_floor`` builds on ``_ops``; nothing imports back)."""

from __future__ import annotations

from collections.abc import Callable

import _ops
import _ops_floor

OPS: list[_ops.Op] = [*_ops.OPS, *_ops_floor.MORE_OPS]
SETUPS: dict[str, Callable[[_ops.Ctx], None]] = {**_ops.SETUPS, **_ops_floor.MORE_SETUPS}
BY_NAME: dict[str, _ops.Op] = {op.name: op for op in OPS}
