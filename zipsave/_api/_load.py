"""The loading verbs: ``load`` (rebuild), ``restore`` (in place), ``load_archive`` (SB3's
``load_from_zip_file``), each a thin front of one load session; their options are the fields
of :class:`~zipsave._core.LoadOptions`."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch

from .. import _core, _format  # _core: what builds or restores objects, and the registry, on first use
from .._archive import Limits
from .._calls import keyword_options
from .._core import (
    OPTION_DOCS,
    LoadOptions,
    LoadReport,
    LoadSession,
    check_component,
    handler_for,
    load_app_state,
    no_model_error,
    recognising_handler,
)
from ..exceptions import UsageError, ZipsaveError, nesting_as_error

__all__ = ["load", "load_archive", "restore", "set_parameters_from_archive"]


def _options_doc(*, skip: tuple[str, ...] = ()) -> str:
    """The numpydoc entries of the shared options, from their one definition."""
    return "\n".join(f"    {name}\n        {text}" for name, text in OPTION_DOCS.items() if name not in skip)


@keyword_options("zipsave.load_archive", order=("load_data", "custom_objects", "device"))
@nesting_as_error
def load_archive(
    path: Any,
    *,
    load_data: bool = True,
    custom_objects: dict[str, Any] | None = None,
    device: Any = "auto",
    print_system_info: bool = False,
    allow_pickle: bool = False,
    trusted: Iterable[Any] = (),
    strict: bool = False,
    limits: Limits | None = None,
    report: LoadReport | None = None,
    verify: bool = True,
    mmap: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    skip_broken_tensors: bool = False,
    trust: Any = None,
) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, torch.Tensor] | None]:
    with LoadSession(path, LoadOptions.of(locals())) as src:
        if load_data:  # values an integration recognises without decoding (SB3's schedule closures)
            known = _known_values(src)
            custom_objects = {**known, **(custom_objects or {})} if known else custom_objects
        data = src.decode_data("", custom_objects=custom_objects) if load_data else None
        params: dict[str, Any] = {}
        variables = None
        for name in src.source.members_in(""):
            if not name.endswith(_format.PTH_SUFFIX):
                continue
            try:
                tree, _ = src.load_tensors(name)
            except ZipsaveError as err:
                src.skip(name, None, None, err)  # a broken tensor member raises unless skip_broken_tensors
                continue
            if name in (_format.PYTORCH_VARIABLES, _format.LEGACY_PYTORCH_VARIABLES):
                variables = tree
            else:
                params[name[: -len(_format.PTH_SUFFIX)]] = tree
        return data, params, variables


def _known_values(src: LoadSession) -> dict[str, Any]:
    try:
        owner = recognising_handler(src, "")
        return owner.known_values(src, None, "") if owner is not None else {}
    except Exception:  # noqa: BLE001 - an unreadable `data` is reported by the decode that follows
        return {}


load_archive.__doc__ = f"""Read an archive's parts, as SB3's ``load_from_zip_file`` does.

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), URL, or readable binary file object (not closed).
    load_data
        Decode ``data``; ``False`` returns ``None`` for it and unpickles nothing.
{_options_doc()}

    Returns
    -------
    tuple
        ``(data, params, pytorch_variables)``: ``data`` as a dict (or ``None``), ``{{name: state_dict}}``
        for every ``.pth`` member, and the loose tensors (or ``None`` when the archive has none).
    """


@keyword_options("zipsave.load")
@nesting_as_error
def load(
    path: Any,
    *,
    cls: Any = None,
    component: str | None = None,
    exclude: Iterable[str] | None = None,
    exact_match: bool = True,
    custom_objects: dict[str, Any] | None = None,
    device: Any = "auto",
    print_system_info: bool = False,
    allow_pickle: bool = False,
    trusted: Iterable[Any] = (),
    strict: bool = False,
    limits: Limits | None = None,
    report: LoadReport | None = None,
    verify: bool = True,
    mmap: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    skip_broken_tensors: bool = False,
    trust: Any = None,
    **overrides: Any,
) -> Any:
    options = LoadOptions.of(locals())
    if cls is not None and not isinstance(cls, type):
        raise UsageError(
            f"cls must be a class, found {type(cls).__name__} {cls!r}. Pass the class itself, e.g. "
            "`from stable_baselines3 import PPO` and `zipsave.load(path, cls=PPO)`, or leave it out for an "
            "archive that records its class."
        )
    exclude = [] if exclude is None else _core.pattern_list(exclude, "exclude")
    with LoadSession(path, options) as src:
        folder = (component or "").strip("/")
        check_component(src, folder)
        if folder and not src.has(_format.join(folder, _format.DATA)):  # a dict of components
            return {
                child.rpartition("/")[2]: _core.build(
                    src,
                    child,
                    cls=cls,
                    custom_objects=custom_objects,
                    exclude=exclude,
                    overrides=dict(overrides),
                    exact_match=exact_match,
                )
                for child in src.child_components(folder)
            }
        if not src.has(_format.join(folder, _format.DATA)) and not src.has(_format.join(folder, _format.INIT)):
            raise no_model_error(src, "Use `zipsave.load_archive` to read its tensors, or check the path.")
        if cls is None and not src.has(_format.join(folder, _format.INIT)) and handler_for(src, folder, None) is None:
            obj = load_app_state(src, folder, custom_objects=custom_objects, exclude=exclude)
            obj.update(overrides)
            return obj
        obj = _core.build(
            src,
            folder,
            cls=cls,
            custom_objects=custom_objects,
            exclude=exclude,
            overrides=overrides,
            exact_match=exact_match,
        )
        if isinstance(obj, _core.Component):
            object.__setattr__(obj, "zipsave_report", src.report)  # a frozen dataclass too
        return obj


load.__doc__ = f"""Rebuild a saved object: a :class:`~zipsave.Saveable`, an SB3 algorithm (``cls=PPO``),
    an object a registered integration builds, or an app-state dict.

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), URL, or readable binary file object (not closed).
    cls
        The class to build; by default the one recorded in ``init.json`` (only
        ``Saveable`` subclasses are built from the archive's say-so).
    component
        Load only this component folder, e.g. ``"learner/module/p0"``. A folder holding a
        dict of components (``"learner/module"``) comes back as a dict of rebuilt objects.
    exclude
        Keys or state-dict names to skip (glob patterns; a string is one), e.g.
        ``["*.optimizer"]`` to load for inference without optimizer state. ``"learner/x"`` addresses a component; a
        pattern starting with ``*`` applies in every component.
    exact_match
        Require the object the constructor makes to hold exactly the state dicts and
        components the archive has (the default). ``False`` loads the ones that match and
        leaves the rest as the constructor made them.
{_options_doc()}
    **overrides
        Constructor arguments (``env=...``) or attributes that win over the saved ones.

    Returns
    -------
    object
        The rebuilt object. An app-state archive (no ``init.json``) comes back as a dict.

    Examples
    --------
    >>> model = zipsave.load("model.zip", env=env)  # doctest: +SKIP
    """


@keyword_options("zipsave.restore")
@nesting_as_error
def restore(
    obj: Any,
    path: Any,
    *,
    component: str | None = None,
    into: str | None = None,
    exact_match: bool = True,
    exclude: Iterable[str] | None = None,
    custom_objects: dict[str, Any] | None = None,
    device: Any = "auto",
    print_system_info: bool = False,
    allow_pickle: bool = False,
    trusted: Iterable[Any] = (),
    strict: bool = False,
    limits: Limits | None = None,
    report: LoadReport | None = None,
    verify: bool = True,
    mmap: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    skip_broken_tensors: bool = False,
    trust: Any = None,
) -> None:
    if isinstance(obj, (str, os.PathLike)) and not isinstance(path, (str, os.PathLike)):
        raise UsageError(
            f"restore() restores into the object given first, found the path {os.fspath(obj)!r} there and "
            f"a {type(path).__name__} as the path: call `zipsave.restore(obj, path)`."
        )
    options = LoadOptions.of(locals())
    exclude = [] if exclude is None else _core.pattern_list(exclude, "exclude")
    with LoadSession(path, options) as src:
        folder = (component or "").strip("/")
        check_component(src, folder)
        if not folder and not src.has(_format.DATA) and not src.has(_format.INIT):
            # a `torch.save` file, a zip of other files: restoring from it would change nothing
            if not any(n.endswith(_format.PTH_SUFFIX) for n in src.source.members_in("")):
                raise no_model_error(src, "Check the path.")
        # The seam: a handler that restores this kind of live object does it all (RLlib's
        # component paths are not attribute paths); `into` names its target component. A dict
        # is app state, which the core saves without asking handlers, and so restores.
        handler = None
        if not isinstance(obj, dict):
            handler = next((h for h in _core.handlers(live=True) if h.restores(obj)), None)
        if handler is not None:
            handler.restore(
                src, obj, folder, custom_objects=custom_objects, exclude=exclude, exact_match=exact_match, into=into
            )
            return
        target = _core.restore_target(src, obj, folder, into)
        owner = None
        if not isinstance(target, dict):
            owner = next((h for h in _core.handlers(live=True) if h.claims(target)), None)
        if owner is not None:  # values the integration recognises without decoding them
            custom_objects = {**owner.known_values(src, target, folder), **(custom_objects or {})} or None
        if isinstance(target, dict) and strict:
            _core.check_app_state(src, target, folder, exclude)
        _core.restore_tree(
            src, target, folder, custom_objects=custom_objects, exclude=exclude, exact_match=exact_match, set_data=True
        )


restore.__doc__ = f"""Load an archive (or one component of it) into an existing object, in place.

    Tensors are read straight into the existing parameters and optimizer state; nothing is
    rebuilt. ``obj`` may be a :class:`~zipsave.Saveable`, any object with module/optimizer
    attributes, or an app-state dict of stateful objects and values.

    Parameters
    ----------
    obj
        The object to update.
    path
        File path, URL, or readable binary file object.
    component
        Restore only this component folder of the archive, e.g. ``"learner/module/p1"``.
        It goes to the same place in ``obj`` (``obj.learner.module["p1"]``), leaving every
        other part untouched; when ``obj`` does not hold that component (you passed the
        sub-object itself) it goes into ``obj``.
    into
        Where in ``obj`` the component goes instead, as a path of attributes and dict keys
        (``"learner/module/p0"``; ``""`` is ``obj`` itself): the self-play swap, e.g.
        ``restore(algo, "old.zip", component="learner/module/p1", into="learner/module/p0")``.
    exact_match
        Require the saved state dicts to match the object's exactly.
    exclude
        As for :func:`load`.
{_options_doc()}

    Examples
    --------
    >>> zipsave.restore(algo, "ckpt.zip", component="learner/module")  # doctest: +SKIP
    """


@nesting_as_error
def set_parameters_from_archive(
    obj: Any, path: Any, *, exact_match: bool = True, device: Any = "auto", limits: Limits | None = None
) -> None:
    """Load only the state dicts of an archive into ``obj`` (``data`` is never decoded)."""
    with LoadSession(path, LoadOptions(device=device, limits=limits)) as src:
        _core.restore_tree(src, obj, "", custom_objects=None, exclude=[], exact_match=exact_match, set_data=False)
