"""The core: collect -> encode -> write on save; open -> decode -> build/apply on load; and the
handler seam through which integrations take part (:mod:`zipsave._registry`).

The core knows nothing of SB3, RLlib or any other library an integration supports.
"""

from ._address import check_data_key, check_name, check_path, resolve, set_variable
from ._apply import check_app_state, expected_state_names, load_state_into, restore_parts
from ._apply import set_parameters_from_dict
from ._build import build, check_component, handler_for, load_app_state, member_names, restore_target, restore_tree
from ._build import data_bytes
from ._collect import collect
from ._component import Component
from ._options import OPTION_DOCS, LoadOptions, check_custom_objects
from ._parts import (
    ALWAYS_EXCLUDED_PREFIXES,
    Parts,
    flat,
    is_live_handle,
    is_stateful,
    matches,
    nested,
    recursive_getattr,
    recursive_setattr,
    unwrap,
)
from ._report import LoadReport
from ._session import LoadSession
from ._write import Encoded, encode, encoded_size, write

__all__ = [
    "ALWAYS_EXCLUDED_PREFIXES",
    "OPTION_DOCS",
    "Component",
    "Encoded",
    "LoadOptions",
    "LoadReport",
    "LoadSession",
    "Parts",
    "build",
    "check_data_key",
    "check_name",
    "check_path",
    "check_app_state",
    "check_component",
    "check_custom_objects",
    "collect",
    "data_bytes",
    "member_names",
    "encode",
    "encoded_size",
    "expected_state_names",
    "flat",
    "handler_for",
    "is_live_handle",
    "is_stateful",
    "load_app_state",
    "load_state_into",
    "matches",
    "nested",
    "recursive_getattr",
    "recursive_setattr",
    "resolve",
    "restore_parts",
    "restore_target",
    "restore_tree",
    "set_parameters_from_dict",
    "set_variable",
    "unwrap",
    "write",
]
