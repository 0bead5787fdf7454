"""A :class:`~zipsave.rllib._tree.Node` as archive parts, and back from an open archive.

Per component folder: ``init.json`` names the class and holds ``get_ctor_args_and_kwargs()``
(an ``AlgorithmConfig`` as its readable ``get_state()`` dict); ``data`` holds the component's
own state, key by key, plus ``rllib_metadata``; an RLModule's weights are ``module.pth``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from .. import _format
from .._codec import import_path
from .._core import Parts
from ..exceptions import ArchiveFormatError, EncodeError, UnsafeGlobalError, ZipsaveError
from ._in_place import OPTIMIZER_KEY, Fills, live_children, optimizer_targets, weight_targets
from ._tree import Node

__all__ = ["HANDLER_NAME", "node_from_archive", "node_to_parts"]

HANDLER_NAME = "rllib"
METADATA_KEY = "rllib_metadata"
#: A state whose keys are not all strings (``MeanStdFilter``'s ``None`` key) is stored whole here.
WRAPPED_KEY = "rllib_state"
#: Where an RLModule's weights went, and as which type ``get_state`` gave them.
WEIGHTS_KEY = "rllib_weights"
WEIGHTS = "module"
CONFIG_KEY = "rllib_algorithm_config"


def _is_weights(state: dict) -> bool:
    """An RLModule's state: a flat, non-empty mapping of parameter names to arrays."""
    return bool(state) and all(
        type(k) is str and (isinstance(v, torch.Tensor) or (isinstance(v, np.ndarray) and v.dtype.kind in "biufc"))
        for k, v in state.items()
    )


def _config_out(value: Any) -> Any:
    """``AlgorithmConfig`` objects (a Learner's constructor argument) as their state dicts."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    if isinstance(value, AlgorithmConfig):
        return {CONFIG_KEY: value.get_state()}
    if type(value) in (list, tuple):
        return type(value)(_config_out(v) for v in value)
    if type(value) is dict:
        return {k: _config_out(v) for k, v in value.items()}
    return value


def _config_in(value: Any) -> Any:
    if type(value) is dict and set(value) == {CONFIG_KEY}:
        from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

        return AlgorithmConfig.from_state(value[CONFIG_KEY])
    if type(value) in (list, tuple):
        return type(value)(_config_in(v) for v in value)
    if type(value) is dict:
        return {k: _config_in(v) for k, v in value.items()}
    return value


def node_to_parts(node: Node, *, exclude: Iterable[str] = (), include: Iterable[str] = ()) -> Parts:
    """The archive parts of one component (its children become component folders)."""
    ref = import_path(node.cls)
    if ref is None:
        raise EncodeError(
            f"the RLlib class {node.cls!r} cannot be imported by name, so a load could not rebuild it.",
            hint="Define the class at the top level of an importable module.",
        )
    exclude = set(exclude)
    state = {k: v for k, v in node.state.items() if not (type(k) is str and k in exclude)}
    data: dict[str, Any] = {METADATA_KEY: node.metadata}
    tensors: list[tuple[str, Any]] = []
    if _is_weights(state):
        kind = "torch" if all(isinstance(v, torch.Tensor) for v in state.values()) else "numpy"
        tensors.append(
            (
                WEIGHTS,
                {
                    k: v.detach().cpu() if isinstance(v, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(v))
                    for k, v in state.items()
                },
            )
        )
        data[WEIGHTS_KEY] = kind
    elif all(type(k) is str and k not in (METADATA_KEY, WRAPPED_KEY, WEIGHTS_KEY) for k in state):
        data.update(state)
    else:
        data[WRAPPED_KEY] = state
    init = {
        "class": ref,
        "args": {"args": list(_config_out(node.args)), "kwargs": _config_out(node.kwargs)},
        "handler": HANDLER_NAME,
    }
    children = [(name, child) for name, child in node.children.items() if name not in exclude]
    return Parts(data=data, state=tensors, variables=None, components=children, init=init)


def resolve_class(session: Any, ref: Any, member: str) -> type:
    """The class an ``init.json`` names: an RLlib ``Checkpointable`` under ``ray.rllib.``, or a
    class the caller trusts; checked before anything is imported."""
    if not isinstance(ref, str) or ":" not in ref:
        raise ArchiveFormatError(
            f"expected `class` as `module:qualname`, found {ref!r}.", archive=session.name, member=member
        )
    module, qualname = ref.split(":", 1)
    private = any(
        not p.isidentifier() or p.startswith("__") for p in module.split(".") + qualname.split(".")
    )  # `__main__`
    if private or not (_library_module(module) or session.policy.is_trusted(module, qualname)):
        raise UnsafeGlobalError(
            f"names the class `{module}.{qualname}`, which is not a class of RLlib's library and not trusted.",
            archive=session.name,
            member=member,
            hint=f"If you trust this archive, pass `trusted=[{module + '.' + qualname!r}]`.",
        )
    import importlib

    from ray.rllib.utils.checkpoints import Checkpointable

    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not (isinstance(found, type) and issubclass(found, Checkpointable)):
        raise ArchiveFormatError(f"`{ref}` is not an RLlib Checkpointable class.", archive=session.name, member=member)
    return found


#: Parts of a module path under ``ray.rllib`` that name no library module: RLlib's example
#: scripts parse ``sys.argv`` and build experiments when imported (``appo_hyperparameter_tune``
#: exited the loading process with ``SystemExit(2)``), and ``conftest`` imports Ray's test suite.
_NOT_LIBRARY = frozenset({"examples", "tuned_examples", "tests", "benchmarks", "conftest", "scripts"})


def _library_module(module: str) -> bool:
    """Is ``module`` one of RLlib's library modules, importing which only defines names: under
    ``ray.rllib``, and not a script, test or example, except an example's ``classes`` package
    (the RLModules, environments and connectors the examples train with)."""
    parts = module.split(".")
    if parts[:2] != ["ray", "rllib"]:
        return False
    below = parts[2:]
    if "examples" in below:
        below = below[below.index("examples") + 1 :]
        if "classes" not in below:
            return False
        below = below[below.index("classes") + 1 :]
    return not any(p in _NOT_LIBRARY or p.startswith("test_") for p in below)


def node_from_archive(
    session: Any,
    folder: str,
    *,
    ctor: str = "root",
    exclude: list[str] | tuple = (),
    live: Any = None,
    fills: Fills | None = None,
) -> Node:
    """Read the component tree under ``folder``.

    Parameters
    ----------
    session
        The core's load session.
    folder
        The component folder (``""`` for the archive's root).
    ctor
        Whose constructor arguments to decode: ``"root"`` (only ``folder``'s: what a build
        needs), ``"all"`` (every component's: what an RLlib directory needs) or ``"none"``.
    exclude
        Component paths or state keys (relative to ``folder``) to leave out.
    live, fills
        The live component ``folder`` is restored into, where it is in this process: its
        module weights and optimizer state are then read into its own tensors, by ``fills``
        once the whole tree is read (:mod:`._in_place`).
    """
    init_member = _format.join(folder, _format.INIT)
    record = session.read_json(init_member)
    if not isinstance(record, dict) or not isinstance(record.get("args"), dict):
        raise ArchiveFormatError(
            "must hold an object with `class` and `args`.", archive=session.name, member=init_member
        )
    cls = resolve_class(session, record.get("class"), init_member)
    args: tuple = ()
    kwargs: dict = {}
    if ctor != "none":
        decoder = session.decoder(init_member)
        raw = record["args"]
        # Not under the skip rule: an algorithm built without part of its configuration would
        # train something else; the error names the key and how to opt in.
        try:
            decoded = {key: decoder.decode_entry(key, raw[key]) for key in ("args", "kwargs") if key in raw}
        except UnsafeGlobalError as err:
            _name_the_key(err, decoder, raw)
            raise
        args = tuple(_config_in(list(decoded.get("args", ()))))
        kwargs = dict(_config_in(decoded.get("kwargs", {})))
    flat = [p for p in exclude if "/" not in p]
    # Only a checked restore reads in place: each member is checked before a live byte changes.
    in_place = fills if live is not None and session.verify else None
    # An mmap=True restore maps the arrays, as asked, rather than reading them anywhere.
    optimizers = optimizer_targets(live) if in_place is not None and not session.mmap else None
    deferred = (OPTIMIZER_KEY,) if optimizers else ()
    data = session.decode_data(folder, exclude=flat, deferred=deferred) or {}
    metadata = data.pop(METADATA_KEY, {}) or {}
    weights = data.pop(WEIGHTS_KEY, None)
    if WRAPPED_KEY in data:
        state = data.pop(WRAPPED_KEY)
    else:
        state = data
    if in_place is not None and optimizers and OPTIMIZER_KEY in state:
        in_place.optimizers(folder, _format.join(folder, _format.DATA), state, optimizers)
    if weights is not None:
        member = _format.join(folder, _format.state_dict_member(WEIGHTS))
        targets = weight_targets(live) if in_place is not None else None
        if in_place is not None and targets is not None:
            state = {}
            in_place.weights(folder, member, state, targets, weights)
        else:
            tree, _ = session.load_tensors(member)
            state = {k: (v if weights == "torch" else v.numpy()) for k, v in tree.items()}
    children: dict[str, Node] = {}
    live_by_name = live_children(live) if fills is not None else {}
    prefix = f"{folder}/" if folder else ""
    for child in session.child_components(folder):
        name = child[len(prefix) :]
        if name in flat:
            continue
        sub = [p[len(name) + 1 :] for p in exclude if p.startswith(name + "/")]
        try:
            children[name] = node_from_archive(
                session,
                child,
                ctor="all" if ctor == "all" else "none",
                exclude=sub,
                live=live_by_name.get(name),
                fills=fills,
            )
        except ZipsaveError as err:
            if isinstance(err, UnsafeGlobalError) or session.strict:
                raise
            session.skip(child, None, None, err)
    return Node(cls=cls, args=args, kwargs=kwargs, metadata=metadata, state=state, children=children)


def _name_the_key(err: Any, decoder: Any, raw: dict) -> None:
    """Narrow an error about ``args``/``kwargs`` down to the configuration key that caused it
    (``args[0]._env_to_module_connector``): the caller then knows what to trust or override."""
    for top in ("args", "kwargs"):
        body = raw.get(top)
        native = body.get(":zipsave:") if isinstance(body, dict) else None
        items = native.get("items") if isinstance(native, dict) else None
        pairs: list = []
        if isinstance(items, list):  # a tuple/list of positional arguments
            pairs = [(f"{top}[{i}]", item) for i, item in enumerate(items)]
        elif isinstance(body, dict):
            pairs = [
                (f"{top}.{k}", v) for k, v in (native.get("value", {}) if isinstance(native, dict) else body).items()
            ]
        for where, value in pairs:
            inner = (
                value.items()
                if isinstance(value, dict) and not any(str(k).startswith(":") for k in value)
                else [("", value)]
            )
            for key, sub in inner:
                try:
                    decoder.decode(sub)
                except UnsafeGlobalError:
                    err.key = f"{where}.{key}" if key else where
                    err.args = (err._compose(),)
                    return
                except Exception:  # noqa: BLE001, S112 - only the untrusted one is sought here
                    continue
