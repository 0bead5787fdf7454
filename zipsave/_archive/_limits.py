"""The safety limits that keep hostile archives (bombs, absurd sizes, deep JSON) from hurting
the reader."""

from __future__ import annotations

import dataclasses

__all__ = ["DEFAULT_LIMITS", "Limits"]

@dataclasses.dataclass(frozen=True)
class Limits:
    """Safety limits applied while reading an archive.

    Every limit is a plain number and can be raised for archives you trust, e.g.
    ``zipsave.load(path, limits=zipsave.Limits(max_json_bytes=4 << 30))``.

    Attributes
    ----------
    max_members
        Most members an archive may hold.
    max_member_bytes
        Largest uncompressed size of one member.
    max_total_bytes
        Largest sum of the uncompressed sizes of all members.
    max_json_bytes
        Largest JSON member (``data``, ``init.json``, ``manifest.json``).
    max_json_depth
        Deepest nesting of JSON arrays/objects accepted while decoding.
    max_compression_ratio
        Largest uncompressed/compressed ratio of a deflated member above 1 MiB.
    """

    max_members: int = 100_000
    max_member_bytes: int = 1 << 40
    max_total_bytes: int = 1 << 42
    max_json_bytes: int = 512 << 20
    max_json_depth: int = 500
    max_compression_ratio: float = 200.0


DEFAULT_LIMITS = Limits()
