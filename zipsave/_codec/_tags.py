"""The keys of a tagged JSON value: SB3's ``":type:"`` and ``":serialized:"``, and zipsave's
pickle-free ``":zipsave:"`` form."""

from __future__ import annotations

__all__ = ["NATIVE_KEY", "RESERVED", "SERIALIZED_KEY", "TYPE_KEY"]

#: SB3's spelling; must stay as it is so SB3 reads zipsave's ``data``.
TYPE_KEY = ":type:"
SERIALIZED_KEY = ":serialized:"
#: zipsave's native form beside them.
NATIVE_KEY = ":zipsave:"
RESERVED = frozenset({TYPE_KEY, SERIALIZED_KEY, NATIVE_KEY})
