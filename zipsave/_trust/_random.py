"""Stand-ins for numpy's random-object pickling helpers: they take a bit generator's name
(numpy 1.x), its class (numpy 2) or a bit generator, and a ``ctor`` argument only when it is
the bit-generator helper itself. numpy's originals call whatever callable they are given."""

from __future__ import annotations

import sys
from typing import Any, Callable

__all__ = ["random_helpers"]

_BIT_GENERATOR_CTOR = "numpy.random._pickle.__bit_generator_ctor"


def random_helpers(
    error: Callable[[str], Exception], was_imported: Callable[[Any], bool], describe: Callable[[Any], str]
) -> dict[str, Callable[..., Any]]:
    """The three helpers by dotted name. ``was_imported(obj)`` says whether the pickle imported
    ``obj`` by name (so passed the allowlist); ``describe(obj)`` names it in errors."""

    def bit_generator_ctor(bit_generator: Any = "MT19937") -> Any:
        random = sys.modules["numpy.random"]
        known = getattr(sys.modules["numpy.random._pickle"], "BitGenerators", {})
        if isinstance(bit_generator, str) and type(known.get(bit_generator)) is type:
            return known[bit_generator]()
        if (
            isinstance(bit_generator, type)
            and issubclass(bit_generator, random.BitGenerator)
            and was_imported(bit_generator)
        ):
            return bit_generator()
        raise error(
            f"{_BIT_GENERATOR_CTOR} needs the name of one of numpy's bit generators or a "
            f"bit generator class the pickle imported by name, got {describe(bit_generator)}."
        )

    def source(helper: str, bit_generator: Any, ctor: Any) -> Any:
        if isinstance(bit_generator, sys.modules["numpy.random"].BitGenerator):
            return bit_generator
        if ctor is not None and ctor is not bit_generator_ctor:
            raise error(
                f"numpy.random._pickle.{helper} takes numpy's bit-generator helper as its second argument, "
                f"got {describe(ctor)}."
            )
        return bit_generator_ctor(bit_generator)

    def generator_ctor(bit_generator: Any = "MT19937", bit_generator_ctor: Any = None) -> Any:
        return sys.modules["numpy.random"].Generator(source("__generator_ctor", bit_generator, bit_generator_ctor))

    def randomstate_ctor(bit_generator: Any = "MT19937", bit_generator_ctor: Any = None) -> Any:
        return sys.modules["numpy.random"].RandomState(source("__randomstate_ctor", bit_generator, bit_generator_ctor))

    return {
        _BIT_GENERATOR_CTOR: bit_generator_ctor,
        "numpy.random._pickle.__generator_ctor": generator_ctor,
        "numpy.random._pickle.__randomstate_ctor": randomstate_ctor,
    }
