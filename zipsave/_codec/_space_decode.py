"""A JSON-native space body -> the gymnasium space, on whichever supported gymnasium is installed."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._bounds import alloc_budget
from .._json import MAX_INT_DIGITS
from .._trust import space_problem
from ..exceptions import DecodeError
from ._space_kinds import (
    ADDED_FIELDS,
    ANY_VALUE,
    DECIMAL,
    FIELDS,
    SPACE_KINDS,
    bit_generators,
    describe,
    gymnasium_version,
    join,
    parameters,
    where,
)

if TYPE_CHECKING:
    from gymnasium.spaces import Space

__all__ = ["SpaceDecoder"]


@functools.cache
def _scalar_masks_are_arrays() -> bool:
    """Whether the installed gymnasium's ``Box(-1.0, 1.0, ())`` holds its masks as 0-d arrays."""
    from gymnasium import spaces

    return type(spaces.Box(-1.0, 1.0, (), np.float32).bounded_below) is np.ndarray


class SpaceDecoder:
    def __init__(
        self,
        decode_value: Callable[[Any], Any],
        key: str | None,
        written_with: str | Callable[[], str | None] | None = None,
    ) -> None:
        self.decode_value = decode_value
        self.key = key
        self.written_with = written_with
        self.generators: list[tuple[Any, np.random.Generator]] = []

    def versions(self) -> str:
        """Which gymnasium wrote the body and which one is installed, as a sentence."""
        written = self.written_with() if callable(self.written_with) else self.written_with
        installed = gymnasium_version()
        if not written:
            return f"gymnasium {installed} is installed here; the archive does not record which gymnasium wrote it."
        return f"It was written with gymnasium {written}; gymnasium {installed} is installed here."

    def unsupported(self, path: str, kind: str, field: str, what: str) -> DecodeError:
        return self.error(
            path,
            f"{what} {self.versions()} Load it with a gymnasium that has this {kind} "
            f"{'kind' if field == 'space' else 'field'} (such as the version that wrote it).",
        )

    def error(self, path: str, message: str) -> DecodeError:
        return DecodeError(f"{where(path)}: {message}", key=self.key)

    def space(self, body: Any, path: str) -> Space:
        if not isinstance(body, dict):
            raise self.error(path, f"expected an object with a `space` field, got {describe(body)}.")
        if "space" not in body:
            raise self.error(
                path,
                f"field `space` is missing (expected one of {', '.join(SPACE_KINDS)}).",
            )
        kind = body["space"]
        if kind not in FIELDS:
            raise self.error(
                path,
                f"field `space` must be one of {', '.join(SPACE_KINDS)}, got {describe(kind)}.",
            )
        required, optional = FIELDS[kind]
        missing = sorted(required - body.keys())
        if missing:
            raise self.error(
                path,
                f"field `{missing[0]}` is missing (a {kind} body needs "
                f"{', '.join(f'`{f}`' for f in sorted(required))}).",
            )
        unexpected = sorted(str(f) for f in body.keys() - required - optional - {"space", "rng"})
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
            raise self.error(path, "gymnasium is not installed; install it to load spaces.") from err

        cls = getattr(spaces, kind, None)
        if cls is None:
            raise self.unsupported(
                path,
                kind,
                "space",
                f"field `space` is {kind}, a kind of space that the installed gymnasium does not have.",
            )
        args, kwargs = getattr(self, f"_{kind.lower()}")(body, path)
        self.fit_fields(cls, kind, kwargs, path)
        try:
            space = cls(*args, **kwargs)
        except Exception as err:  # any rejection by gymnasium is a malformed body
            raise self.error(
                path,
                f"gymnasium rejected the {kind} fields: {type(err).__name__}: "
                f"{str(err).rstrip('.')}. {self.versions()}",
            ) from err
        if kind == "Box":
            self.box_masks(space, body, path)
        problem = space_problem(space)
        if problem:
            raise self.error(path, f"the decoded {kind} is refused: {problem}.")
        if "rng" in body:
            self.generators.append((space, self.rng(body["rng"], path)))
        return space

    def fit_fields(self, cls: type, kind: str, kwargs: dict[str, Any], path: str) -> None:
        """Drop the keyword fields the installed constructor lacks where their value means
        what it does anyway; refuse any other value."""
        accepted = parameters(cls)
        for field in [f for f in kwargs if f not in accepted]:
            implied = ADDED_FIELDS.get((kind, field))
            value = kwargs.pop(field)
            if implied is ANY_VALUE or (implied is not None and value == implied):
                continue
            # Only ADDED_FIELDS can be missing from a supported gymnasium; anything else is
            # a gymnasium this module does not know, named all the same.
            always = "" if implied is None else f" and always uses {implied}"
            raise self.unsupported(
                path,
                kind,
                field,
                f"field `{field}` of the {kind} space is {value}, which the installed gymnasium "
                f"cannot represent: its {kind} has no `{field}` argument{always}.",
            )

    # Field readers. Each returns the value or raises a DecodeError naming the field.

    def int_field(self, body: dict, field: str, path: str) -> int:
        value = body[field]
        if type(value) is not int:
            raise self.error(path, f"field `{field}` must be an int, got {describe(value)}.")
        return value

    def bool_field(self, body: dict, field: str, path: str) -> bool:
        value = body[field]
        if type(value) is not bool:
            raise self.error(path, f"field `{field}` must be true or false, got {describe(value)}.")
        return value

    def dtype_field(self, body: dict, field: str, path: str) -> np.dtype:
        value = body[field]
        if isinstance(value, str):
            try:
                return np.dtype(value)
            except (TypeError, ValueError):  # a comma string numpy cannot parse ("2 i<") is a ValueError
                pass
        raise self.error(
            path,
            f"field `{field}` must be a numpy dtype name such as 'float32' or '<f4', got {describe(value)}.",
        )

    def array_field(self, body: dict, field: str, path: str, kinds: str) -> np.ndarray:
        value = self.value(body[field], field, path)
        if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
            names = {"b": "bool", "i": "int", "u": "uint", "f": "float"}
            raise self.error(
                path,
                f"field `{field}` must decode to a numpy array of "
                f"{' or '.join(names[k] for k in kinds)} values, got {describe(value)}.",
            )
        return value

    def list_field(self, body: dict, field: str, path: str) -> list:
        value = body[field]
        if not isinstance(value, list):
            raise self.error(path, f"field `{field}` must be a list, got {describe(value)}.")
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
                f"field `shape` must be a list of non-negative ints, got {describe(shape)}.",
            )
        low, high = self.array_field(body, "low", path, "biuf"), self.array_field(body, "high", path, "biuf")
        dtype = self.dtype_field(body, "dtype", path)
        # Box broadcasts scalar bounds to the full shape: a few bytes could ask for terabytes.
        need = math.prod(shape) * max(dtype.itemsize, 1)
        budget = alloc_budget(low.nbytes + high.nbytes)
        if need > budget:
            raise self.error(
                path,
                f"a Box of shape {tuple(shape)} needs {need} bytes for its bounds, more than the {budget} "
                "a space decoded from this archive may ask for (64 MiB plus 16 times its saved bounds).",
            )
        return (), {"low": low, "high": high, "shape": tuple(shape), "dtype": dtype}

    def box_masks(self, space: Any, body: dict, path: str) -> None:
        for field in ("bounded_below", "bounded_above"):
            if field not in body and not space.shape and _scalar_masks_are_arrays():
                # gymnasium 1.x compares 0-d bounds to a numpy bool, but a 0-d Box built the
                # usual way, from scalar bounds (as it was saved, as a pickle gives it back),
                # holds 0-d arrays; 0.29 holds numpy bools either way
                setattr(space, field, np.asarray(getattr(space, field)))
            if field in body:
                mask = self.array_field(body, field, path, "b")
                if mask.shape != space.shape:
                    raise self.error(
                        path,
                        f"field `{field}` must have the Box shape {space.shape}, got shape {mask.shape}.",
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
        raise self.error(path, f"field `n` must be an int or a list of ints, got {describe(n)}.")

    def _dict(self, body: dict, path: str) -> tuple[tuple, dict]:
        pairs = []
        seen = set()
        for i, pair in enumerate(self.list_field(body, "spaces", path)):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise self.error(
                    path,
                    f"field `spaces` must hold [key, space] pairs, item {i} is {describe(pair)}.",
                )
            name = self.value(pair[0], f"spaces[{i}]", path)
            try:
                duplicate = name in seen
            except TypeError:
                raise self.error(
                    path,
                    f"field `spaces` item {i} has an unhashable key {describe(name)}.",
                ) from None
            if duplicate:
                raise self.error(path, f"field `spaces` repeats the key {name!r}.")
            seen.add(name)
            pairs.append((name, self.space(pair[1], join(path, f"spaces[{name!r}]"))))
        # A list of pairs is taken in its order; sort_keys only acts on a mapping.
        return (pairs,), {"sort_keys": self.bool_field(body, "sort_keys", path)}

    def _tuple(self, body: dict, path: str) -> tuple[tuple, dict]:
        return (self.children(body, path),), {}

    def _oneof(self, body: dict, path: str) -> tuple[tuple, dict]:
        return (self.children(body, path),), {}

    def children(self, body: dict, path: str) -> list:
        return [
            self.space(sub, join(path, f"spaces[{i}]")) for i, sub in enumerate(self.list_field(body, "spaces", path))
        ]

    def _text(self, body: dict, path: str) -> tuple[tuple, dict]:
        charset = body["charset"]
        if not isinstance(charset, str):
            raise self.error(
                path,
                f"field `charset` must be a string of characters, got {describe(charset)}.",
            )
        return (self.int_field(body, "max_length", path),), {
            "min_length": self.int_field(body, "min_length", path),
            "charset": charset,
        }

    def _sequence(self, body: dict, path: str) -> tuple[tuple, dict]:
        return (self.space(body["feature_space"], join(path, "feature_space")),), {
            "stack": self.bool_field(body, "stack", path)
        }

    def _graph(self, body: dict, path: str) -> tuple[tuple, dict]:
        edge = body["edge_space"]
        return (), {
            "node_space": self.space(body["node_space"], join(path, "node_space")),
            "edge_space": None if edge is None else self.space(edge, join(path, "edge_space")),
        }

    # Random generator state, read against a fresh bit generator of the stored kind, whose
    # own state gives every field's type.

    def rng(self, raw: Any, path: str) -> np.random.Generator:
        name = raw.get("bit_generator") if isinstance(raw, dict) else None
        factory = bit_generators().get(name) if isinstance(name, str) else None
        if factory is None:
            raise self.error(
                path,
                "field `rng` must be an object whose `bit_generator` is one of "
                f"{', '.join(bit_generators())}, got {describe(raw)}.",
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
                raise self.error(path, f"field `{field}` must be an object, got {describe(raw)}.")
            names = sorted(set(template) ^ set(raw))
            if names:
                raise self.error(
                    path,
                    f"field `{field}` must have exactly the fields "
                    f"{', '.join(f'`{k}`' for k in template)}; "
                    f"{', '.join(f'`{k}`' for k in names)} missing or unexpected.",
                )
            return {k: self.rng_state(raw[k], t, f"{field}.{k}", path) for k, t in template.items()}
        if isinstance(template, np.ndarray):
            value = self.value(raw, field, path)
            if not isinstance(value, np.ndarray) or value.shape != template.shape or (value.dtype.kind not in "iu"):
                raise self.error(
                    path,
                    f"field `{field}` must decode to an integer array of shape "
                    f"{template.shape}, got {describe(value)}.",
                )
            return value.astype(template.dtype)
        if isinstance(template, str):
            if raw != template:
                raise self.error(path, f"field `{field}` must be {template!r}, got {describe(raw)}.")
            return raw
        if type(raw) is int:
            return raw
        if isinstance(raw, str) and len(raw) <= MAX_INT_DIGITS + 1 and DECIMAL.fullmatch(raw):
            return int(raw)  # bounded here: a program may lift Python's own limit on digits
        raise self.error(
            path,
            f"field `{field}` must be an int or a decimal string, got {describe(raw)}.",
        )
