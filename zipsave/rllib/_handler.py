"""The RLlib handler: how the core saves, rebuilds and restores RLlib ``Checkpointable`` objects.

Imported by the core through the ``zipsave.handlers`` entry point, so it imports Ray only inside
its methods: ``import zipsave`` never starts or imports Ray.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from .._registry import Handler
from ..exceptions import ArchiveFormatError, EncodeError, MissingDependencyError, reading
from ._allowlist import RLLIB_ALLOWLIST
from ._ctor_check import check_ctor_args
from ._in_place import Fills, live_component
from ._parts import HANDLER_NAME, node_from_archive, node_to_parts
from ._tree import ComponentReadError, Node, apply, instantiate, walk

__all__ = ["RLlibHandler", "handler"]


def _is_checkpointable(obj: Any) -> bool:
    """An RLlib ``Checkpointable`` instance, asked only when RLlib is already imported."""
    module = sys.modules.get("ray.rllib.utils.checkpoints")
    return module is not None and isinstance(obj, module.Checkpointable)


def require_rllib() -> None:
    """Raise :class:`~zipsave.MissingDependencyError` naming the extra when RLlib is absent."""
    try:
        import ray.rllib  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError(
            f"needs Ray RLlib, which cannot be imported ({err}).",
            hint="Install it with `pip install zipsave[rllib]`.",
        ) from err


class RLlibHandler(Handler):
    """RLlib's new API stack: an ``Algorithm`` (or any ``Checkpointable``: a ``Learner``, an
    ``RLModule``, a connector) is saved as its component tree, one archive folder per component."""

    name = HANDLER_NAME
    libraries = ("ray", "zipsave.rllib")
    # Without Ray nothing can name these; an allowlist must only hold names that resolve.
    allowlist = RLLIB_ALLOWLIST if importlib.util.find_spec("ray") is not None else frozenset()

    def claims(self, obj: Any) -> bool:
        return isinstance(obj, Node) or _is_checkpointable(obj)

    def collect(self, obj: Any, *, exclude: set[str], include: set[str]) -> Any:
        if isinstance(obj, Node):
            node = obj
        else:
            try:
                node = walk(obj)
            except ComponentReadError as err:
                where = f"component `{err.path}`" if err.path else "the object itself"
                raise EncodeError(
                    f"could not read the state of {where} ({type(err.cause).__name__}: {err.cause}); "
                    "nothing was written.",
                    member=err.path or None,
                    hint="A remote actor (learner, EnvRunner) that died, or a Ray cluster that is gone, cannot be "
                    "read: save while the algorithm is healthy, or restore it from its last archive.",
                ) from err.cause
        return node_to_parts(node, exclude=set(exclude), include=set(include))

    def builds(self, cls: type) -> bool:
        if cls is Node:
            return True
        module = sys.modules.get("ray.rllib.utils.checkpoints")
        return module is not None and isinstance(cls, type) and issubclass(cls, module.Checkpointable)

    def build(
        self,
        session: Any,
        folder: str,
        *,
        cls: Any,
        custom_objects: dict | None,
        exclude: list[str],
        overrides: dict[str, Any],
    ) -> Any:
        require_rllib()
        if cls is Node:
            return node_from_archive(session, folder, ctor="all", exclude=exclude)
        node = node_from_archive(session, folder, ctor="root", exclude=exclude)
        if cls is not None and not issubclass(node.cls, cls) and not issubclass(cls, node.cls):
            raise ArchiveFormatError(
                f"holds a {node.cls.__module__}.{node.cls.__qualname__}, not a {cls.__qualname__}.",
                archive=session.name,
                member=f"{folder}/init.json" if folder else "init.json",
            )
        member = f"{folder}/init.json" if folder else "init.json"

        given = dict(custom_objects or {}, **overrides)

        def check(klass: type, args: Any, kwargs: dict) -> None:  # the caller's own values are theirs
            check_ctor_args(klass, args, kwargs, archive=session.name, member=member, skip=frozenset(given))

        # RLlib's constructor and set_state run on the archive's values: what they raise is
        # about this init.json (the session's boundary would name only the archive).
        with reading(session.name, member=member, doing="built from its constructor arguments and state"):
            return instantiate(
                node, cls=cls if cls is not None and issubclass(cls, node.cls) else None, overrides=given, check=check
            )

    def restores(self, obj: Any) -> bool:
        return _is_checkpointable(obj)

    def restore(
        self,
        session: Any,
        obj: Any,
        folder: str,
        *,
        custom_objects: dict | None,
        exclude: list[str],
        exact_match: bool,
        into: str | None = None,
    ) -> None:
        require_rllib()
        target = folder if into is None else into.strip("/")
        # Where the component lives in this process (a learner in the driver), its weights and
        # optimizer state are read straight into its own tensors, after the rest of the tree.
        fills = Fills(session, folder)
        node = node_from_archive(
            session, folder, ctor="none", exclude=exclude, live=live_component(obj, target), fills=fills
        )
        fills.run(node)
        apply(obj, node, target or None)


handler = RLlibHandler()
