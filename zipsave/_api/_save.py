"""The saving verbs: ``save`` (models, SB3 algorithms, app-state dicts; optionally in the
background) and ``save_archive`` (SB3's ``save_to_zip_file`` from parts)."""

from __future__ import annotations

import functools
import sys
from typing import Any, Iterable

import torch

from .. import _api, _archive, _core  # the background saver, the progress bar and the sign extra, when asked for
from .._calls import keyword_options
from .._core import Parts, check_signable, collect, encode, write
from ..exceptions import EncodeError

__all__ = ["save", "save_archive"]

#: The background saver's module: only a save with ``background=True`` imports it.
_BACKGROUND = f"{_api.__name__}._background"


@keyword_options("zipsave.save", order=("exclude", "include"))
def save(
    obj: Any,
    path: Any,
    *,
    exclude: Iterable[str] | None = None,
    include: Iterable[str] | None = None,
    background: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    sha256: bool = False,
    durable: bool = True,
    incremental: bool = False,
    sign: Any = None,
) -> Any:
    """Save a model, a :class:`~zipsave.Saveable`, an SB3 algorithm or an app-state dict.

    Parameters
    ----------
    obj
        What to save. Attributes holding modules, optimizers and other objects with
        ``state_dict``/``load_state_dict`` become ``.pth`` members; loose tensors go to
        ``pytorch_variables.pth``; nested ``Saveable`` attributes become component folders;
        everything else goes to ``data``. A dict is saved as app state (one member per
        stateful value, the rest in ``data``).
    path
        A file path (``.zip`` is appended when it has no suffix), an ``fsspec`` URL, or a
        writable binary file object (not closed).
    exclude, include
        Attribute names (glob patterns allowed; ``"learner/opt"`` addresses a component) to
        leave out of, or force into, the archive; a string is one name. For an SB3 model, ``include`` may also
        name ``"replay_buffer"`` and ``"vec_normalize"``: stored as arrays in component
        folders of the same archive and restored by :func:`load` (see :doc:`sb3`).
    background
        Return at once with a :class:`~zipsave.SaveHandle`; the archive reflects the state
        at the moment of the call (tensors are copied before returning) and is written on a
        worker thread. Saves to the same destination are written in call order. An SB3
        replay buffer of 16 MB of rows or more is copied by the worker thread, behind a write
        barrier on SB3's buffer methods that keeps the rows written meanwhile out of the
        archive, so the call does not wait for that copy; it is given back once written.
    storage_options
        Options for the fsspec filesystem of a URL ``path`` (e.g. ``{"key": ...,
        "client_kwargs": {"endpoint_url": ...}}`` for ``s3://``); needs the ``remote`` extra.
    progress
        Show a tqdm progress bar (the ``progress`` extra); silent by default.
    sha256
        Also record the SHA-256 of the tensor members (``.pth``, ``.npy``) in
        ``manifest.json``. Every member always gets its size and CRC-32 (checked on load),
        and the members written from memory (``data``, ``init.json``, ...) a SHA-256;
        hashing the tensors too runs at about 1.5 GB/s and roughly triples a large save.
    durable
        For a local path (the default ``True``): the archive is on disk, rename included,
        before ``save`` returns, so it survives a power cut or an OS crash. ``False`` skips
        the two ``fsync`` calls: the replacement stays atomic (a crash of the process never
        leaves a partial archive, and the previous one stays whole until the rename), but
        after a power cut the path may hold the previous archive, or on some file systems
        an empty file. A file object is written as it is either way (flushing and syncing
        it is the caller's), and URLs are as durable as their store.
    incremental
        With ``background=True``: keep the copy of an SB3 replay buffer (``include=
        ["replay_buffer"]``) after the save has written, so that the next incremental
        background save of the same buffer copies only the rows written since (the first
        fills it as any background save does: on the worker thread, behind the write
        barrier). The copy stays, as much memory
        again as the buffer, until the buffer is freed or :func:`zipsave.release_snapshots`
        is called; :class:`~zipsave.CheckpointManager` and :class:`zipsave.sb3.CheckpointCallback`
        turn it on. A save that arrives while an earlier one is still writing from that copy
        waits for it, so there is never a second copy of the buffer. The archive is the same
        either way. It also keeps the memory of the copies of the tensors (as much as the
        model's tensors and optimizer state, also released by :func:`zipsave.release_snapshots`),
        so that the next save copies into pages already in place instead of faulting in fresh
        ones. Ignored without ``background``.
    sign
        Sign the archive as it is written (the ``sign`` extra): a :class:`~zipsave.Signer`, or
        the path of a PEM private key (an embedded ``zipsave.sig``). See :doc:`signing`.

    Returns
    -------
    None, or a :class:`~zipsave.SaveHandle` when ``background=True``.

    Raises
    ------
    EncodeError
        A value can be neither encoded nor pickled; nothing is written.

    Examples
    --------
    >>> zipsave.save(model, "model.zip")  # doctest: +SKIP
    """
    if progress:
        _archive.check_progress(progress)
    signer = _core.as_signer(sign) if sign is not None else None
    if signer is not None:
        check_signable(path, signer)
    exclude = [] if exclude is None else _core.pattern_list(exclude, "exclude")
    include = [] if include is None else _core.pattern_list(include, "include")
    parts = collect(obj, exclude, include, top=True)
    try:
        enc = encode(parts, "", exclude=exclude, include=include)
    except EncodeError as err:
        instead = _env_state_instead(obj, err)
        if instead is None:
            raise
        raise instead from err
    if background:
        save_fn = functools.partial(
            write, storage_options=storage_options, progress=progress, sha256=sha256, durable=durable, sign=signer
        )
        return _api.start_background_save(enc, path, save_fn, incremental=incremental)
    if _BACKGROUND in sys.modules:  # not imported yet: no background save was ever started
        _api.wait_for_pending(path)  # an earlier background save to the same place must not land last
    write(enc, path, storage_options=storage_options, progress=progress, sha256=sha256, durable=durable, sign=signer)
    return None


def _env_state_instead(obj: Any, err: EncodeError) -> EncodeError | None:
    """An app-state value that is an ``EnvState`` whose ``state_dict`` keeps numpy arrays
    (``zipsave.sb3.VecEnvState``, for a ``data`` value): refused as such, with what to put there.
    Its numpy arrays reach a ``.pth`` member, which torch's safe loader would not read back."""
    value = obj.get(err.key) if isinstance(obj, dict) and isinstance(err.key, str) else None
    if value is None or not isinstance(value, _api.EnvState) or type(value) is _api.EnvState:
        return None
    return EncodeError(
        f"holds a {type(value).__name__}, whose `state_dict` keeps numpy arrays for a `data` value (as "
        "`CheckpointCallback(env_state=True)` stores it), which an app-state value's `.pth` member cannot hold; "
        "nothing was written.",
        key=err.key,
        hint=f"Put `zipsave.EnvState(env)` there, which captures the same state as tensors: "
        f"`{{{err.key!r}: zipsave.EnvState(env)}}`; `restore` sets the environments from it.",
    )


def save_archive(
    path: Any,
    data: dict[str, Any] | None = None,
    params: dict[str, dict[str, Any]] | None = None,
    pytorch_variables: dict[str, torch.Tensor] | None = None,
) -> None:
    """Write an archive from its parts, as SB3's ``save_to_zip_file`` does.

    Parameters
    ----------
    path
        File path, URL or writable binary file object.
    data
        Class parameters for the ``data`` member (``None`` writes an empty object).
    params
        ``{name: state_dict}``; each becomes ``<name>.pth``.
    pytorch_variables
        Loose tensors for ``pytorch_variables.pth``.
    """
    parts = Parts(dict(data or {}), list((params or {}).items()), dict(pytorch_variables or {}), [])
    write(encode(parts, "", exclude=None, include=None), path)
