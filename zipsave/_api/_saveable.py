"""The ``Saveable`` mixin: ``class Algo(zipsave.Saveable)`` gets save / load /
set_parameters / get_parameters, with constructor arguments recorded automatically."""

from __future__ import annotations

import inspect
from typing import Any, Iterable

from .._calls import keyword_options
from .._core import Component, LoadReport, collect, set_parameters_from_dict
from ._load import load as load_object
from ._load import restore, set_parameters_from_archive
from ._save import save

__all__ = ["Saveable"]


#: What SB3's ``BaseAlgorithm.load`` takes by position after the path: what an extra positional
#: value of ``Algo.load(path, env)`` most likely means.
_SB3_LOAD_ORDER = ("env", "device", "custom_objects")


class _LoadMethod:
    """``Algo.load(path)`` builds a new model; ``algo.load(path)`` loads into ``algo`` in place
    and returns it, so the SB3 pitfall of an instance call that silently does nothing
    (SB3 #928, #2152) cannot happen."""

    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:

            @keyword_options(f"{owner.__name__}.load", order=_SB3_LOAD_ORDER)
            def load(path: Any, **kwargs: Any) -> Any:
                return load_object(path, cls=owner, **kwargs)

            load.__doc__ = Saveable._load_doc
            return load

        @keyword_options(f"{owner.__name__}(...).load", order=_SB3_LOAD_ORDER)
        def load_into(path: Any, **kwargs: Any) -> Any:
            overrides = {k: kwargs.pop(k) for k in list(kwargs) if k not in _RESTORE_KEYS}
            restore(instance, path, **kwargs)
            for key, value in overrides.items():
                setattr(instance, key, value)
            return instance

        load_into.__doc__ = Saveable._load_doc
        return load_into


_RESTORE_KEYS = frozenset(inspect.signature(restore).parameters) - {"obj", "path"}


class Saveable(Component):
    """Mixin that makes a model class savable to, and loadable from, one zip archive.

    Subclasses need nothing but inheritance. Constructor arguments are recorded when an
    instance is created; attributes holding ``torch.nn.Module``, ``torch.optim.Optimizer``
    (also one held by a module or its sub-modules, e.g. ``policy.optimizer``) or anything else with
    ``state_dict``/``load_state_dict`` become ``.pth`` members; loose tensors go to
    ``pytorch_variables.pth``; a ``Saveable`` attribute becomes a component folder;
    environments, loggers, locks and files are left out; everything else goes to ``data``.
    SB3's hooks ``_excluded_save_params()`` and ``_get_torch_save_params()`` are honoured.

    Examples
    --------
    >>> class Algo(zipsave.Saveable):  # doctest: +SKIP
    ...     def __init__(self, env=None, learning_rate=3e-4):
    ...         self.policy = torch.nn.Linear(4, 2)
    >>> Algo().save("algo.zip")  # doctest: +SKIP
    >>> algo = Algo.load("algo.zip", env=env)  # doctest: +SKIP
    """

    _load_doc = """Load a saved model.

    On the class (``Algo.load(path, env=env, **overrides)``) a new instance is built from the
    recorded constructor arguments (keyword overrides win), then every saved attribute,
    state dict and component is restored. On an instance (``algo.load(path)``) the archive is
    restored into that instance in place, and the instance is returned.
    Keyword arguments are those of :func:`zipsave.load`.
    """

    load = _LoadMethod()
    zipsave_report: LoadReport | None = None

    def save(
        self, path: Any, exclude: Iterable[str] | None = None, include: Iterable[str] | None = None, **options: Any
    ) -> Any:
        """Save this model to ``path``; ``options`` are those of :func:`zipsave.save`
        (``background``, ``storage_options``, ``progress``, ``sha256``, ``durable``). With
        ``background=True`` returns a :class:`~zipsave.SaveHandle`."""
        return save(self, path, exclude=exclude, include=include, **options)

    def get_parameters(self) -> dict[str, dict[str, Any]]:
        """``{name: state_dict}`` of every module, optimizer and stateful attribute."""
        parts = collect(self, None, None)
        return {name: provider.state_dict() for name, provider in parts.state}

    def set_parameters(self, load_path_or_dict: Any, exact_match: bool = True, device: Any = "auto") -> None:
        """Load state dicts only (no ``data``) from an archive or a ``{name: state_dict}`` dict.

        Parameters
        ----------
        load_path_or_dict
            An archive path/file object, or a dict as returned by :meth:`get_parameters`.
        exact_match
            Require the saved names (and each module's keys) to match this model's exactly.
        device
            Device for tensors read from an archive.

        Raises
        ------
        ParameterMismatchError
            Names or shapes differ and ``exact_match`` is set.
        """
        if isinstance(load_path_or_dict, dict):
            set_parameters_from_dict(self, load_path_or_dict, exact_match=exact_match)
        else:
            set_parameters_from_archive(self, load_path_or_dict, exact_match=exact_match, device=device)
