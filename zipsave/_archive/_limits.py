"""The safety limits that keep hostile archives (bombs, absurd sizes, deep JSON) from hurting
the reader."""

from __future__ import annotations

from .._record import Record, record

__all__ = ["DEFAULT_LIMITS", "Limits"]


@record(frozen=True, init=False, repr=False, eq=False)
class Limits(Record):
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
    alloc_floor
        Bytes any one decoded value (a pickled ``data`` entry, a side pickle such as SB3's
        replay-buffer file, a ``.pth``'s ``data.pkl``, a JSON member) may allocate whatever its
        size; arrays, bytes and tensors are counted, in all, before they are built, and a JSON
        member's arrays and objects before it is parsed.
    alloc_ratio
        What it may allocate on top of ``alloc_floor``, per byte it is decoded from. Real
        pickles need about 1 (an array's bytes are in the pickle); the default 64 MiB + 16x
        leaves room to spare.
    max_model_bytes
        Most bytes a model rebuilt from an archive may construct before its saved state is
        read into it: SB3's parameters and rollout/replay buffer, estimated from the saved
        hyper-parameters and spaces before SB3 is asked to build them. ``None`` (the default)
        admits what this process can be given (each array within physical memory plus swap,
        everything within the address-space limit ``RLIMIT_AS`` when one is set) and
        parameters up to ``alloc_floor + alloc_ratio`` times the archive's size (a real
        archive holds its parameters). A number replaces both bounds.
    """

    max_members: int = 100_000
    max_member_bytes: int = 1 << 40
    max_total_bytes: int = 1 << 42
    max_json_bytes: int = 512 << 20
    max_json_depth: int = 500
    max_compression_ratio: float = 200.0
    alloc_floor: int = 64 << 20
    alloc_ratio: float = 16.0
    max_model_bytes: int | None = None

    # What `@dataclass(frozen=True)` generates, written out: the decorator compiles its methods
    # from source, about 0.5 ms of every first load in a fresh process. `record` still makes this
    # a frozen dataclass (`fields()`, `replace()`, `asdict()`, frozen subclasses; a restore
    # leaves an instance whole, `_core._inplace`) whose `__setattr__` and `__delattr__` raise
    # FrozenInstanceError as the generated ones do, without compiling them either.
    def __init__(
        self,
        max_members: int = 100_000,
        max_member_bytes: int = 1 << 40,
        max_total_bytes: int = 1 << 42,
        max_json_bytes: int = 512 << 20,
        max_json_depth: int = 500,
        max_compression_ratio: float = 200.0,
        alloc_floor: int = 64 << 20,
        alloc_ratio: float = 16.0,
        max_model_bytes: int | None = None,
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "max_members", max_members)
        setattr_(self, "max_member_bytes", max_member_bytes)
        setattr_(self, "max_total_bytes", max_total_bytes)
        setattr_(self, "max_json_bytes", max_json_bytes)
        setattr_(self, "max_json_depth", max_json_depth)
        setattr_(self, "max_compression_ratio", max_compression_ratio)
        setattr_(self, "alloc_floor", alloc_floor)
        setattr_(self, "alloc_ratio", alloc_ratio)
        setattr_(self, "max_model_bytes", max_model_bytes)


DEFAULT_LIMITS = Limits()
