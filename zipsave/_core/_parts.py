"""What an archive folder is made of (``Parts``), and the small rules every layer above uses to
find stateful objects, live handles and attribute paths."""

from __future__ import annotations

import concurrent.futures
import io
import logging
import queue
import socket
import subprocess
import sys
import threading
import types
from typing import Any, Iterable

import numpy as np
import torch

__all__ = [
    "index_of",
    "ALWAYS_EXCLUDED_PREFIXES",
    "PLAIN_VALUES",
    "Parts",
    "container_items",
    "is_environment",
    "is_live_handle",
    "is_stateful",
    "recursive_getattr",
    "recursive_setattr",
    "unwrap",
]

ALWAYS_EXCLUDED_PREFIXES = ("_zipsave", "zipsave_")


#: Live handles of the standard library, by type: a lock-holding object (a semaphore, a queue,
#: a thread pool) cannot be pickled, and the constructor makes a fresh one on load anyway.
_LIVE_TYPES = (
    logging.Logger,
    logging.Handler,
    io.IOBase,
    types.ModuleType,
    types.GeneratorType,
    types.AsyncGeneratorType,
    types.CoroutineType,
    socket.socket,
    threading.Thread,
    threading.Semaphore,
    threading.Barrier,
    threading.Condition,
    threading.Event,
    queue.Queue,
    queue.SimpleQueue,
    concurrent.futures.Executor,
    concurrent.futures.Future,
    subprocess.Popen,
)


def is_live_handle(value: Any) -> bool:
    """Environments, loggers, files, locks, threads, queues, pools: state that cannot be
    meaningfully saved."""
    if isinstance(value, _LIVE_TYPES):
        return True
    # multiprocessing's queues, locks and pools, without importing multiprocessing.
    if any(c.__module__.startswith(("multiprocessing.", "_multiprocessing")) for c in type(value).__mro__[:-1]):
        return True
    if type(value).__name__ in ("lock", "RLock", "_thread.lock", "Condition", "Event", "SummaryWriter"):
        return True
    return is_environment(value)


def is_environment(value: Any) -> bool:
    """A gymnasium ``Env`` or ``VectorEnv`` (wrappers too), or an SB3 ``VecEnv``."""
    gymnasium = sys.modules.get("gymnasium")  # not imported yet: no value can be one of its envs
    if gymnasium is not None and isinstance(value, (gymnasium.Env, gymnasium.vector.VectorEnv)):
        return True
    # SB3's VecEnv and its wrappers, without importing SB3.
    return callable(getattr(value, "step_async", None)) and callable(getattr(value, "step_wait", None))


def is_stateful(value: Any) -> bool:
    return (
        not isinstance(value, type)
        and callable(getattr(value, "state_dict", None))
        and callable(getattr(value, "load_state_dict", None))
    )


#: The bookkeeping every ``torch.nn.Module`` keeps in its ``__dict__`` (hooks, the registries
#: of children, parameters and buffers, the training flag). None of it is an attribute the
#: user set: a module's own attributes are its children, parameters and buffers.
MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))

#: How archives written before 0.2 named the members of a module's children.
LEGACY_CHILD_PREFIX = "_modules."


def index_of(part: str) -> int | None:
    """The list index (or int key) a path part names: ASCII digits, at most 18 of them, else
    ``None``. ``str.isdigit`` admits ``²``, which ``int`` refuses, and ``int`` refuses more than
    4300 digits: a folder name reaching either raised ``ValueError`` out of a restore."""
    return int(part) if part.isascii() and part.isdigit() and len(part) <= 18 else None


def recursive_getattr(obj: Any, path: str) -> Any:
    """``a.b.0.c``: attributes, and indexes into lists/dicts holding stateful objects (a dict
    with int keys is indexed by the int: ``{0: net}`` holds ``nets.0``)."""
    for part in path.split("."):
        index = index_of(part)
        if isinstance(obj, (list, tuple)) and index is not None:
            obj = obj[index]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, dict) and index is not None and index in obj:
            obj = obj[index]
        else:
            obj = getattr(obj, part)
    return obj


def recursive_setattr(obj: Any, path: str, value: Any) -> None:
    head, _, last = path.rpartition(".")
    setattr(recursive_getattr(obj, head) if head else obj, last, value)


def unwrap(module: Any) -> Any:
    return getattr(module, "_orig_mod", module)  # torch.compile'd modules save un-prefixed


class Parts:
    """What one object is saved as: ``data`` values, state dicts, loose tensors, components.

    A plain class, not a dataclass (a dataclass compiles its methods at import, time every
    first call paid). Its fields:

    - ``data``: the ``data`` values by key;
    - ``state``: ``(name, object with state_dict or a ready state dict)``;
    - ``variables``: loose tensors (``pytorch_variables.pth``), or ``None``;
    - ``components``: ``(folder, object)`` saved in component folders;
    - ``init``: the constructor arguments (``init.json``), or ``None``;
    - ``encoder_options``: keyword arguments of the ``Encoder``;
    - ``snapshot``: an integration's incremental snapshot of this component's arrays for
      background saves (the protocol is in ``_api/_shadow.py``); ``None`` copies them whole;
    - ``rebuilt_on_load``: ``(key, encoded entry) -> bool``, code stored by value that the
      integration's loads rebuild without running it (SB3's schedule closures), so saving it
      is not warned about;
    - ``app_state``: saved from a dict (no class, no handler): listed in the manifest, so that
      a load reads the folder as a dict without asking handlers whether they recognise it;
    - ``state_values``: the names in ``state`` that are state dicts given as values of an app
      state (``{"model": model.state_dict()}``), not objects, each with its place among the
      app state's keys: listed in the manifest, so that a load puts them back where they were
      and ``restore`` as the values they were.
    """

    __slots__ = (
        "data",
        "state",
        "variables",
        "components",
        "init",
        "encoder_options",
        "snapshot",
        "rebuilt_on_load",
        "app_state",
        "state_values",
    )

    def __init__(
        self,
        data: dict[str, Any],
        state: list[tuple[str, Any]],
        variables: dict[str, torch.Tensor] | None,
        components: list[tuple[str, Any]],
        init: dict[str, Any] | None = None,
        encoder_options: dict[str, Any] | None = None,
        snapshot: Any = None,
        rebuilt_on_load: Any = None,
        app_state: bool = False,
        state_values: dict[str, int] | None = None,
    ) -> None:
        self.data = data
        self.state = state
        self.variables = variables
        self.components = components
        self.init = init
        self.encoder_options = {} if encoder_options is None else encoder_options
        self.snapshot = snapshot
        self.rebuilt_on_load = rebuilt_on_load
        self.app_state = app_state
        self.state_values = {} if state_values is None else state_values

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Parts({fields})"


#: Value types that hold no state and nothing that does: skipped without a look when
#: collecting (a list of a million floats) and taken as they are when restoring.
PLAIN_VALUES = frozenset({int, float, str, bool, type(None), bytes, complex, np.ndarray})


def container_items(value: Any) -> Iterable[tuple[Any, Any]] | None:
    """The items of a container whose keys can name a member (``nets.pi``, ``critics.0``), else
    ``None``: a list, a tuple or namedtuple, or a dict (``OrderedDict``, ``defaultdict`` too)
    whose keys are all strings without ``.`` or ``/``, or all non-negative ints."""
    if type(value) in (list, tuple) or (isinstance(value, tuple) and hasattr(type(value), "_fields")):
        return enumerate(value)
    if isinstance(value, dict) and (
        all(type(k) is str and k and "." not in k and "/" not in k for k in value)
        or all(type(k) is int and k >= 0 for k in value)
    ):
        return value.items()
    return None
