"""The RLlib names the restricted unpickler and ``init.json`` references may import: filled in below."""

from __future__ import annotations

RLLIB_ALLOWLIST: frozenset[str] = frozenset()
