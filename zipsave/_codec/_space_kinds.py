"""The gymnasium space kinds zipsave stores, their constructor fields per gymnasium version, and
the small rules the space encoder and decoder share."""

from __future__ import annotations

import functools
import inspect
import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "ADDED_FIELDS",
    "ANY_VALUE",
    "DECIMAL",
    "FIELDS",
    "SPACE_KINDS",
    "bit_generators",
    "describe",
    "dtype_name",
    "gymnasium_version",
    "is_space",
    "is_unused_generator",
    "join",
    "kinds",
    "parameters",
    "same_state",
    "where",
]

#: The space kinds with a native form, by the name stored in a body's ``"space"`` field.
SPACE_KINDS = (
    "Box",
    "Dict",
    "Discrete",
    "Graph",
    "MultiBinary",
    "MultiDiscrete",
    "OneOf",
    "Sequence",
    "Text",
    "Tuple",
)

# Every field a body of each kind may hold besides "space" and "rng"; optional ones in the
# second set.
FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "Box": (
        frozenset({"low", "high", "shape", "dtype"}),
        frozenset({"bounded_below", "bounded_above"}),
    ),
    "Discrete": (frozenset({"n", "start", "dtype"}), frozenset()),
    "MultiDiscrete": (frozenset({"nvec", "start", "dtype"}), frozenset()),
    "MultiBinary": (frozenset({"n"}), frozenset()),
    "Dict": (frozenset({"spaces", "sort_keys"}), frozenset()),
    "Tuple": (frozenset({"spaces"}), frozenset()),
    "Text": (frozenset({"max_length", "min_length", "charset"}), frozenset()),
    "Sequence": (frozenset({"feature_space", "stack"}), frozenset()),
    "Graph": (frozenset({"node_space", "edge_space"}), frozenset()),
    "OneOf": (frozenset({"spaces"}), frozenset()),
}

# Constructor fields that older gymnasium versions lack (``Discrete.dtype`` came in 1.2.2,
# ``Dict.sort_keys`` in 1.4.0), with what such a version does without them: the value a body
# must hold to be read there, or ANY_VALUE for a field that never changes the built space
# (``sort_keys`` only sorts a mapping, and the decoder hands gymnasium an ordered list of pairs).
ANY_VALUE = object()
ADDED_FIELDS: dict[tuple[str, str], Any] = {
    ("Discrete", "dtype"): np.dtype(np.int64),
    ("Dict", "sort_keys"): ANY_VALUE,
}

DECIMAL = re.compile(r"-?[0-9]+")


@functools.cache
def bit_generators() -> dict[str, Callable[[int], np.random.BitGenerator]]:
    """numpy's bit generators by name: an explicit table rather than ``getattr(np.random,
    name)``, so a stored name never reaches an arbitrary attribute lookup. Built on first use:
    ``numpy.random`` costs a first save or load 5 ms to import when no space needs it."""
    return {
        "MT19937": np.random.MT19937,
        "PCG64": np.random.PCG64,
        "PCG64DXSM": np.random.PCG64DXSM,
        "Philox": np.random.Philox,
        "SFC64": np.random.SFC64,
    }


def is_space(obj: Any) -> bool:
    """Tell whether ``obj`` is a gymnasium space (of any class, known kind or not).

    Parameters
    ----------
    obj : object
        Any value.

    Returns
    -------
    bool
        ``True`` for an instance of ``gymnasium.spaces.Space``. Gymnasium is not imported:
        if it has not been imported yet, no value can be one of its spaces.

    Examples
    --------
    >>> from gymnasium.spaces import Discrete
    >>> is_space(Discrete(3)), is_space(3)
    (True, False)
    """
    spaces = sys.modules.get("gymnasium.spaces")
    return spaces is not None and isinstance(obj, spaces.Space)


@functools.cache
def kinds() -> dict[type, str]:
    from gymnasium import spaces

    # A kind this gymnasium lacks (OneOf before 1.0) has no instances to encode.
    classes = {name: getattr(spaces, name, None) for name in SPACE_KINDS}
    return {cls: name for name, cls in classes.items() if cls is not None}


@functools.cache
def parameters(cls: type) -> frozenset[str]:
    """The argument names of the installed gymnasium's constructor of ``cls``."""
    return frozenset(inspect.signature(cls).parameters)


def gymnasium_version() -> str:
    import gymnasium

    return str(gymnasium.__version__)


def dtype_name(dtype: Any) -> str:
    dtype = np.dtype(dtype)
    # "float32" reads better than "<f4" in a zip explorer; `.str` keeps a non-native byte
    # order exact where the name would lose it.
    try:
        if np.dtype(dtype.name) == dtype:
            return dtype.name
    except TypeError:
        pass
    return dtype.str


def describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def where(path: str) -> str:
    return f"gymnasium space body at `{path}`" if path else "gymnasium space body"


def is_unused_generator(generator: Any) -> bool:
    """Whether ``generator`` was seeded from OS entropy and has not drawn a number since.

    Such a generator carries no information: a fresh unseeded one is as good. Gymnasium makes
    them behind the user's back (``Graph`` and stacked ``Sequence`` deep-copy their sub-spaces'
    generators while being built), and storing one would break "same state in, same bytes out".
    A seed given on purpose is a small integer; numpy's own entropy is 128 random bits, so a
    seed sequence with more than 64 bits of entropy and no spawned children is taken for
    numpy's. A generator that has drawn numbers is always stored: its position matters.
    """
    bit_generator: Any = getattr(generator, "bit_generator", None)
    # numpy before 1.25 has the seed sequence only as the private `_seed_seq`.
    seed_seq = getattr(bit_generator, "seed_seq", None) or getattr(bit_generator, "_seed_seq", None)
    if not isinstance(seed_seq, np.random.SeedSequence):
        return False
    entropy = seed_seq.entropy
    if (
        not (isinstance(entropy, int) and entropy.bit_length() > 64)
        or seed_seq.spawn_key
        or seed_seq.n_children_spawned
    ):
        return False
    try:
        fresh = type(bit_generator)(seed_seq).state
    except Exception:  # noqa: BLE001 - one that cannot be rebuilt this way keeps its state
        return False
    return same_state(fresh, bit_generator.state)


def same_state(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return type(a) is type(b) and a == b


def join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part
