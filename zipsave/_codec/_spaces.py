"""Gymnasium spaces <-> JSON-native bodies, so a space is stored and read back without pickle.

A body is a JSON object whose ``"space"`` field names the kind and whose other fields are the
constructor arguments of that kind; sub-spaces are bodies themselves. Arrays and dictionary
keys go through the codec's ``encode_value``/``decode_value`` callbacks, so this module never
invents an array encoding of its own.

Bodies are the same on every supported gymnasium (0.29 to 1.x). A kind or constructor field
that the installed gymnasium lacks (``OneOf``, ``Discrete(dtype=...)``, ``Dict(sort_keys=...)``)
is read whenever its value means what that gymnasium does anyway, and is otherwise refused with
a ``DecodeError`` naming the gymnasium that wrote it and the one installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gymnasium.spaces import Space


from ._space_decode import SpaceDecoder
from ._space_encode import SpaceEncoder
from ._space_kinds import SPACE_KINDS, is_space, is_unused_generator, same_state

__all__ = ["SPACE_KINDS", "decode_space", "encode_space", "is_space", "is_unused_generator", "same_state"]


def encode_space(space: Space, encode_value: Callable[[Any], Any], *, key: str | None = None) -> dict[str, Any]:
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
    return SpaceEncoder(encode_value, key).space(space, "")


def decode_space(
    body: dict[str, Any],
    decode_value: Callable[[Any], Any],
    *,
    key: str | None = None,
    written_with: str | Callable[[], str | None] | None = None,
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
    written_with : str or callable, optional
        The gymnasium version that wrote the body (the archive's ``system_info.txt``), or a
        callable returning it (or ``None``), called only when an error names it. Default
        ``None``: not known.

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
        was expected. A kind or field value that the installed gymnasium cannot represent
        (a ``OneOf`` on gymnasium 0.29, a ``Discrete`` of dtype ``uint8`` where ``Discrete``
        has no ``dtype`` argument) is refused too, naming the gymnasium version that wrote it
        and the one installed.

    Examples
    --------
    >>> decode_space({"space": "Discrete", "n": 3, "start": 0, "dtype": "int64"}, lambda v: v)
    Discrete(3)
    """
    decoder = SpaceDecoder(decode_value, key, written_with)
    space = decoder.space(body, "")
    # Parent constructors may touch their children's generators (Graph and stacked Sequence
    # copy them through batch_space), so the saved states go in once the whole tree exists.
    for sub, generator in decoder.generators:
        sub._np_random = generator
    return space
