"""Gymnasium spaces <-> JSON-native bodies, so a space is stored and read back without pickle.

A body is a JSON object whose ``"space"`` field names the kind and whose other fields are the
constructor arguments of that kind; sub-spaces are bodies themselves. Arrays and dictionary
keys go through the codec's ``encode_value``/``decode_value`` callbacks, so this module never
invents an array encoding of its own.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..exceptions import DecodeError, EncodeError

if TYPE_CHECKING:
    from gymnasium.spaces import Space

__all__ = ["SPACE_KINDS", "decode_space", "encode_space", "is_space", "is_unused_generator"]

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
_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
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

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_DECIMAL = re.compile(r"-?[0-9]+")

# An explicit table rather than getattr(np.random, name): a stored name must never reach an
# arbitrary attribute lookup.
_BIT_GENERATORS: dict[str, Callable[[int], np.random.BitGenerator]] = {
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


def encode_space(
    space: Space, encode_value: Callable[[Any], Any], *, key: str | None = None
) -> dict[str, Any]:
    """Turn a gymnasium space into a JSON-native body.

    Parameters
    ----------
    space : gymnasium.spaces.Space
        A space of one of the kinds in :data:`SPACE_KINDS`, exactly that class (a subclass
        would lose its class in the native form). Sub-spaces are encoded recursively.
    encode_value : callable
        The codec's callback turning a non-JSON value (numpy array, tuple, ...) into JSON;
        used for arrays and for non-string ``Dict`` keys.
    key : str, optional
        The ``data`` key being encoded, only to name it in an error. Default ``None``.

    Returns
    -------
    dict
        ``{"space": kind, <constructor fields>...}``, plus ``"rng"`` (the bit generator
        state) for every space whose random generator carries information: it was seeded
        explicitly, or numbers were drawn from it. A generator seeded from OS entropy and never
        used is left out, so an unseeded space always encodes to the same body.

    Raises
    ------
    EncodeError
        If the space (or a sub-space) is of a class without a native form, or its random
        generator is not a ``numpy.random.Generator`` over a numpy bit generator. The codec
        then stores the value with pickle instead.

    Examples
    --------
    >>> from gymnasium.spaces import Discrete
    >>> encode_space(Discrete(3), encode_value=lambda v: v)
    {'space': 'Discrete', 'n': 3, 'start': 0, 'dtype': 'int64'}
    """
    return _Encoder(encode_value, key).space(space, "")


def decode_space(
    body: dict[str, Any], decode_value: Callable[[Any], Any], *, key: str | None = None
) -> Space:
    """Rebuild a gymnasium space from a body written by :func:`encode_space`.

    Parameters
    ----------
    body : dict
        The JSON-native body.
    decode_value : callable
        The codec's inverse of ``encode_value``.
    key : str, optional
        The ``data`` key being decoded, only to name it in an error. Default ``None``.

    Returns
    -------
    gymnasium.spaces.Space
        A space of the same class, equal (``==``) to the encoded one, with the same dtype and,
        where an ``"rng"`` field was stored, the same random generator state, so it draws the
        same samples. Random states of sub-spaces are restored too.

    Raises
    ------
    DecodeError
        If the body is not an object, names an unknown kind, misses a field, has a field of
        the wrong type or an unexpected field, or holds values gymnasium rejects. The message
        names the place inside the body (``spaces['obs'].node_space``), the field and what
        was expected.

    Examples
    --------
    >>> decode_space({"space": "Discrete", "n": 3, "start": 0, "dtype": "int64"}, lambda v: v)
    Discrete(3)
    """
    decoder = _Decoder(decode_value, key)
    space = decoder.space(body, "")
    # Parent constructors may touch their children's generators (Graph and stacked Sequence
    # copy them through batch_space), so the saved states go in once the whole tree exists.
    for sub, generator in decoder.generators:
        sub._np_random = generator
    return space


@functools.cache
def _kinds() -> dict[type, str]:
    from gymnasium import spaces

    return {getattr(spaces, name): name for name in SPACE_KINDS}


def _dtype_name(dtype: Any) -> str:
    dtype = np.dtype(dtype)
    # "float32" reads better than "<f4" in a zip explorer; `.str` keeps a non-native byte
    # order exact where the name would lose it.
    try:
        if np.dtype(dtype.name) == dtype:
            return dtype.name
    except TypeError:
        pass
    return dtype.str


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _where(path: str) -> str:
    return f"gymnasium space body at `{path}`" if path else "gymnasium space body"


class _Encoder:
    def __init__(self, encode_value: Callable[[Any], Any], key: str | None) -> None:
        self.encode_value = encode_value
        self.key = key

    def error(self, path: str, message: str) -> EncodeError:
        where = f"gymnasium space at `{path}`" if path else "gymnasium space"
        return EncodeError(f"{where}: {message}", key=self.key)

    def space(self, space: Space, path: str) -> dict[str, Any]:
        cls = type(space)
        kind = _kinds().get(cls)
        if kind is None:
            raise self.error(
                path,
                f"`{cls.__module__}.{cls.__qualname__}` has no native form; only the exact "
                f"gymnasium classes {', '.join(SPACE_KINDS)} have one (a subclass would "
                "come back as its base class).",
            )
        body: dict[str, Any] = {"space": kind}
        body.update(getattr(self, f"_{kind.lower()}")(space, path))
        rng = self.rng(space, path)
        if rng is not None:
            body["rng"] = rng
        return body

    def _box(self, space: Any, path: str) -> dict[str, Any]:
        enc = self.encode_value
        body = {
            "low": enc(space.low),
            "high": enc(space.high),
            "shape": [int(dim) for dim in space.shape],
            "dtype": _dtype_name(space.dtype),
        }
        # An integer Box built with infinite bounds stores the dtype limits in low/high and
        # remembers the infinity only in these masks, which change how it samples.
        implied = {
            "bounded_below": -np.inf < space.low,
            "bounded_above": space.high < np.inf,
        }
        for field, mask in implied.items():
            actual = np.asarray(getattr(space, field), dtype=bool)
            if not np.array_equal(actual, mask):
                body[field] = enc(actual)
        return body

    def _discrete(self, space: Any, path: str) -> dict[str, Any]:
        return {
            "n": int(space.n),
            "start": int(space.start),
            "dtype": _dtype_name(space.dtype),
        }

    def _multidiscrete(self, space: Any, path: str) -> dict[str, Any]:
        return {
            "nvec": self.encode_value(space.nvec),
            "start": self.encode_value(space.start),
            "dtype": _dtype_name(space.dtype),
        }

    def _multibinary(self, space: Any, path: str) -> dict[str, Any]:
        n = space.n
        return {
            "n": int(n) if isinstance(n, (int, np.integer)) else [int(i) for i in n]
        }

    def _dict(self, space: Any, path: str) -> dict[str, Any]:
        # A list of pairs rather than an object: keep the order whatever the JSON writer
        # does with object keys, and allow non-string keys.
        return {
            "spaces": [
                [
                    self.encode_value(name),
                    self.space(sub, _join(path, f"spaces[{name!r}]")),
                ]
                for name, sub in space.spaces.items()
            ],
            "sort_keys": bool(space.sort_keys),
        }

    def _tuple(self, space: Any, path: str) -> dict[str, Any]:
        return {"spaces": self.children(space.spaces, path)}

    def _oneof(self, space: Any, path: str) -> dict[str, Any]:
        return {"spaces": self.children(space.spaces, path)}

    def _text(self, space: Any, path: str) -> dict[str, Any]:
        # character_list is the order sampling draws from: sorted when the charset was given
        # as a set, as written when given as a string.
        return {
            "max_length": int(space.max_length),
            "min_length": int(space.min_length),
            "charset": "".join(space.character_list),
        }

    def _sequence(self, space: Any, path: str) -> dict[str, Any]:
        return {
            "feature_space": self.space(
                space.feature_space, _join(path, "feature_space")
            ),
            "stack": bool(space.stack),
        }

    def _graph(self, space: Any, path: str) -> dict[str, Any]:
        edge = space.edge_space
        return {
            "node_space": self.space(space.node_space, _join(path, "node_space")),
            "edge_space": None
            if edge is None
            else self.space(edge, _join(path, "edge_space")),
        }

    def children(self, spaces: Any, path: str) -> list[dict[str, Any]]:
        return [
            self.space(sub, _join(path, f"spaces[{i}]")) for i, sub in enumerate(spaces)
        ]

    def rng(self, space: Space, path: str) -> dict[str, Any] | None:
        # The private attribute: the public np_random property would create a generator.
        generator = space._np_random
        if generator is None or is_unused_generator(generator):
            return None
        bit_generator: Any = getattr(generator, "bit_generator", None)
        if not isinstance(generator, np.random.Generator) or not any(
            type(bit_generator) is cls for cls in _BIT_GENERATORS.values()
        ):
            raise self.error(
                path,
                f"its random generator `{_describe(generator)}` is not a numpy Generator over "
                f"one of the bit generators {', '.join(_BIT_GENERATORS)}.",
            )
        return self.rng_state(bit_generator.state, path)

    def rng_state(self, value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return {str(k): self.rng_state(v, path) for k, v in value.items()}
        if isinstance(value, np.ndarray):
            return self.encode_value(value)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            value = int(value)
            # orjson refuses integers beyond 64 bits; PCG64's 128-bit state needs strings.
            return value if _INT64_MIN <= value <= _INT64_MAX else str(value)
        if isinstance(value, str):
            return value
        raise self.error(
            path, f"unexpected value {_describe(value)} in its bit generator state."
        )


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
    seed_seq = getattr(bit_generator, "seed_seq", None)
    if not isinstance(seed_seq, np.random.SeedSequence):
        return False
    entropy = seed_seq.entropy
    if not (isinstance(entropy, int) and entropy.bit_length() > 64) or seed_seq.spawn_key or seed_seq.n_children_spawned:
        return False
    try:
        fresh = type(bit_generator)(seed_seq).state
    except Exception:  # noqa: BLE001 - one that cannot be rebuilt this way keeps its state
        return False
    return _same_state(fresh, bit_generator.state)


def _same_state(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return type(a) is type(b) and a == b


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


class _Decoder:
    def __init__(self, decode_value: Callable[[Any], Any], key: str | None) -> None:
        self.decode_value = decode_value
        self.key = key
        self.generators: list[tuple[Any, np.random.Generator]] = []

    def error(self, path: str, message: str) -> DecodeError:
        return DecodeError(f"{_where(path)}: {message}", key=self.key)

    def space(self, body: Any, path: str) -> Space:
        if not isinstance(body, dict):
            raise self.error(
                path, f"expected an object with a `space` field, got {_describe(body)}."
            )
        if "space" not in body:
            raise self.error(
                path,
                f"field `space` is missing (expected one of {', '.join(SPACE_KINDS)}).",
            )
        kind = body["space"]
        if kind not in _FIELDS:
            raise self.error(
                path,
                f"field `space` must be one of {', '.join(SPACE_KINDS)}, got {_describe(kind)}.",
            )
        required, optional = _FIELDS[kind]
        missing = sorted(required - body.keys())
        if missing:
            raise self.error(
                path,
                f"field `{missing[0]}` is missing (a {kind} body needs "
                f"{', '.join(f'`{f}`' for f in sorted(required))}).",
            )
        unexpected = sorted(
            str(f) for f in body.keys() - required - optional - {"space", "rng"}
        )
        if unexpected:
            raise self.error(
                path,
                f"unexpected field(s) {', '.join(f'`{f}`' for f in unexpected)} in a {kind} "
                f"body (allowed: {', '.join(f'`{f}`' for f in sorted(required | optional))}, "
                "`rng`).",
            )
        try:
            from gymnasium import spaces
        except ImportError as err:
            raise self.error(
                path, "gymnasium is not installed; install it to load spaces."
            ) from err

        args = getattr(self, f"_{kind.lower()}")(body, path)
        cls = getattr(spaces, kind)
        try:
            space = cls(*args[0], **args[1])
        except Exception as err:  # any rejection by gymnasium is a malformed body
            raise self.error(
                path,
                f"gymnasium rejected the {kind} fields: {type(err).__name__}: {err}",
            ) from err
        if kind == "Box":
            self.box_masks(space, body, path)
        if "rng" in body:
            self.generators.append((space, self.rng(body["rng"], path)))
        return space

    # Field readers. Each returns the value or raises a DecodeError naming the field.

    def int_field(self, body: dict, field: str, path: str) -> int:
        value = body[field]
        if type(value) is not int:
            raise self.error(
                path, f"field `{field}` must be an int, got {_describe(value)}."
            )
        return value

    def bool_field(self, body: dict, field: str, path: str) -> bool:
        value = body[field]
        if type(value) is not bool:
            raise self.error(
                path, f"field `{field}` must be true or false, got {_describe(value)}."
            )
        return value

    def dtype_field(self, body: dict, field: str, path: str) -> np.dtype:
        value = body[field]
        if isinstance(value, str):
            try:
                return np.dtype(value)
            except TypeError:
                pass
        raise self.error(
            path,
            f"field `{field}` must be a numpy dtype name such as 'float32' or '<f4', "
            f"got {_describe(value)}.",
        )

    def array_field(self, body: dict, field: str, path: str, kinds: str) -> np.ndarray:
        value = self.value(body[field], field, path)
        if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
            names = {"b": "bool", "i": "int", "u": "uint", "f": "float"}
            raise self.error(
                path,
                f"field `{field}` must decode to a numpy array of "
                f"{' or '.join(names[k] for k in kinds)} values, got {_describe(value)}.",
            )
        return value

    def list_field(self, body: dict, field: str, path: str) -> list:
        value = body[field]
        if not isinstance(value, list):
            raise self.error(
                path, f"field `{field}` must be a list, got {_describe(value)}."
            )
        return value

    def value(self, raw: Any, field: str, path: str) -> Any:
        try:
            return self.decode_value(raw)
        except DecodeError:
            raise
        except Exception as err:  # the codec's own failure, translated with its cause
            raise self.error(
                path,
                f"field `{field}` could not be decoded: {type(err).__name__}: {err}",
            ) from err

    # Kinds: each returns the constructor's (args, kwargs).

    def _box(self, body: dict, path: str) -> tuple[tuple, dict]:
        shape = self.list_field(body, "shape", path)
        if not all(type(dim) is int and dim >= 0 for dim in shape):
            raise self.error(
                path,
                f"field `shape` must be a list of non-negative ints, got {_describe(shape)}.",
            )
        return (), {
            "low": self.array_field(body, "low", path, "biuf"),
            "high": self.array_field(body, "high", path, "biuf"),
            "shape": tuple(shape),
            "dtype": self.dtype_field(body, "dtype", path),
        }

    def box_masks(self, space: Any, body: dict, path: str) -> None:
        for field in ("bounded_below", "bounded_above"):
            if field in body:
                mask = self.array_field(body, field, path, "b")
                if mask.shape != space.shape:
                    raise self.error(
                        path,
                        f"field `{field}` must have the Box shape {space.shape}, "
                        f"got shape {mask.shape}.",
                    )
                setattr(space, field, mask.copy())

    def _discrete(self, body: dict, path: str) -> tuple[tuple, dict]:
        return (), {
            "n": self.int_field(body, "n", path),
            "start": self.int_field(body, "start", path),
            "dtype": self.dtype_field(body, "dtype", path),
        }

    def _multidiscrete(self, body: dict, path: str) -> tuple[tuple, dict]:
        return (), {
            "nvec": self.array_field(body, "nvec", path, "iu"),
            "start": self.array_field(body, "start", path, "iu"),
            "dtype": self.dtype_field(body, "dtype", path),
        }

    def _multibinary(self, body: dict, path: str) -> tuple[tuple, dict]:
        n = body["n"]
        if type(n) is int:
            return (n,), {}
        if isinstance(n, list) and all(type(i) is int for i in n):
            return (tuple(n),), {}
        raise self.error(
            path, f"field `n` must be an int or a list of ints, got {_describe(n)}."
        )

    def _dict(self, body: dict, path: str) -> tuple[tuple, dict]:
        pairs = []
        seen = set()
        for i, pair in enumerate(self.list_field(body, "spaces", path)):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise self.error(
                    path,
                    f"field `spaces` must hold [key, space] pairs, item {i} is {_describe(pair)}.",
                )
            name = self.value(pair[0], f"spaces[{i}]", path)
            try:
                duplicate = name in seen
            except TypeError:
                raise self.error(
                    path,
                    f"field `spaces` item {i} has an unhashable key {_describe(name)}.",
                ) from None
            if duplicate:
                raise self.error(path, f"field `spaces` repeats the key {name!r}.")
            seen.add(name)
            pairs.append((name, self.space(pair[1], _join(path, f"spaces[{name!r}]"))))
        # A list of pairs is taken in its order; sort_keys only acts on a mapping.
        return (pairs,), {"sort_keys": self.bool_field(body, "sort_keys", path)}

    def _tuple(self, body: dict, path: str) -> tuple[tuple, dict]:
        return (self.children(body, path),), {}

    def _oneof(self, body: dict, path: str) -> tuple[tuple, dict]:
        return (self.children(body, path),), {}

    def children(self, body: dict, path: str) -> list:
        return [
            self.space(sub, _join(path, f"spaces[{i}]"))
            for i, sub in enumerate(self.list_field(body, "spaces", path))
        ]

    def _text(self, body: dict, path: str) -> tuple[tuple, dict]:
        charset = body["charset"]
        if not isinstance(charset, str):
            raise self.error(
                path,
                f"field `charset` must be a string of characters, got {_describe(charset)}.",
            )
        return (self.int_field(body, "max_length", path),), {
            "min_length": self.int_field(body, "min_length", path),
            "charset": charset,
        }

    def _sequence(self, body: dict, path: str) -> tuple[tuple, dict]:
        return (self.space(body["feature_space"], _join(path, "feature_space")),), {
            "stack": self.bool_field(body, "stack", path)
        }

    def _graph(self, body: dict, path: str) -> tuple[tuple, dict]:
        edge = body["edge_space"]
        return (), {
            "node_space": self.space(body["node_space"], _join(path, "node_space")),
            "edge_space": None
            if edge is None
            else self.space(edge, _join(path, "edge_space")),
        }

    # Random generator state, read against a fresh bit generator of the stored kind, whose
    # own state gives every field's type.

    def rng(self, raw: Any, path: str) -> np.random.Generator:
        name = raw.get("bit_generator") if isinstance(raw, dict) else None
        factory = _BIT_GENERATORS.get(name) if isinstance(name, str) else None
        if factory is None:
            raise self.error(
                path,
                "field `rng` must be an object whose `bit_generator` is one of "
                f"{', '.join(_BIT_GENERATORS)}, got {_describe(raw)}.",
            )
        bit_generator = factory(0)
        state = self.rng_state(raw, bit_generator.state, "rng", path)
        try:
            bit_generator.state = state
        except Exception as err:  # numpy's own validation of the state values
            raise self.error(
                path,
                f"field `rng` is not a valid {name} state: {type(err).__name__}: {err}",
            ) from err
        return np.random.Generator(bit_generator)

    def rng_state(self, raw: Any, template: Any, field: str, path: str) -> Any:
        if isinstance(template, dict):
            if not isinstance(raw, dict):
                raise self.error(
                    path, f"field `{field}` must be an object, got {_describe(raw)}."
                )
            names = sorted(set(template) ^ set(raw))
            if names:
                raise self.error(
                    path,
                    f"field `{field}` must have exactly the fields "
                    f"{', '.join(f'`{k}`' for k in template)}; "
                    f"{', '.join(f'`{k}`' for k in names)} missing or unexpected.",
                )
            return {
                k: self.rng_state(raw[k], t, f"{field}.{k}", path)
                for k, t in template.items()
            }
        if isinstance(template, np.ndarray):
            value = self.value(raw, field, path)
            if (
                not isinstance(value, np.ndarray)
                or value.shape != template.shape
                or (value.dtype.kind not in "iu")
            ):
                raise self.error(
                    path,
                    f"field `{field}` must decode to an integer array of shape "
                    f"{template.shape}, got {_describe(value)}.",
                )
            return value.astype(template.dtype)
        if isinstance(template, str):
            if raw != template:
                raise self.error(
                    path, f"field `{field}` must be {template!r}, got {_describe(raw)}."
                )
            return raw
        if type(raw) is int:
            return raw
        if isinstance(raw, str) and _DECIMAL.fullmatch(raw):
            return int(raw)
        raise self.error(
            path,
            f"field `{field}` must be an int or a decimal string, got {_describe(raw)}.",
        )
