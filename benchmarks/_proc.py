"""Fresh-process measurement, shared by every driver of ``benchmarks/``: the driver side
(:func:`spawn`: one operation in a fresh interpreter, its one JSON line back) and the worker
side (:func:`measure`: time one body with its peak extra memory; :func:`answer`: print the
worker's JSON line).

Standard library only, so that a worker which imports this has imported nothing that an
operation under measurement would import (the first-load rows rely on it).

Memory: the heap is trimmed and the kernel's peak-RSS counter is reset through
``/proc/self/clear_refs`` just before the body; its extra memory is ``VmHWM`` after it minus
``VmRSS`` before.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

_LIBC = None


def malloc_trim() -> None:
    global _LIBC
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL("libc.so.6")
        _LIBC.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def status(field: str) -> int | None:
    """``field`` of ``/proc/self/status`` in bytes (``VmRSS``, ``VmHWM``), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def warm(path: str) -> None:
    """Read ``path`` once (untimed) so the op reads from the page cache, as a user who just
    saved or copied the file would."""
    buf = bytearray(8 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def measure(body: Callable[[], Any], *, prefault: Callable[[], None] | None = None, wait: float = 0.0) -> dict:
    """Run ``body`` once with the collector off; ``{"seconds", "delta_rss"}``.

    ``prefault`` runs after a collection and before the heap is trimmed (it touches and frees
    memory the body will reuse); ``wait`` seconds pass after the trim (so freed memory goes
    back to the host before the body pays for first touches).
    """
    gc.collect()
    if prefault is not None:
        prefault()
    malloc_trim()
    if wait:
        time.sleep(wait)
    peak_ok = reset_peak()
    base = status("VmRSS")
    gc.disable()
    try:
        t0 = time.perf_counter()
        body()
        seconds = time.perf_counter() - t0
    finally:
        gc.enable()
    hwm = status("VmHWM") if peak_ok else None
    return {"seconds": seconds, "delta_rss": (hwm - base) if (hwm is not None and base is not None) else None}


def answer(work: Callable[[dict], dict], spec: dict) -> None:
    """The worker's end: ``work(spec)`` (or its error) as the last line of stdout."""
    try:
        out = work(spec)
    except Exception as err:  # noqa: BLE001 - reported; the driver decides what a failure means
        out = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
    sys.stdout.write("\n" + json.dumps(out) + "\n")


def spawn(argv: list[str], spec: dict, timeout: float, paths: list[str]) -> dict:
    """Run ``python *argv SPEC`` in a fresh interpreter with ``paths`` first on ``PYTHONPATH``;
    the JSON object it printed last, or ``{"error": ...}``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("PYTHONHASHSEED", "0")
    try:
        proc = subprocess.run(
            [sys.executable, *argv, json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"error": f"worker exited with {proc.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])
