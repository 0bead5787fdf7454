"""The ``data`` codec: Python values <-> JSON, with gymnasium spaces, numpy and torch values in
a pickle-free native form and SB3's tagged ``":serialized:"`` pickle as the fallback.

JSON-native values are stored as they are. Any other value becomes an object tagged with
SB3's ``":type:"`` and, where it pickles, SB3's ``":serialized:"`` (base64 cloudpickle), so SB3
can read it; beside them zipsave writes a pickle-free native form under ``":zipsave:"``.
Containers are walked, so one odd value only pickles itself. Decoding prefers the native
form; ``":serialized:"`` goes through the restricted unpickler of :mod:`zipsave._trust`.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:  # what __getattr__ below imports on first use, spelled out for type checkers
    from .._format import NATIVE_KEY, RESERVED, SERIALIZED_KEY, TYPE_KEY
    from .._invariants import flat_bytes
    from ._arrays import canonical_array, descr_dtype, dtype_descr, tz_fields
    from ._decode import Decoder
    from ._encode import Encoder, import_path, is_json_native, refuse_nested
    from ._pickling import NoNative, b64, pickle_value, type_hint, unb64
    from ._space_kinds import is_space

# Each name's module, imported on first use (PEP 562), so that a load imports the modules it
# uses and not the whole package. ``{name: module}`` (``module:attribute`` where renamed).
_LAZY: dict[str, str] = {
    "Decoder": "._decode",
    **dict.fromkeys(("Encoder", "import_path", "is_json_native", "refuse_nested"), "._encode"),
    **dict.fromkeys(("NoNative", "b64", "pickle_value", "type_hint", "unb64"), "._pickling"),
    **dict.fromkeys(("canonical_array", "descr_dtype", "dtype_descr", "tz_fields"), "._arrays"),
    "is_space": "._space_kinds",  # the check only: the space codec (``_spaces``) loads with the first space
    **dict.fromkeys(("NATIVE_KEY", "RESERVED", "SERIALIZED_KEY", "TYPE_KEY"), ".._format"),
    # a tensor's bytes, read when a tensor is a ``data`` value
    "flat_bytes": ".._invariants",
}
# Its modules, found as attributes as when this file imported them all.
_SUBMODULES = frozenset(
    {
        "_arrays",
        "_decode",
        "_encode",
        "_numeric",
        "_pickling",
        "_space_decode",
        "_space_encode",
        "_space_kinds",
        "_spaces",
    }
)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)

__all__ = [
    "NATIVE_KEY",
    "RESERVED",
    "SERIALIZED_KEY",
    "TYPE_KEY",
    "Decoder",
    "Encoder",
    "NoNative",
    "b64",
    "canonical_array",
    "descr_dtype",
    "dtype_descr",
    "flat_bytes",
    "import_path",
    "is_json_native",
    "refuse_nested",
    "is_space",
    "pickle_value",
    "type_hint",
    "tz_fields",
    "unb64",
]
