"""The ``Saveable`` mixin: ``class Algo(zipsave.Saveable)`` gets save / load /
set_parameters / get_parameters, with constructor arguments recorded automatically."""

from __future__ import annotations

import inspect
from typing import Any, Iterable

from . import _persist

__all__ = ["Saveable"]


class _LoadMethod:
    """``Algo.load(path)`` builds a new model; ``algo.load(path)`` loads into ``algo`` in place
    and returns it, so the SB3 pitfall of an instance call that silently does nothing
    (SB3 #928, #2152) cannot happen."""

    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is None:
            def load(path: Any, **kwargs: Any) -> Any:
                return _persist.load(path, cls=owner, **kwargs)

            load.__doc__ = Saveable._load_doc
            return load

        def load_into(path: Any, **kwargs: Any) -> Any:
            overrides = {k: kwargs.pop(k) for k in list(kwargs) if k not in _RESTORE_KEYS}
            _persist.restore(instance, path, **kwargs)
            for key, value in overrides.items():
                setattr(instance, key, value)
            return instance

        load_into.__doc__ = Saveable._load_doc
        return load_into


_RESTORE_KEYS = frozenset(inspect.signature(_persist.restore).parameters) - {"obj", "path"}


class Saveable:
    """Mixin that makes a model class savable to, and loadable from, one zip archive.

    Subclasses need nothing but inheritance. Constructor arguments are recorded when an
    instance is created; attributes holding ``torch.nn.Module``, ``torch.optim.Optimizer``
    (also one held by a module, e.g. ``policy.optimizer``) or anything else with
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
    zipsave_report: _persist.LoadReport | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__new__(cls)
        # Recorded here rather than in __init__ so subclasses need not call super().__init__.
        obj.__dict__["_zipsave_init_args"] = (args, kwargs)
        return obj

    def _zipsave_init_record(self) -> dict[str, Any]:
        cls = type(self)
        args, kwargs = self.__dict__.get("_zipsave_init_args", ((), {}))
        try:
            bound = inspect.signature(cls.__init__).bind(self, *args, **kwargs)
        except TypeError:
            bound = None
        recorded: dict[str, Any] = {}
        if bound is not None:
            for name, value in list(bound.arguments.items())[1:]:
                kind = inspect.signature(cls.__init__).parameters[name].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    recorded.update(value)
                elif kind is not inspect.Parameter.VAR_POSITIONAL:
                    recorded[name] = value
        else:
            recorded = dict(kwargs)
        return {"class": f"{cls.__module__}:{cls.__qualname__}", "args": recorded}

    def save(
        self,
        path: Any,
        exclude: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
        *,
        background: bool = False,
        storage_options: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> Any:
        """Save this model to ``path`` (see :func:`zipsave.save`); with ``background=True``
        returns a :class:`~zipsave.SaveHandle`."""
        return _persist.save(
            self, path, exclude=exclude, include=include, background=background,
            storage_options=storage_options, progress=progress,
        )

    def get_parameters(self) -> dict[str, dict[str, Any]]:
        """``{name: state_dict}`` of every module, optimizer and stateful attribute."""
        parts = _persist._collect(self, None, None)
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
            _persist.set_parameters_from_dict(self, load_path_or_dict, exact_match=exact_match)
        else:
            _persist.set_parameters_from_archive(self, load_path_or_dict, exact_match=exact_match, device=device)
