"""The trust policy: which globals a pickled entry may import, decided on the name alone."""

from __future__ import annotations

import dataclasses
import importlib
import reprlib
import types
from typing import Any, cast

from .._record import record
from ..exceptions import DecodeError, UnsafeGlobalError
from ._allowlist import default_allowlist
from ._names import (
    CODE_HINT,
    CODE_RUNNERS,
    LOCAL_HINT,
    TORCH_PICKLE_HINT,
    TORCH_PICKLE_RUNNERS,
    canonical,
    import_attribute,
    import_spelling,
    is_dotted,
    is_dunder,
    is_local,
    normalise_trusted,
)
from ._sealed import Sealed, seal, seal_module

__all__ = ["TrustPolicy"]


@seal
@record(frozen=True, init=False, repr=False, eq=False)
class TrustPolicy(metaclass=Sealed):
    """Which globals a pickled entry may import.

    Parameters
    ----------
    allow_pickle : bool, default False
        Trust the archive completely: :func:`restricted_loads` becomes ``cloudpickle.loads``
        (SB3's behaviour) and every name is admitted.
    trusted : tuple, default ()
        Globals admitted on top of the default allowlist (:func:`~zipsave._trust.default_allowlist`). Normalised on construction to a
        tuple of strings: ``"pkg.mod.Name"`` (also spelled ``"pkg.mod:Name"``, or given as the
        class/function itself) admits exactly that name; ``"pkg.mod.*"`` and ``"pkg."``
        (also given as a module object) admit every class and function defined under that
        prefix; both are stored as ``"pkg.mod."``.

    Examples
    --------
    >>> policy = TrustPolicy.make(trusted=["mypkg.models:Net", "mypkg.layers.*"])
    >>> policy.trusted
    ('mypkg.models.Net', 'mypkg.layers.')
    >>> policy.is_trusted("mypkg.layers.conv", "Conv")
    True
    >>> policy.is_trusted("os", "system")
    False
    """

    allow_pickle: bool = False
    trusted: tuple = ()
    #: ``(name, object)`` pairs admitted as looked-up references only (see :meth:`with_references`).
    references: tuple = ()

    # What `@dataclass(frozen=True)` generates, written out: the decorator compiles them from
    # source at import, a cost of every first load in a fresh process. It still makes this a
    # frozen dataclass (`fields()`, `replace()`, `asdict()`), and its `__setattr__` and
    # `__delattr__` (from `record`, as the decorator's) refuse every write to an instance; the
    # sealed class refuses replacing these.
    def __init__(self, allow_pickle: bool = False, trusted: tuple = (), references: tuple = ()) -> None:
        object.__setattr__(self, "allow_pickle", allow_pickle)
        object.__setattr__(self, "trusted", trusted)
        object.__setattr__(self, "references", references)
        self.__post_init__()

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        return (
            f"{self.__class__.__qualname__}(allow_pickle={self.allow_pickle!r}, trusted={self.trusted!r}, "
            f"references={self.references!r})"
        )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            that = cast(TrustPolicy, other)
            return (self.allow_pickle, self.trusted, self.references) == (
                that.allow_pickle,
                that.trusted,
                that.references,
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.allow_pickle, self.trusted, self.references))

    def __post_init__(self) -> None:
        # `allow_pickle="no"` is truthy; a switch that disables the safety must be a real bool.
        if not isinstance(self.allow_pickle, bool):
            raise TypeError(f"`allow_pickle` must be True or False, got {self.allow_pickle!r}.")
        object.__setattr__(self, "trusted", normalise_trusted(self.trusted))

    @classmethod
    def make(cls, allow_pickle: bool = False, trusted: Any = ()) -> TrustPolicy:
        """Build a policy from the user-facing ``allow_pickle=`` and ``trusted=`` arguments.

        Parameters
        ----------
        allow_pickle : bool, default False
            See the class docstring.
        trusted : str, class, function, module or iterable of those, default ()
            A single string is one entry, never a sequence of characters.

        Returns
        -------
        TrustPolicy

        Raises
        ------
        TypeError
            If ``allow_pickle`` is not a bool or an entry is of an unusable type.
        ValueError
            If an entry is not a global name or prefix, or names a local object.

        Examples
        --------
        >>> from collections import OrderedDict
        >>> TrustPolicy.make(trusted=OrderedDict).trusted
        ('collections.OrderedDict',)
        """
        return cls(allow_pickle=allow_pickle, trusted=trusted)

    def with_references(self, objects: Any) -> TrustPolicy:
        """This policy, plus ``objects`` (classes the caller already named, e.g. the ``cls`` of
        a load and its policy classes) admitted as *references* only.

        A pickle may name such a class (``policy_class``) and get the caller's own object back,
        without an import. A pickle that *calls* it (REDUCE, NEWOBJ) or sets the state of an
        instance (BUILD) stays under the allowlist: naming a class grants no more than the
        caller's own ``cls=`` already did.

        Parameters
        ----------
        objects : iterable of classes or functions
            Module-level objects; others (local classes, lambdas) are ignored.

        Returns
        -------
        TrustPolicy
        """
        pairs = dict(self.references)
        for obj in objects:
            module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
            if isinstance(module, str) and isinstance(qualname, str) and not is_local(qualname):
                module, qualname = canonical(module, qualname)
                pairs.setdefault(f"{module}.{qualname}", obj)
        return dataclasses.replace(self, references=tuple(sorted(pairs.items(), key=lambda kv: kv[0])))

    def reference(self, module: str, qualname: str) -> Any:
        """The object admitted as a reference for ``module.qualname``, or ``None``."""
        if not (isinstance(module, str) and isinstance(qualname, str)):
            return None
        module, qualname = canonical(module, qualname)
        full = f"{module}.{qualname}"
        return next((obj for name, obj in self.references if name == full), None)

    def _match(self, full: str) -> str | None:
        """The entry admitting ``full``: itself if exact, else the prefix; None if none."""
        if full in default_allowlist() or full in self.trusted:
            return full
        for entry in self.trusted:
            # A prefix admits classes and functions, never a program (`pkg.__main__`, whose
            # import runs it) nor another dunder module.
            if (
                entry.endswith(".")
                and full.startswith(entry)
                and not any(is_dunder(part) for part in full[len(entry) :].split(".")[:-1])
            ):
                return entry
        return None

    def is_trusted(self, module: str, qualname: str) -> bool:
        """Whether the global ``module.qualname`` may be imported. Imports nothing.

        Parameters
        ----------
        module : str
            The module name, as a pickle spells it (``numpy.core`` and ``numpy._core`` are
            the same).
        qualname : str
            The dotted name inside the module.

        Returns
        -------
        bool
            True if ``allow_pickle`` is set, or the name is in the default allowlist (:func:`~zipsave._trust.default_allowlist`), or
            ``trusted`` names it exactly or by prefix. Names of local objects (``<locals>``,
            ``<lambda>``) and malformed names are never trusted without ``allow_pickle``.

        Examples
        --------
        >>> TrustPolicy().is_trusted("collections", "OrderedDict")
        True
        >>> TrustPolicy().is_trusted("builtins", "eval")
        False
        """
        if self.allow_pickle:
            return True
        if not (isinstance(module, str) and isinstance(qualname, str)):
            return False
        module, qualname = canonical(module, qualname)
        if not (is_dotted(module) and is_dotted(qualname)):
            return False
        return self._match(f"{module}.{qualname}") is not None

    def resolve(
        self,
        module: str,
        qualname: str,
        *,
        key: str | None = None,
        member: str | None = None,
        archive: Any = None,
    ) -> object:
        """Import the global ``module.qualname`` if the policy trusts it.

        Parameters
        ----------
        module, qualname : str
            The global, as in :meth:`is_trusted`.
        key, member, archive : optional
            Where the reference came from; copied into the errors.

        Returns
        -------
        object
            The imported object.

        Raises
        ------
        UnsafeGlobalError
            Before importing anything, if the name is not trusted. Also after importing, if a
            name admitted only by a prefix reaches past it: through a module attribute
            (``pkg.mod.os.system``), a dunder attribute, or to an object that is not a class or
            function defined under the prefix.
        DecodeError
            If a trusted name cannot be imported or has no such attribute.

        Examples
        --------
        >>> TrustPolicy().resolve("collections", "OrderedDict")
        <class 'collections.OrderedDict'>
        """
        where: dict[str, Any] = {"key": key, "member": member, "archive": archive}
        if isinstance(module, str) and isinstance(qualname, str):
            module, qualname = canonical(module, qualname)
        full = f"{module}.{qualname}"
        if not self.is_trusted(module, qualname):
            if isinstance(qualname, str) and is_local(qualname):
                raise UnsafeGlobalError(full, hint=LOCAL_HINT, **where)
            if full.startswith(CODE_RUNNERS):
                raise UnsafeGlobalError(full, hint=CODE_HINT, **where)
            if full.startswith(TORCH_PICKLE_RUNNERS):
                raise UnsafeGlobalError(full, hint=TORCH_PICKLE_HINT, **where)
            raise UnsafeGlobalError(full, **where)
        admitted_by = None if self.allow_pickle else self._match(full)
        by_prefix = admitted_by is not None and admitted_by != full

        def refuse(reason: str) -> UnsafeGlobalError:
            return UnsafeGlobalError(
                full,
                hint=f"It matches the trusted prefix `{admitted_by}`, but {reason}; a prefix admits only "
                f"classes and functions defined under it. Pass `trusted=[{full!r}]` to allow exactly this name.",
                **where,
            )

        parts = qualname.split(".")
        if by_prefix and any(is_dunder(part) for part in parts):
            raise refuse("it reaches a dunder attribute")
        try:
            found: Any = importlib.import_module(import_spelling(module))
        except Exception as err:  # an import runs module code; any failure is a decode failure
            raise DecodeError(
                f"cannot import module `{module}` for global `{full}` ({type(err).__name__}: {err}).", **where
            ) from err
        for depth, part in enumerate(import_attribute(module, qualname).split(".")):
            if by_prefix and depth and isinstance(found, types.ModuleType):
                raise refuse(f"`{found.__name__}` is a module imported there")
            try:
                found = getattr(found, part)
            except AttributeError as err:
                raise DecodeError(
                    f"module `{module}` has no attribute `{qualname}` (global `{full}`).", **where
                ) from err
        if by_prefix:
            defined_in = getattr(found, "__module__", None)
            kind_ok = isinstance(found, (type, types.FunctionType, types.BuiltinFunctionType))
            if not kind_ok:
                raise refuse(f"it is a {type(found).__name__} object, not a class or function")
            if not (isinstance(defined_in, str) and f"{defined_in}.".startswith(admitted_by or "")):
                raise refuse(f"it is defined in `{defined_in}`")
        return found


seal_module(__name__)  # `default_allowlist` and the names above cannot be rebound by loaded data
