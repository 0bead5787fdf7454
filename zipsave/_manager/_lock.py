"""One manager per checkpoint directory: a lock held for the manager's lifetime.

Locally the lock is ``flock`` on ``zipsave-checkpoints.lock``: the kernel drops it when the
holder dies, however it dies, so a SIGKILLed run never leaves a lock behind. Where ``flock``
is not available (other systems, object stores), the lock file names its holder (host,
process id and that process's start time): a lock whose holder is a process on this host
that no longer runs is stale and taken over; a holder on another host can only be removed
on purpose (``break_lock=True``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from typing import Any

from .._printable import visible
from ..exceptions import CheckpointLockedError
from ._store import LocalStore, Store

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "DirectoryLock", "acquire"]

LOCK_NAME = "zipsave-checkpoints.lock"
_log = logging.getLogger("zipsave")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _holder() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": _start_time(pid), "since": time.time()}


def _alive(holder: dict[str, Any]) -> bool:
    """Whether the lock's holder may still run (``True`` when this host cannot tell)."""
    if holder.get("host") != socket.gethostname():
        return True
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    started = holder.get("start")
    return started is None or _start_time(pid) in (None, started)


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another process"
    since = holder.get("since")
    try:  # the holder file is anyone's to write: a time of 1e308 or NaN is shown as no time
        when = (
            time.strftime(" since %Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if isinstance(since, (int, float)) else ""
        )
    except (OverflowError, ValueError, OSError):
        when = ""
    return visible(f"process {holder.get('pid')} on host `{holder.get('host')}`{when}")


def _parse(raw: bytes | None) -> dict[str, Any] | None:
    try:
        value = json.loads(raw or b"")
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class DirectoryLock:
    """A held lock; :meth:`release` gives it up (also when garbage collected)."""

    def __init__(self, store: Store, fd: int | None, token: str | None) -> None:
        self.store = store
        self._fd = fd
        self._token = token

    @property
    def held(self) -> bool:
        return self._fd is not None or self._token is not None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # drops the flock; the file stays, so no one locks a deleted inode
        if self._token is not None:
            token, self._token = self._token, None
            current = _parse(self.store.read(LOCK_NAME))
            if current and current.get("token") == token:
                self.store.delete(LOCK_NAME)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - best effort while the interpreter tears down
            pass


def _locked_error(store: Store, holder: dict[str, Any] | None, *, can_break: bool) -> CheckpointLockedError:
    ours = holder is not None and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname()
    if ours:  # typically a notebook cell run again while its earlier manager is still open
        who = f"{_describe(holder)}, that is this process: another CheckpointManager object still has it open"
        hint = (
            "Close that one first (`manager.close()`; in a notebook, the manager a cell made before), "
            "or open managers in a `with` block, which closes them."
        )
    else:
        who = _describe(holder)
        hint = "Close the other manager (`manager.close()`), or use another directory."
        if can_break:
            hint += " If you are sure its process is gone, open with `break_lock=True`."
    return CheckpointLockedError(
        f"checkpoint directory `{store.location}` is in use by {who} "
        f"(lock file `{LOCK_NAME}`); two managers must not write to one directory.",
        hint=hint,
    )


def acquire(store: Store, *, break_lock: bool = False) -> DirectoryLock:
    """Take the directory's lock, or raise :class:`~zipsave.exceptions.CheckpointLockedError`."""
    if isinstance(store, LocalStore) and fcntl is not None:
        fd = os.open(store.target(LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _parse(os.pread(fd, 4096, 0))
            os.close(fd)
            raise _locked_error(store, holder, can_break=False) from None
        except OSError:  # a filesystem without flock (some network mounts): use the holder file
            os.close(fd)
        else:
            payload = json.dumps(_holder()).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, payload, 0)
            return DirectoryLock(store, fd, None)
    current = _parse(store.read(LOCK_NAME))
    if current is not None and current.get("token"):
        if _alive(current) and not break_lock:
            raise _locked_error(store, current, can_break=True)
        _log.warning("zipsave: taking over the lock of %s on `%s`", _describe(current), store.location)
    token = uuid.uuid4().hex
    store.write(LOCK_NAME, json.dumps({**_holder(), "token": token}).encode())
    written = _parse(store.read(LOCK_NAME))
    if not written or written.get("token") != token:  # another manager wrote at the same moment
        raise _locked_error(store, written, can_break=True)
    return DirectoryLock(store, None, token)
