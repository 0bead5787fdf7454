"""A gymnasium space -> its JSON-native body (constructor fields; sub-spaces as bodies)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..exceptions import EncodeError
from ._space_kinds import (
    SPACE_KINDS,
    bit_generators,
    describe,
    dtype_name,
    is_unused_generator,
    join,
    kinds,
)

if TYPE_CHECKING:
    from gymnasium.spaces import Space

__all__ = ["SpaceEncoder"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class SpaceEncoder:
    def __init__(self, encode_value: Callable[[Any], Any], key: str | None) -> None:
        self.encode_value = encode_value
        self.key = key

    def error(self, path: str, message: str) -> EncodeError:
        where = f"gymnasium space at `{path}`" if path else "gymnasium space"
        return EncodeError(f"{where}: {message}", key=self.key)

    def space(self, space: Space, path: str) -> dict[str, Any]:
        cls = type(space)
        kind = kinds().get(cls)
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
            "dtype": dtype_name(space.dtype),
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
            "dtype": dtype_name(space.dtype),
        }

    def _multidiscrete(self, space: Any, path: str) -> dict[str, Any]:
        return {
            "nvec": self.encode_value(space.nvec),
            "start": self.encode_value(space.start),
            "dtype": dtype_name(space.dtype),
        }

    def _multibinary(self, space: Any, path: str) -> dict[str, Any]:
        n = space.n
        return {"n": int(n) if isinstance(n, (int, np.integer)) else [int(i) for i in n]}

    def _dict(self, space: Any, path: str) -> dict[str, Any]:
        # A list of pairs rather than an object: keep the order whatever the JSON writer
        # does with object keys, and allow non-string keys.
        return {
            "spaces": [
                [
                    self.encode_value(name),
                    self.space(sub, join(path, f"spaces[{name!r}]")),
                ]
                for name, sub in space.spaces.items()
            ],
            # gymnasium before sort_keys sorted a plain mapping's keys, as sort_keys=True does.
            "sort_keys": bool(getattr(space, "sort_keys", True)),
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
            "feature_space": self.space(space.feature_space, join(path, "feature_space")),
            "stack": bool(space.stack),
        }

    def _graph(self, space: Any, path: str) -> dict[str, Any]:
        edge = space.edge_space
        return {
            "node_space": self.space(space.node_space, join(path, "node_space")),
            "edge_space": None if edge is None else self.space(edge, join(path, "edge_space")),
        }

    def children(self, spaces: Any, path: str) -> list[dict[str, Any]]:
        return [self.space(sub, join(path, f"spaces[{i}]")) for i, sub in enumerate(spaces)]

    def rng(self, space: Space, path: str) -> dict[str, Any] | None:
        # The private attribute: the public np_random property would create a generator.
        generator = space._np_random
        if generator is None or is_unused_generator(generator):
            return None
        bit_generator: Any = getattr(generator, "bit_generator", None)
        if not isinstance(generator, np.random.Generator) or not any(
            type(bit_generator) is cls for cls in bit_generators().values()
        ):
            raise self.error(
                path,
                f"its random generator `{describe(generator)}` is not a numpy Generator over "
                f"one of the bit generators {', '.join(bit_generators())}.",
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
        raise self.error(path, f"unexpected value {describe(value)} in its bit generator state.")
