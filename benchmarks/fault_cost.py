"""What a page fault costs on the machine at hand (issue 37, part 2): fresh anonymous memory made
resident with ``madvise(MADV_POPULATE_WRITE)`` 2 MiB at a time, as 4 KiB pages and as
transparent huge pages, in fresh mappings of the size a copying load reads into.

A copying load of a large member reads into a fresh arena (``zipsave._tensors._arena``) whose
pages a helper thread populates ahead of the reads; whether those should be huge pages depends
on the host, and is opt-in (``ZIPSAVE_HUGE_PAGES=1``). This prints, per page size, the wall
clock and the thread's CPU time of each 2 MiB (min, median, max), the time for the whole
mapping, and the kernel's counters that say why: huge-page faults, fallbacks and compaction
stalls (``/proc/vmstat``) and whether a virtio balloon reports free pages to the host (then
free 2 MiB blocks, the ones huge pages are made of, are the memory the host has taken back).

Usage::

    python benchmarks/fault_cost.py --mib 128 --reps 3 --out benchmarks/results/fault_cost
    python benchmarks/fault_cost.py --smoke
"""

from __future__ import annotations

import argparse
import glob
import json
import mmap
import os
import statistics
import sys
import time

import numpy as np

from zipsave._tensors._prefault import populate

_HUGE = 2 << 20
_COUNTERS = ("thp_fault_alloc", "thp_fault_fallback", "compact_stall", "compact_success", "compact_fail")
_REPORTING_BIT = 5  # VIRTIO_BALLOON_F_REPORTING


def vmstat() -> dict[str, int]:
    """The counters of ``/proc/vmstat`` this benchmark reads (empty where there is none)."""
    try:
        with open("/proc/vmstat", encoding="ascii") as f:
            pairs = (line.split() for line in f)
            return {name: int(value) for name, value in pairs if name in _COUNTERS}
    except OSError:
        return {}


def free_page_reporting() -> bool | None:
    """Whether a virtio balloon reports free pages to the host (``None``: no balloon)."""
    found = glob.glob("/sys/bus/virtio/drivers/virtio_balloon/*/features")
    if not found:
        return None
    with open(found[0], encoding="ascii") as f:
        bits = f.read().strip()
    return len(bits) > _REPORTING_BIT and bits[_REPORTING_BIT] == "1"


def one_mapping(nbytes: int, huge: bool) -> dict:
    """Populate a fresh mapping of ``nbytes`` 2 MiB at a time; the times of each piece."""
    mapped = mmap.mmap(-1, nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    lease = np.frombuffer(mapped, dtype=np.uint8)
    first = -lease.ctypes.data % _HUGE  # 2 MiB aligned, so every piece can be one huge page
    mapped.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE, first, nbytes)
    wall, cpu = [], []
    before = vmstat()
    start = time.perf_counter()
    for offset in range(first, first + nbytes, _HUGE):
        w0, c0 = time.perf_counter(), time.thread_time()
        if not populate(lease.ctypes.data + offset, _HUGE):
            raise SystemExit("this OS cannot populate memory (MADV_POPULATE_WRITE, Linux 5.14+)")
        wall.append(time.perf_counter() - w0)
        cpu.append(time.thread_time() - c0)
    total = time.perf_counter() - start
    after = vmstat()
    del lease
    mapped.close()
    return {
        "pages": "huge" if huge else "4k",
        "total_s": total,
        "wall_ms": [x * 1e3 for x in wall],
        "cpu_ms": [x * 1e3 for x in cpu],
        "vmstat": {name: after.get(name, 0) - before.get(name, 0) for name in _COUNTERS},
    }


def _spread(values: list[float]) -> str:
    return f"{min(values):6.2f} {statistics.median(values):6.2f} {max(values):7.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=128, help="size of each fresh mapping")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=None, help="folder for fault_cost.json and fault_cost.txt")
    parser.add_argument("--smoke", action="store_true", help="8 MiB, one repetition")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        raise SystemExit("fault_cost.py measures Linux's page faults")
    mib, reps = (8, 1) if args.smoke else (args.mib, args.reps)
    runs = [one_mapping(mib << 20, huge) for _ in range(reps) for huge in (False, True)]
    thp = {}
    for name in ("enabled", "defrag"):
        with open(f"/sys/kernel/mm/transparent_hugepage/{name}", encoding="ascii") as f:
            thp[name] = f.read().strip()
    lines = [
        f"fresh anonymous memory populated 2 MiB at a time, {mib} MiB per mapping, {reps} repetitions",
        f"THP enabled: {thp['enabled']}; defrag: {thp['defrag']}; free page reporting: {free_page_reporting()}; "
        f"load average {os.getloadavg()[0]:.1f}",
        "",
        "pages  rep  whole s   wall ms per 2 MiB (min med max)   cpu ms per 2 MiB (min med max)   vmstat deltas",
    ]
    for index, run in enumerate(runs):
        counters = " ".join(f"{k}={v}" for k, v in run["vmstat"].items() if v)
        lines.append(
            f"{run['pages']:5}  {index // 2 + 1:3}  {run['total_s']:7.3f}   {_spread(run['wall_ms'])}"
            f"             {_spread(run['cpu_ms'])}            {counters}"
        )
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "fault_cost.txt"), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        with open(os.path.join(args.out, "fault_cost.json"), "w", encoding="utf-8") as f:
            json.dump({"mib": mib, "reps": reps, "thp": thp, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
