"""The options every load-like verb takes (``load``, ``restore``, ``load_archive``,
``Saveable.load``), defined once: their defaults, their checks and their documentation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

# On first use: the sign extra's records (`_core.Trust`), only when `trust=` is given; the trust
# policy (`_trust.TrustPolicy`), only when `allow_pickle=`/`trusted=` is given or a load asks it.
from .. import _core, _trust
from .._archive import Limits
from ..exceptions import UsageError
from ._report import LoadReport

if TYPE_CHECKING:
    from .._sign import Trust
    from .._trust import TrustPolicy

__all__ = ["OPTION_DOCS", "LoadOptions", "check_custom_objects"]


def check_custom_objects(custom_objects: Any) -> None:
    """``custom_objects`` must be a dict of ``data`` keys to values: the one message every door
    (``zipsave.load``, SB3's ``load`` under ``install()``) gives for anything else.

    Raises
    ------
    TypeError
        It is not a mapping; a list of key names is answered with the dict to write instead.
    """
    if custom_objects is None or isinstance(custom_objects, Mapping):
        return
    keys = ""
    if isinstance(custom_objects, (list, tuple, set)) and all(isinstance(k, str) for k in custom_objects):
        keys = ", ".join(f"{k!r}: ..." for k in custom_objects)
    raise UsageError(
        f"custom_objects must be a dict of `data` keys to the values used instead of the saved ones, "
        f"found a {type(custom_objects).__name__}: {custom_objects!r}. Pass e.g. "
        f"custom_objects={{{keys or repr('learning_rate') + ': 0.0'}}}."
    )


class LoadOptions:
    """How one load reads an archive. Every field is a keyword argument of the loading verbs,
    with the same name and default (:attr:`DEFAULTS`); :data:`OPTION_DOCS` documents each.

    Immutable once made. A plain class rather than a frozen dataclass: building that compiled
    its methods from source at import, 1.6 ms of every first load (``docs/benchmarks.rst``).
    """

    custom_objects: dict[str, Any] | None
    device: Any
    print_system_info: bool
    allow_pickle: bool
    trusted: Iterable[Any]
    strict: bool
    limits: Limits | None
    report: LoadReport | None
    verify: bool
    mmap: bool
    storage_options: dict[str, Any] | None
    progress: bool
    skip_broken_tensors: bool
    trust: Trust | None
    _policy: TrustPolicy | None

    def __init__(
        self,
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
        trust: Trust | None = None,
    ) -> None:
        check_custom_objects(custom_objects)
        if trust is not None and not isinstance(trust, _core.Trust):
            raise UsageError(f"trust must be a zipsave.Trust or None, found {type(trust).__name__}.")
        values = locals()
        for name in self.DEFAULTS:
            object.__setattr__(self, name, values[name])
        # Built (and checked) once, so a bad `trusted=` fails before the archive is opened. The
        # default one (nothing trusted, which nothing can make invalid) is built when a load first
        # asks for it: an archive of tensors and plain values never does.
        default = allow_pickle is False and type(trusted) is tuple and not trusted
        policy = None if default else _trust.TrustPolicy.make(allow_pickle=allow_pickle, trusted=trusted)
        object.__setattr__(self, "_policy", policy)

    #: Every option's name and default, in the order of the constructor's parameters (read off
    #: the constructor, so the two cannot drift).
    DEFAULTS: dict[str, Any] = dict(
        zip(__init__.__code__.co_varnames[1 : __init__.__code__.co_argcount], __init__.__defaults__ or ())
    )
    __slots__ = (*DEFAULTS, "_policy")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"LoadOptions are immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"LoadOptions are immutable: cannot delete {name!r}")

    def __repr__(self) -> str:
        return "LoadOptions(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self.DEFAULTS) + ")"

    @property
    def policy(self) -> TrustPolicy:
        """The trust policy of ``allow_pickle`` and ``trusted``."""
        policy = self._policy
        if policy is None:  # the default: built on first use, the same for every caller
            policy = _trust.TrustPolicy.make(allow_pickle=False, trusted=())
            object.__setattr__(self, "_policy", policy)
        return policy

    @classmethod
    def of(cls, call: dict[str, Any]) -> LoadOptions:
        """The options among a verb's arguments (``LoadOptions.of(locals())``)."""
        return cls(**{name: call[name] for name in cls.DEFAULTS if name in call})


#: One line of documentation per option, shared by every verb's docstring.
OPTION_DOCS: dict[str, str] = {
    "custom_objects": "``{key: value}`` used instead of those ``data`` keys, which are never decoded.",
    "device": 'Where every tensor goes, including tensors inside ``data``; ``"auto"`` (the default) picks CUDA '
    "when it is available, else the CPU.",
    "print_system_info": "Print the saved and the current system info and the differences that matter.",
    "allow_pickle": "Trust the archive completely (SB3's plain cloudpickle); see :doc:`security`.",
    "trusted": "Globals a pickled entry may import on top of the allowlist; see :doc:`security`.",
    "strict": "Raise instead of skipping a broken entry.",
    "limits": "Safety limits (:class:`~zipsave.Limits`).",
    "report": "A :class:`~zipsave.LoadReport` to fill with the skipped entries.",
    "verify": "Check every member against its CRC-32 and the manifest while reading.",
    "mmap": "Map tensor records and ``.npy`` arrays (a replay buffer) from the file instead of reading them: "
    'copy-on-write, checked once unless ``verify=False`` (lazy start-up); with ``device="auto"`` the tensors stay '
    "on the CPU, mapped; see :ref:`mmap-loads`.",
    "storage_options": "Options for the fsspec filesystem of a URL ``path`` (the ``remote`` extra).",
    "progress": "Show a tqdm progress bar (the ``progress`` extra); silent by default.",
    "skip_broken_tensors": "Skip a corrupt or unreadable tensor member (``.pth``/``.npy``) with a warning instead of "
    "raising :class:`~zipsave.IntegrityError` (the object keeps its fresh values there); see :doc:`security`.",
    "trust": "A :class:`~zipsave.Trust`: check the archive's signature (the ``sign`` extra) before anything of it "
    "is decoded, and raise :class:`~zipsave.SignatureError` if it does not hold; see :doc:`signing`.",
}
