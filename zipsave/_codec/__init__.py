"""The ``data`` codec: Python values <-> JSON, with gymnasium spaces, numpy and torch values in
a pickle-free native form and SB3's tagged ``":serialized:"`` pickle as the fallback.

JSON-native values are stored as they are. Any other value becomes an object tagged with
SB3's ``":type:"`` and, where it pickles, SB3's ``":serialized:"`` (base64 cloudpickle), so SB3
can read it; beside them zipsave writes a pickle-free native form under ``":zipsave:"``.
Containers are walked, so one odd value only pickles itself. Decoding prefers the native
form; ``":serialized:"`` goes through the restricted unpickler of :mod:`zipsave._trust`.
"""

from ._decode import Decoder
from ._encode import Encoder, import_path, is_json_native
from ._pickling import type_hint
from ._spaces import is_space
from ._tags import NATIVE_KEY, RESERVED, SERIALIZED_KEY, TYPE_KEY

__all__ = [
    "NATIVE_KEY",
    "RESERVED",
    "SERIALIZED_KEY",
    "TYPE_KEY",
    "Decoder",
    "Encoder",
    "import_path",
    "is_json_native",
    "is_space",
    "type_hint",
]
