"""The core: collect -> encode -> write on save; open -> decode -> build/apply on load; and the
handler seam through which integrations take part (:mod:`zipsave._registry`).

The core knows nothing of SB3, RLlib or any other library an integration supports.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:  # what __getattr__ below imports on first use, spelled out for type checkers
    from .._registry import ENTRY_HINTS, by_name, handlers
    from .._sign import Trust, as_signer, check_source, embedded_signature, sign_detached
    from .._system_info import parse_system_info, print_system_info
    from .._trust import pickle_globals
    from ._address import check_data_key, check_name, check_path, resolve, set_variable
    from ._app_state import check_app_state
    from ._apply import expected_state_names, load_state_into, restore_parts, set_parameters_from_dict
    from ._build import build, restore_target, restore_tree
    from ._classes import resolve_class
    from ._collect import collect
    from ._component import Component
    from ._folders import (
        check_component,
        data_bytes,
        handler_for,
        load_app_state,
        member_names,
        no_model_error,
        recognising_handler,
    )
    from ._modes import apply_modes, module_modes
    from ._optim_state import check_optimizer_numbers, check_optimizer_state
    from ._options import OPTION_DOCS, LoadOptions, check_custom_objects
    from ._parts import (
        ALWAYS_EXCLUDED_PREFIXES,
        Parts,
        is_live_handle,
        is_stateful,
        recursive_getattr,
        recursive_setattr,
        unwrap,
    )
    from ._patterns import flat, matches, nested, pattern_list
    from ._report import LoadReport
    from ._sched_state import check_scheduler_state, load_stateful
    from ._session import LoadSession
    from ._write import Encoded, check_signable, encode, encoded_size, write

# Each name's module, imported on first use (PEP 562), so that a load imports the modules it
# uses and not the whole package. ``{name: module}`` (``module:attribute`` where renamed).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("check_data_key", "check_name", "check_path", "resolve", "set_variable"), "._address"),
    "check_app_state": "._app_state",
    **dict.fromkeys(
        (
            "expected_state_names",
            "load_state_into",
            "resolve_class",
            "restore_parts",
            "set_parameters_from_dict",
        ),
        "._apply",
    ),
    **dict.fromkeys(("build", "restore_target", "restore_tree"), "._build"),
    **dict.fromkeys(
        (
            "check_component",
            "data_bytes",
            "handler_for",
            "handlers",
            "load_app_state",
            "member_names",
            "no_model_error",
            "recognising_handler",
        ),
        "._folders",
    ),
    "collect": "._collect",
    "resolve_class": "._classes",
    **dict.fromkeys(("apply_modes", "module_modes"), "._modes"),
    "Component": "._component",
    **dict.fromkeys(("OPTION_DOCS", "LoadOptions"), "._options"),
    **dict.fromkeys(("check_optimizer_numbers", "check_optimizer_state"), "._optim_state"),
    **dict.fromkeys(("check_scheduler_state", "load_stateful"), "._sched_state"),
    **dict.fromkeys(
        (
            "ALWAYS_EXCLUDED_PREFIXES",
            "Parts",
            "is_live_handle",
            "is_stateful",
            "recursive_getattr",
            "recursive_setattr",
            "unwrap",
        ),
        "._parts",
    ),
    **dict.fromkeys(("flat", "matches", "nested", "pattern_list"), "._patterns"),
    "LoadReport": "._report",
    "LoadSession": "._session",
    # the handler registry, asked about a folder no dict was saved to or a live object other
    # than a dict: a load of an app state lists no entry points and imports no registry
    **dict.fromkeys(("ENTRY_HINTS", "by_name", "handlers"), ".._registry"),
    # the saved system-info report, read when a load prints it or explains a failure
    **dict.fromkeys(("parse_system_info", "print_system_info"), ".._system_info"),
    # the sign extra, imported only when a load is given `trust=` or a save `sign=`
    **dict.fromkeys(("Trust", "as_signer", "check_source", "embedded_signature", "sign_detached"), ".._sign"),
    # the audit of a pickle's globals, read when a save meets a pickled value (code by value?)
    "pickle_globals": ".._trust",
    **dict.fromkeys(("Encoded", "check_signable", "encode", "encoded_size", "write"), "._write"),
    "check_custom_objects": "._options",
}
# Its modules, found as attributes as when this file imported them all.
_SUBMODULES = frozenset(
    {
        "_address",
        "_app_state",
        "_apply",
        "_members",
        "_build",
        "_classes",
        "_collect",
        "_component",
        "_folders",
        "_inplace",
        "_modes",
        "_names",
        "_optim_state",
        "_options",
        "_parts",
        "_patterns",
        "_report",
        "_sched_state",
        "_session",
        "_write",
    }
)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)

__all__ = [
    "apply_modes",
    "check_signable",
    "ALWAYS_EXCLUDED_PREFIXES",
    "ENTRY_HINTS",
    "OPTION_DOCS",
    "Component",
    "Encoded",
    "LoadOptions",
    "LoadReport",
    "LoadSession",
    "Parts",
    "build",
    "by_name",
    "check_data_key",
    "check_name",
    "check_path",
    "check_app_state",
    "check_component",
    "check_custom_objects",
    "check_optimizer_numbers",
    "check_optimizer_state",
    "check_scheduler_state",
    "load_stateful",
    "collect",
    "data_bytes",
    "member_names",
    "module_modes",
    "encode",
    "encoded_size",
    "expected_state_names",
    "flat",
    "handler_for",
    "handlers",
    "is_live_handle",
    "is_stateful",
    "load_app_state",
    "load_state_into",
    "matches",
    "nested",
    "pattern_list",
    "no_model_error",
    "parse_system_info",
    "pickle_globals",
    "print_system_info",
    "recognising_handler",
    "recursive_getattr",
    "recursive_setattr",
    "resolve",
    "resolve_class",
    "restore_parts",
    "restore_target",
    "restore_tree",
    "set_parameters_from_dict",
    "set_variable",
    "Trust",
    "as_signer",
    "check_source",
    "embedded_signature",
    "sign_detached",
    "unwrap",
    "write",
]
