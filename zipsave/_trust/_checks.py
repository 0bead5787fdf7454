"""The checks that keep allowlisted numpy pieces memory-safe under a hostile pickle: dtype
consistency, bit-generator positions, and protocol attributes planted on instances."""

from __future__ import annotations

import operator
import struct
import sys
from typing import Any

from .._items import dtype_size_problem
from ._names import is_dunder

__all__ = [
    "Memo",
    "check_bit_generator",
    "check_bit_generator_state",
    "bit_generator_state_problem",
    "torch_generator_state_problem",
    "check_dtype",
    "check_seed_sequence",
    "dtype_state_problem",
    "instance_dunders",
    "rebuild_dtype",
]


# -- the unpickler ---------------------------------------------------------------------------
class Memo(dict):
    """The unpickler's memo, remembering where numpy objects are stored so BUILD can swap them."""

    def __init__(self) -> None:
        super().__init__()
        self.where: dict[int, list[Any]] = {}

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(value, (numpy.ndarray, numpy.dtype)):
            self.where.setdefault(id(value), []).append(key)


def instance_dunders(state: Any) -> list[str]:
    """Dunder names a BUILD state would set as instance attributes, in every form
    ``__setstate__`` implementations accept (a dict, ``(dict, slots)``, or ``(name, value)`` pairs)."""
    found: set[str] = set()

    def scan(mapping: Any) -> None:
        if isinstance(mapping, dict):
            found.update(k for k in mapping if isinstance(k, str) and is_dunder(k))

    scan(state)
    if isinstance(state, tuple) and len(state) == 2:
        scan(state[0])
        scan(state[1])
    if isinstance(state, (list, tuple)):
        for item in state:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and is_dunder(item[0]):
                found.add(item[0])
    return sorted(found)


def rebuild_dtype(numpy: Any, dtype: Any, depth: int = 0) -> Any:
    """The same dtype built through numpy's validating constructor from its visible parts."""
    if depth > 64:
        raise ValueError("dtype nesting is too deep")
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return numpy.dtype((rebuild_dtype(numpy, base, depth + 1), shape))
    if dtype.names is not None:
        fields = [dtype.fields[name] for name in dtype.names]
        spec = {
            "names": list(dtype.names),
            "formats": [rebuild_dtype(numpy, field[0], depth + 1) for field in fields],
            "offsets": [field[1] for field in fields],
            "titles": [field[2] if len(field) > 2 else None for field in fields],
            "itemsize": dtype.itemsize,
        }
        return numpy.dtype(spec, align=dtype.isalignedstruct)
    return numpy.dtype(dtype.str)


def check_dtype(numpy: Any, dtype: Any) -> str | None:
    """Why a dtype whose state came from a pickle is unsafe to use, or None if it is sound.

    numpy trusts the flags in a dtype's pickled state: one that hides an object field (or
    places a field outside the item) lets any array of it read raw bytes as pointers.
    """
    size = dtype_size_problem(dtype)  # rebuilding walks every field as often as it is shared
    if size:
        return size
    try:
        canonical = rebuild_dtype(numpy, dtype)
    except (TypeError, ValueError, OverflowError, RecursionError) as err:
        return f"its fields cannot be rebuilt ({type(err).__name__}: {err})"
    if not (
        canonical == dtype
        and canonical.itemsize == dtype.itemsize
        and canonical.flags == dtype.flags
        and canonical.hasobject == dtype.hasobject
    ):
        return f"its state describes {canonical!r} (flags {canonical.flags}) but sets {dtype!r} (flags {dtype.flags})"
    return None


# Buffer indices in bit-generator state that numpy's setters store without a bounds check.
_BIT_GENERATOR_INDEX_LIMITS = {"MT19937": (("state", "pos"), 624), "Philox": (("buffer_pos",), 4)}


def check_bit_generator_state(obj: Any, state: Any) -> str | None:
    """The out-of-range buffer index in a bit generator's state dict (or numpy 2's
    ``(state, seed sequence)`` pair) about to be set, checked before numpy sees it: numpy
    (2.4 too) stores it unchecked. ``None`` when in range, or ``obj`` is no bit generator."""
    bg_module = sys.modules.get("numpy.random.bit_generator")
    if bg_module is None or not isinstance(obj, bg_module.BitGenerator):
        return None
    if type(state) is tuple and len(state) == 2:
        state = state[0]
    return bit_generator_state_problem(state)


def bit_generator_state_problem(state: Any) -> str | None:
    """The out-of-range buffer index in a numpy bit generator's state dict (MT19937's
    ``state.pos``, Philox's ``buffer_pos``), which numpy stores unchecked and its next draw
    reads at (past the buffer: a crash, or bytes nobody wrote); ``None`` when in range or
    not such a state. :func:`check_bit_generator_state` without the object."""
    if type(state) is not dict:
        return None
    limit = _BIT_GENERATOR_INDEX_LIMITS.get(state.get("bit_generator"))  # type: ignore[arg-type]
    if limit is None:
        return None
    path, top = limit
    value: Any = state
    for step in path:
        if type(value) is not dict or step not in value:
            return None  # numpy names the missing key itself
        value = value[step]
    try:  # numpy stores what converts to a C integer: an int, a numpy or a 0-d torch integer
        index = operator.index(value)
    except Exception:  # noqa: BLE001 - numpy refuses it with its own TypeError
        return None
    if not 0 <= index <= top:
        return f"{state['bit_generator']} {'/'.join(path)} is {index}, outside 0..{top}"
    return None


#: The 32-bit words of a Mersenne Twister's state (torch's CPU generator, numpy's MT19937).
_MT_WORDS = 624
#: The sizes of a torch CPU generator's state (``CPUGeneratorImplState``, and its legacy form
#: ``CPUGeneratorImplStateLegacy``), which start alike: the seed, ``left``, ``seeded``, ``next``.
_TORCH_CPU_STATES = (5056, 5048)


def torch_generator_state_problem(raw: bytes) -> str | None:
    """What is wrong with a torch CPU generator's state (``Generator.get_state()``'s bytes)
    about to be set, or ``None``. torch checks ``left`` and ``next`` each within 624 words, but
    its Mersenne Twister then reads word ``next``, ``next + 1``... for ``left - 1`` draws
    before it regenerates them: ``left + next`` past 625 reads past the words it holds, and
    hands the bytes found there back as random numbers. torch writes ``left`` 1 and ``next``
    0 after seeding, ``left + next`` 625 after a draw. A state of another size (another
    device's) is torch's to check."""
    if len(raw) not in _TORCH_CPU_STATES:
        return None
    left, _seeded, next_ = struct.unpack_from("<iiQ", raw, 8)
    if left >= 1 and left + next_ <= _MT_WORDS + 1:
        return None
    return (
        f"a torch CPU generator state with left {left} and next {next_}: its next draws would read past the "
        f"{_MT_WORDS} words it holds (torch writes left + next <= {_MT_WORDS + 1})"
    )


def check_bit_generator(obj: Any) -> str | None:
    bit_generator = None
    bg_module = sys.modules.get("numpy.random.bit_generator")
    gen_module = sys.modules.get("numpy.random._generator")
    rs_module = sys.modules.get("numpy.random.mtrand")
    if bg_module is not None and isinstance(obj, bg_module.BitGenerator):
        bit_generator = obj
    elif gen_module is not None and isinstance(obj, gen_module.Generator):
        bit_generator = obj.bit_generator
    elif rs_module is not None and isinstance(obj, rs_module.RandomState):
        bit_generator = obj._bit_generator
    if bit_generator is None:
        return None
    state = bit_generator.state
    limit = _BIT_GENERATOR_INDEX_LIMITS.get(state.get("bit_generator"))
    if limit is None:
        return None
    path, top = limit
    value: Any = state
    for step in path:
        value = value[step]
    if not 0 <= int(value) <= top:
        return f"{state['bit_generator']} {'/'.join(path)} is {value}, outside 0..{top}"
    return None


def check_seed_sequence(obj: Any, budget: int) -> str | None:
    """Why a SeedSequence rebuilt from a pickle is unsound, or None: its pool must be the
    uint32 vector of ``pool_size`` words that ``spawn`` and ``generate_state`` read, and the
    pool size what the load may allocate for each child."""
    module = sys.modules.get("numpy.random.bit_generator")
    if module is None or not isinstance(obj, module.SeedSequence):
        return None
    pool, size = obj.pool, obj.pool_size
    numpy = sys.modules["numpy"]
    if not (isinstance(pool, numpy.ndarray) and pool.dtype == numpy.uint32 and pool.shape == (size,)):
        return f"SeedSequence pool is not {size} uint32 words"
    if not 0 < size * 4 <= budget:
        return f"SeedSequence pool_size {size} is out of range"
    return None


def dtype_state_problem(dtype: Any, state: Any) -> str | None:
    """Why ``state`` cannot be given to ``dtype.__setstate__`` safely, or None.

    numpy's setter trusts the tuple's layout: a datetime dtype given a state without its unit
    metadata dereferences NULL (SIGSEGV). The state must have the length and version numpy's
    own ``__reduce__`` of the same kind of dtype has, and a datetime's metadata its shape.
    """
    reference = dtype.__reduce__()[2]
    if type(state) is not tuple or len(state) != len(reference) or state[0] != reference[0]:
        return f"expected a {len(reference)}-tuple of version {reference[0]}, got {type(state).__name__}"
    if dtype.kind in "mM":
        meta = state[-1]
        unit = meta[1] if type(meta) is tuple and len(meta) == 2 else None
        if not (
            type(unit) is tuple and len(unit) == 4 and type(unit[0]) is bytes and all(type(v) is int for v in unit[1:])
        ):
            return "a datetime dtype's state lacks its (unit, count, ...) metadata"
    return None
