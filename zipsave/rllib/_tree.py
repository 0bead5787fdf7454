"""An RLlib ``Checkpointable`` as a tree of plain nodes: taken from a live object, applied back.

The walk mirrors RLlib's own ``Checkpointable.save_to_path``/``restore_from_path`` step by step
(which state goes to which component, how actor managers are reached), so an archive holds the
same tree RLlib writes to a directory, and restoring behaves as RLlib's restore does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._codec import import_path


@dataclasses.dataclass
class Node:
    """One RLlib component: how to construct it and its own (non-component) state.

    Attributes
    ----------
    cls : type or None
        The component's class (``type(component)``); ``None`` when unknown.
    args : tuple
        The positional half of ``get_ctor_args_and_kwargs()``.
    kwargs : dict
        The keyword half: with ``args``, what the class is constructed with.
    metadata : dict
        ``get_metadata()``, JSON values (RLlib writes it to ``metadata.json``).
    state : dict
        The component's state without its sub-components' states.
    children : dict[str, Node]
        The sub-components, by name, in RLlib's order.
    """

    cls: Any
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    metadata: dict = dataclasses.field(default_factory=dict)
    state: dict = dataclasses.field(default_factory=dict)
    children: dict[str, Node] = dataclasses.field(default_factory=dict)

    def find(self, component: str | None) -> Node:
        """The node at ``component`` (``"learner_group/learner"``); ``self`` for ``None``/``""``."""
        node = self
        for part in (component or "").strip("/").split("/"):
            if part:
                node = node.children[part]
        return node

    def full_state(self) -> dict:
        """The state as ``get_state()`` returns it: own state with every child's nested in."""
        state = dict(self.state)
        for name, child in self.children.items():
            state[name] = child.full_state()
        return state


def _is_actor_manager(obj: Any) -> bool:
    from ray.rllib.utils.actor_manager import FaultTolerantActorManager

    return isinstance(obj, FaultTolerantActorManager)


def real_class(cls: Any) -> Any:
    """The class a component was made from. Ray runs an actor as a subclass it makes on the fly
    (``ray.actor._modify_class``'s ``Class`` around Ray Train's ``_WrappedExecutable`` around a
    remote learner's class), which no import path names, and on the actor Ray even renames
    them; the first class up the MRO that is not such a Ray-made wrapper is the one to rebuild."""
    if not isinstance(cls, type):
        return cls
    for klass in cls.__mro__:
        if import_path(klass) is not None or not klass.__module__.startswith("ray."):
            return klass
    return cls


class ComponentReadError(Exception):
    """A component's state could not be read (a dead actor, a Ray cluster gone); ``path`` names
    the component. The handler turns it into an :class:`~zipsave.EncodeError`."""

    def __init__(self, path: str, cause: BaseException) -> None:
        self.path = path
        self.cause = cause
        super().__init__(path, cause)


def _read(path: str, fn: Any) -> Any:
    """``fn()``, its failure (Ray's, or RLlib's on an actor) tagged with the component's path."""
    try:
        return fn()
    except ComponentReadError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure to read a live component is reported as such
        raise ComponentReadError(path, err) from err


def _first_result(results: Any) -> Any:
    result = next(iter(results))
    if not result.ok:
        raise result.get()
    return result.get()


def _join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


def walk(obj: Any, state: dict | None = None, path: str = "") -> Node:
    """Take ``obj``'s component tree, as ``save_to_path`` would write it.

    Parameters
    ----------
    obj
        A live RLlib ``Checkpointable`` (an ``Algorithm``, a ``Learner``, an ``RLModule``...).
    state
        The state to use instead of ``obj.get_state()`` (how a parent hands a child its part).
    path
        ``obj``'s component path, named when a state cannot be read.

    Returns
    -------
    Node

    Raises
    ------
    ComponentReadError
        A component's state could not be read (a remote actor died, Ray is gone).
    """
    components = list(obj.get_checkpointable_components())
    if not path:
        _require_running_ray(obj)
    provided = state is not None
    # RLlib's own test (`state or get_state(...)`): an empty provided state is fetched afresh.
    if not state:
        state = _read(path, lambda: obj.get_state(not_components=[name for name, _ in components]))
    state = dict(state)
    children: dict[str, Node] = {}
    for name, comp in components:
        where = _join(path, name)
        if provided and name not in state:
            continue
        if _is_actor_manager(comp):
            # Like RLlib: the first healthy actor stands for all of them. Its state came from
            # the parent (a LearnerGroup gathers its first learner's); only the tree's shape
            # (classes, constructor arguments) is asked of the actor, not the state again.
            given = state.pop(name, None) if provided else None
            children[name] = _remote_node(comp, given, where)
        else:
            comp_state = (
                state.pop(name) if provided else _read(where, lambda name=name: obj.get_state(components=name)[name])
            )
            children[name] = walk(comp, comp_state, where)
    return _describe(obj, state, children)


def _actor_component(obj: Any, path: str = "") -> str | None:
    """The path of the first component of ``obj`` held by Ray actors (remote learners), if any."""
    for name, comp in obj.get_checkpointable_components():
        where = _join(path, name)
        found = where if _is_actor_manager(comp) else _actor_component(comp, where)
        if found is not None:
            return found
    return None


def _require_running_ray(obj: Any) -> None:
    """Refuse before any remote call when Ray is gone: a call on a dead cluster's actor handle
    would start a new local cluster (Ray's auto-init) only to fail there."""
    import ray

    if not ray.is_initialized():
        where = _actor_component(obj)
        if where is not None:
            raise ComponentReadError(
                where,
                RuntimeError(
                    "Ray is not running (shut down, or its cluster is gone), so "
                    "its actors cannot be asked for their state"
                ),
            )


def _remote_node(manager: Any, state: dict | None, path: str) -> Node:
    """The tree of the actors of ``manager``, from its first healthy actor; with ``state``
    given, the actor sends only the tree's shape and ``state`` fills it here."""

    def ask() -> Node:
        actor = manager.healthy_actor_ids()[0]
        if state:
            return _fill(_first_result(manager.foreach_actor(shape, remote_actor_ids=[actor])), state)
        return _first_result(manager.foreach_actor(lambda w: walk(w), remote_actor_ids=[actor]))

    return _read(path, ask)


def shape(obj: Any) -> Node:
    """``obj``'s component tree without any state: classes, constructor arguments, metadata."""
    children = {}
    for name, comp in obj.get_checkpointable_components():
        children[name] = (
            _first_result(comp.foreach_actor(shape, remote_actor_ids=[comp.healthy_actor_ids()[0]]))
            if _is_actor_manager(comp)
            else shape(comp)
        )
    return _describe(obj, {}, children)


def _describe(obj: Any, state: dict, children: dict) -> Node:
    """``obj``'s node: the class to rebuild and its constructor arguments. A remote learner's
    RLModule is wrapped for data-parallel training (``TorchDDPRLModule``, which its own
    constructor arguments cannot rebuild): the module inside is recorded, as on one learner."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    if isinstance(obj, RLModule):
        obj = obj.unwrapped()
    args, kwargs = obj.get_ctor_args_and_kwargs()
    return Node(
        cls=real_class(type(obj)),
        args=tuple(args),
        kwargs=dict(kwargs),
        metadata=dict(obj.get_metadata() or {}),
        state=state,
        children=children,
    )


def _fill(node: Node, state: dict) -> Node:
    """Split a component's full state over ``node``'s tree, as ``walk`` does with a given state."""
    state = dict(state)
    children = {name: _fill(child, state.pop(name)) for name, child in node.children.items() if name in state}
    return dataclasses.replace(node, state=state, children=children)


def apply(obj: Any, node: Node, component: str | None = None) -> None:
    """Set ``node``'s states into the live ``obj``, as ``restore_from_path`` would.

    Parameters
    ----------
    obj
        The live ``Checkpointable`` to restore into.
    node
        The saved tree; with ``component``, the saved tree *of that component only*.
    component
        ``None`` to restore everything; else the path of the one sub-component of ``obj``
        that ``node`` holds (``"learner_group/learner/rl_module/p1"``).
    """
    before = {name for name, _ in obj.get_checkpointable_components()}
    _apply_children(obj, node, component, only=None)
    if component is None:
        obj.set_state(node.state)
        # Setting the state can create components (a new module id); restore those too.
        added = {name for name, _ in obj.get_checkpointable_components()} - before
        if added:
            _apply_children(obj, node, None, only=added)
    _after_restore(obj, node, component)


def _apply_children(obj: Any, node: Node, component: str | None, only: set | None) -> None:
    for name, comp in obj.get_checkpointable_components():
        if only is not None and name not in only:
            continue
        sub: str | None = None
        if component is None:
            child = node.children.get(name)
            if child is None:
                continue
        else:
            child = node
            if component.startswith(name + "/"):
                sub = component[len(name) + 1 :]
            elif component != name:
                continue
        if _is_actor_manager(comp):
            _apply_remote(comp, child, sub)
        else:
            apply(comp, child, sub)


def _apply_remote(manager: Any, node: Node, component: str | None) -> None:
    """``apply`` on every healthy actor of ``manager`` (every remote learner), the tree put into
    Ray's object store once rather than sent with each call; raises the first actor's error."""
    import ray

    ref = ray.put(node)
    results = manager.foreach_actor(
        lambda w, _r=ref, _c=component: apply(w, ray.get(_r), _c), remote_actor_ids=manager.healthy_actor_ids()
    )
    for result in results:
        if not result.ok:
            raise result.get()


def _after_restore(obj: Any, node: Node, component: str | None) -> None:
    """What ``Algorithm.restore_from_path`` does after the generic restore: push the restored
    weights, and the restored connector states, out to the EnvRunner actors."""
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.core import COMPONENT_LEARNER_GROUP
    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

    if not isinstance(obj, Algorithm):
        return
    group = obj.env_runner_group
    if (component is None and COMPONENT_LEARNER_GROUP in node.children) or (
        component is not None and COMPONENT_LEARNER_GROUP in component
    ):
        _push_weights(obj)
    if group is None or group.num_remote_env_runners() == 0:
        return
    steps = obj.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
    if not obj.env_runner:
        # The connectors are then the algorithm's own components, restored above.
        group.sync_env_runner_states(
            config=obj.config,
            from_worker=None,
            env_steps_sampled=steps,
            env_to_module=obj.env_to_module_connector,
            module_to_env=obj.module_to_env_connector,
        )
    else:
        group.sync_env_runner_states(config=obj.config, env_steps_sampled=steps, from_worker=obj.env_runner)


def _push_weights(algo: Any) -> None:
    """Set the learner's (restored) module weights on every EnvRunner, local and remote, and wait.

    Not ``sync_weights``: that one sends asynchronously, and an EnvRunner skips weights whose
    sequence number is not newer than its own, while restored weights may carry an older one.
    A local EnvRunner is handed the state as it is; only remote ones get it through the object
    store (put once for all of them).
    """
    import ray
    from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE

    state = algo.learner_group.get_state(components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}", inference_only=True)
    weights = {COMPONENT_RL_MODULE: state[COMPONENT_LEARNER][COMPONENT_RL_MODULE]}  # no seq no: always set
    ref = None
    for group in (algo.env_runner_group, algo.eval_env_runner_group):
        if group is None:
            continue
        if group.local_env_runner is not None:
            group.local_env_runner.set_state(weights)
        if group.num_remote_env_runners():
            ref = ref if ref is not None else ray.put(weights)
            group.foreach_env_runner(lambda w, _s=ref: w.set_state(ray.get(_s)), local_env_runner=False)


def instantiate(node: Node, *, cls: Any = None, overrides: dict | None = None, check: Any = None) -> Any:
    """Construct ``node``'s class from its recorded arguments, then restore its state.

    Parameters
    ----------
    node
        The saved tree.
    cls
        A class to construct instead of ``node.cls`` (must be a subclass of it or equal).
    overrides
        Constructor keyword arguments that replace the recorded ones (RLlib's
        ``from_checkpoint(**kwargs)`` rule: a positional parameter of that name is replaced).
    check
        ``check(klass, args, kwargs)``, called before the class is: refuses arguments it
        does not take (:func:`~zipsave.rllib._ctor_check.check_ctor_args`).
    """
    import inspect as _inspect

    klass = cls if cls is not None else node.cls
    args, kwargs = list(node.args), dict(node.kwargs)
    for i, (pname, param) in enumerate(_inspect.signature(klass).parameters.items()):
        if overrides and pname in overrides:
            value = overrides[pname]
            if param.kind is _inspect.Parameter.POSITIONAL_OR_KEYWORD and len(args) > i:
                args[i] = value
            else:
                kwargs[pname] = value
    if check is not None:
        check(klass, args, kwargs)
    obj = klass(*args, **kwargs)
    apply(obj, node)
    return obj
