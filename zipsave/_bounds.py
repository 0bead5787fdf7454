"""Bounds that keep values decoded from an archive linear in its size: hash-flooded sets and
dicts, huge integers, long iterations and large allocations asked for by a few bytes.

Every decoder (the restricted unpickler, the ``.pth`` metadata reader, the pickle pre-scan,
the JSON codec) builds containers only through these checks, so a hostile archive costs time
and memory proportional to its own bytes, never more.
"""

from __future__ import annotations

from typing import Any

from .exceptions import ArchiveLimitError

__all__ = [
    "ALLOC_FLOOR",
    "ALLOC_RATIO",
    "KEY_WORK_FLOOR",
    "KEY_WORK_RATIO",
    "MAX_INT_BITS",
    "MAX_INT_DIGITS",
    "MAX_KEY_DEPTH",
    "MAX_SAME_HASH",
    "AllocBudget",
    "KeyGuard",
    "alloc_budget",
    "bounded_int_opcode",
    "MAX_DECIMAL_TEXT",
    "check_decimal",
    "check_int",
    "check_int_text",
    "check_memo",
    "check_size",
    "check_zip_infos",
    "key_budget",
]

#: Largest integer (in bits) a decoder builds: about 39 500 decimal digits, room for any seed,
#: count or exact value a program keeps, while big-number arithmetic on it (a fraction's gcd,
#: ``str()``) stays within a fraction of a second. A 3-million-digit fraction takes minutes.
MAX_INT_BITS = 1 << 17
#: Most distinct keys of one container that may share a hash. Real data has a handful (``1``,
#: ``1.0`` and ``True``); colliding keys make each insertion scan all the others.
MAX_SAME_HASH = 32
#: Deepest nesting of tuples (and frozensets) in a set member or dict key. Python hashes a
#: tuple by recursing in C with no guard: a key nested 300 000 deep (300 KB of pickle) overflows
#: the C stack and kills the process. Real keys nest a few levels. Values are held to it too
#: (``zipsave._trust._nesting``): a caller may hash any tuple it is handed.
MAX_KEY_DEPTH = 100
#: What a decoded value may ask to allocate or iterate over, whatever its archive: 64 MiB, plus
#: :data:`ALLOC_RATIO` times the bytes it was decoded from.
ALLOC_FLOOR = 64 << 20
ALLOC_RATIO = 16


#: The work (elements hashed or compared) the keys of a value's sets and dicts may take: about
#: a second of Python, plus a few steps per byte of input.
KEY_WORK_FLOOR = 1 << 20
KEY_WORK_RATIO = 4


def key_budget(nbytes: int) -> int:
    """The key-hashing work a value decoded from ``nbytes`` of input may take."""
    return KEY_WORK_FLOOR + KEY_WORK_RATIO * max(0, int(nbytes))


def alloc_budget(nbytes: int, limits: Any = None) -> int:
    """The most bytes (or elements) a value decoded from ``nbytes`` of input may ask for:
    ``limits.alloc_floor + limits.alloc_ratio * nbytes`` (a :class:`~zipsave.Limits`; the
    defaults :data:`ALLOC_FLOOR` and :data:`ALLOC_RATIO` without one)."""
    floor = getattr(limits, "alloc_floor", ALLOC_FLOOR)
    ratio = getattr(limits, "alloc_ratio", ALLOC_RATIO)
    return int(floor + ratio * max(0, int(nbytes)))


class AllocBudget:
    """What one decoded value (a pickle, a ``.pth``'s ``data.pkl``) may still allocate.

    Every constructor that allocates by a size it is given (an array of a shape, ``bytes(n)``,
    a tensor over a storage) is charged *before* it runs, and all of them together may not pass
    :func:`alloc_budget` of the value's bytes: a thousand calls asking for 60 MiB each are
    refused at the one that passes, not allowed one by one.
    """

    def __init__(self, nbytes: int, limits: Any = None, **where: Any) -> None:
        self.nbytes = max(0, int(nbytes))
        self.total = alloc_budget(self.nbytes, limits)
        self.spent = 0
        self.where = where
        self._floor = getattr(limits, "alloc_floor", ALLOC_FLOOR)
        self._ratio = getattr(limits, "alloc_ratio", ALLOC_RATIO)

    @property
    def left(self) -> int:
        return self.total - self.spent

    def charge(self, requested: int, what: str) -> None:
        """Count ``requested`` bytes for ``what``; an :class:`ArchiveLimitError` past the budget."""
        requested = max(0, int(requested))
        if requested > self.left:
            raise ArchiveLimitError(
                f"{what} asks for {requested} bytes, and this value may allocate {self.total} in all "
                f"({self.spent} already): `Limits.alloc_floor` ({self._floor}) plus `Limits.alloc_ratio` "
                f"({self._ratio:g}) times the {self.nbytes} bytes it is decoded from.",
                hint="If you trust the archive, raise them: `limits=zipsave.Limits(alloc_ratio=...)` "
                "(`zipsave.sb3.install(limits=...)` for SB3's own load functions).",
                **self.where,
            )
        self.spent += requested


def check_memo(memo: dict[Any, Any], nbytes: int, **where: Any) -> None:
    """Refuse a memo slot at or past ``nbytes`` (the pickle's size). A pickler numbers the values
    it stores from 0, one opcode each, so no real pickle reaches it; C's unpickler (DCP's
    metadata, SB3's schedule recogniser) grows its memo to twice the slot number written, so a
    10-byte pickle storing to slot 2**30 - 1 took 16 GB and most of a minute."""
    far = max(memo, default=-1)
    if far >= nbytes:
        raise ArchiveLimitError(f"the pickle stores a value in memo slot {far}, past its {nbytes} bytes.", **where)


def check_int(value: int, what: str = "an integer", **where: Any) -> int:
    """``value`` if it has at most :data:`MAX_INT_BITS` bits, else an :class:`ArchiveLimitError`."""
    if value.bit_length() > MAX_INT_BITS:
        raise ArchiveLimitError(
            f"{what} has {value.bit_length()} bits, more than the {MAX_INT_BITS} a decoded integer may have "
            "(big-number arithmetic on it would take minutes).",
            **where,
        )
    return value


#: Characters of integer text (digits of the largest integer allowed, a sign, a prefix or a
#: suffix) a decoder converts: Python's conversion is quadratic in the length, and its own
#: limit (``sys.set_int_max_str_digits``) is one a program may lift. ``zipsave._json`` holds
#: JSON literals to the same number of digits.
MAX_INT_DIGITS = 39_457  # len(str(2**MAX_INT_BITS))


def check_int_text(text: Any, what: str = "integer text", **where: Any) -> None:
    """Refuse (an :class:`ArchiveLimitError`) ``text`` (str or bytes) too long to be an integer
    of :data:`MAX_INT_BITS` bits, before anything converts it."""
    if len(text) > MAX_INT_DIGITS + 8:
        raise ArchiveLimitError(
            f"{what} of {len(text)} characters; an integer of {MAX_INT_BITS} bits has at most {MAX_INT_DIGITS} digits.",
            **where,
        )


#: Characters of a decimal literal a decoder parses (the native form's, a pickled ``Decimal``'s).
MAX_DECIMAL_TEXT = 10_000


def check_decimal(value: Any, **where: Any) -> Any:
    """``value`` (a ``decimal.Decimal``) if its exact integer parts are integers zipsave would
    build (at most :data:`MAX_INT_BITS` bits): ``int(value)`` and ``value.as_integer_ratio()``'s
    denominator have at most ``MAX_INT_DIGITS - 1`` digits (the exponent is at least ``-39456``,
    the adjusted exponent at most ``39455``), else an :class:`ArchiveLimitError`. A few bytes,
    ``1E+999999999``, stood for an integer of 3.3 billion bits: ``int()`` of ``1E+999999`` takes
    50 s, of that one forever. Real values do not come near ``1E+39455``."""
    if not value.is_finite():  # NaN and the infinities have no integer parts
        return value
    exponent, digits = int(value.as_tuple().exponent), MAX_INT_DIGITS - 1
    if exponent < -digits or value.adjusted() >= digits:
        raise ArchiveLimitError(
            f"a decimal with exponent {exponent} and {len(value.as_tuple().digits)} digit(s) stands for an "
            f"integer of more than {MAX_INT_BITS} bits (int() or as_integer_ratio() on it would take minutes); "
            f"a decimal's exponent is at least -{digits} and its adjusted exponent at most {digits - 1}.",
            **where,
        )
    return value


def bounded_int_opcode(load: Any, *, text: bool = False) -> Any:
    """An unpickler's integer opcode ``load`` (``INT``, ``LONG``, ``LONG1``, ``LONG4``) whose
    value is held to :func:`check_int`; with ``text`` (``INT``, ``LONG``), its line is refused
    past :func:`check_int_text` before pickle converts it."""

    def binary(self: Any) -> None:
        load(self)
        check_int(self.stack[-1], "an integer in the pickle", **self.where)

    def run(self: Any) -> None:
        readline = self.readline

        def line() -> bytes:
            text = readline()
            check_int_text(text, "an integer in the pickle", **self.where)
            return text

        self.readline = line
        try:
            load(self)
        finally:
            self.readline = readline
        check_int(self.stack[-1], "an integer in the pickle", **self.where)

    return run if text else binary


def check_size(requested: int, budget: int, what: str, **where: Any) -> None:
    """Refuse ``what`` when it asks for more than ``budget`` bytes or elements."""
    if requested > budget:
        raise ArchiveLimitError(
            f"{what} asks for {requested} bytes or elements, more than the {budget} a value decoded from "
            "this archive may (64 MiB plus 16 times the bytes it came from).",
            **where,
        )


class KeyGuard:
    """Checks the keys of containers built from an archive before they are inserted.

    Two costs are bounded: hashing (a tuple key built from shared parts can stand for 2**60
    elements; each element counts against ``budget``) and collisions (more than
    :data:`MAX_SAME_HASH` distinct keys of one container with one hash are refused, so no
    insertion scans more than that many). Equal keys are not collisions: a list of equal
    floats given to ``set()`` is fine.
    """

    def __init__(self, budget: int, **where: Any) -> None:
        self.budget = budget
        self.where = where
        # id(container) -> {hash: [distinct keys with that hash]}
        self._seen: dict[int, dict[int, list[Any]]] = {}
        self._keep: dict[int, Any] = {}  # the containers, so their ids stay theirs

    def _refuse(self, detail: str) -> ArchiveLimitError:
        return ArchiveLimitError(detail, **self.where)

    def cost(self, key: Any) -> int:
        """Charge the work of hashing or comparing ``key``; refuse past the budget."""
        todo, spent = [(key, 0)], 0
        while todo:
            item, depth = todo.pop()
            kind = type(item)
            if kind is int:
                spent += 1 + item.bit_length() // 512
                if item.bit_length() > MAX_INT_BITS:
                    check_int(item, "a set member or dict key", **self.where)
            elif kind in (tuple, frozenset) or isinstance(item, (tuple, frozenset)):
                if depth >= MAX_KEY_DEPTH:
                    raise self._refuse(
                        f"a set member or dict key nests tuples more than {MAX_KEY_DEPTH} deep "
                        "(hashing it would overflow the interpreter's C stack)."
                    )
                spent += 1
                todo.extend((child, depth + 1) for child in item)
            else:
                spent += 1
            if spent > self.budget:
                break
        self.budget -= spent
        if self.budget < 0:
            raise self._refuse(
                "the keys of the sets and dicts in this value take more work to hash than its size allows "
                "(a tuple built from shared parts, or keys repeated many times)."
            )
        return spent

    def add(self, container: Any, key: Any) -> None:
        """Check one key about to be inserted into ``container``."""
        self.cost(key)
        try:
            digest = hash(key)
        except TypeError:
            return  # the insertion itself fails
        table = self._seen.get(id(container))
        if table is None:
            table = self._seen[id(container)] = {}
            self._keep[id(container)] = container
        same = table.setdefault(digest, [])
        for other in same:
            if other is key:
                return
        for other in same:
            self.cost(key)
            if type(other) is type(key) and other == key:
                return
        if len(same) >= MAX_SAME_HASH:
            raise self._refuse(
                f"more than {MAX_SAME_HASH} distinct keys of one set or dict share a hash "
                "(a hash-flooding archive: building it would take quadratic time)."
            )
        same.append(key)

    def add_all(self, container: Any, keys: Any) -> None:
        for key in keys:
            self.add(container, key)

    def items_of(self, value: Any) -> None:
        """Check the keys a constructor will hash when given ``value``: the members of a
        sequence or set, the keys of a dict, and the first items of ``(key, value)`` pairs."""
        kind = type(value)
        if kind in (list, tuple, set, frozenset) or isinstance(value, (list, tuple, set, frozenset)):
            marker = object()
            pairs = object()
            for item in value:
                self.add(marker, item)
                if type(item) in (tuple, list) and len(item) == 2:
                    self.add(pairs, item[0])
            self._forget(marker, pairs)
        elif isinstance(value, dict):
            pass  # already checked key by key while it was built

    def _forget(self, *containers: Any) -> None:
        for container in containers:
            self._seen.pop(id(container), None)
            self._keep.pop(id(container), None)


def check_zip_infos(
    infos: list, *, size: int, max_bytes: int, max_ratio: float, max_members: int = 100_000, **where: Any
) -> None:
    """Refuse a zip nested in an archive (a ``.pth`` member, a ``torch.save`` file, a pickled
    storage) whose members would decompress past ``max_bytes`` in all, expand more than
    ``max_ratio`` times (a deflate bomb), or lie about their sizes. ``size`` is the bytes the
    nested zip occupies; zip readers never write more than a member's declared size."""
    if len(infos) > max_members:
        raise ArchiveLimitError(f"a nested zip holds {len(infos)} members; the limit is {max_members}.", **where)
    total = 0
    for info in infos:
        name = getattr(info, "filename", "?")
        if info.compress_type not in (0, 8):  # stored, deflated: what torch and zipsave write
            raise ArchiveLimitError(f"nested member `{name}` uses compression method {info.compress_type}.", **where)
        if info.compress_size > size or (info.compress_type == 0 and info.compress_size != info.file_size):
            raise ArchiveLimitError(
                f"nested member `{name}` declares {info.compress_size} bytes stored and {info.file_size} "
                f"bytes of data in a zip of {size} bytes.",
                **where,
            )
        if (
            info.compress_type == 8
            and info.file_size > (1 << 20)
            and info.file_size > max_ratio * max(1, info.compress_size)
        ):
            raise ArchiveLimitError(
                f"nested member `{name}` expands {info.file_size / max(1, info.compress_size):.0f}x when "
                f"decompressed; the limit is {max_ratio:.0f}x (zip bomb?).",
                **where,
            )
        total += info.file_size
    if total > max_bytes:
        raise ArchiveLimitError(f"a nested zip's members total {total} bytes; the limit is {max_bytes}.", **where)
