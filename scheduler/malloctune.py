"""Pin glibc's mmap threshold in the scheduler, so large buffers go back to the system.

glibc serves an allocation of 128 KiB or more with its own `mmap` and unmaps it when it is
freed, but after the first such free it raises that threshold to the freed size (up to
32 MiB) and the trim threshold to twice that: from then on a fold's 1 MB WAL reads and its
joined buffers came from a malloc arena and stayed there. Setting the threshold turns the
adjustment off. `loadtests/probe_fold_threads.py` (4 folds of 60,000 events, the folds on
the replica's one thread): RSS 81.7 -> 96.5 MB with glibc's default, its thread arena at
6.4-8.5 MB; pinned 81.8 -> 92.8-92.9 MB, the arena at 2.2 MB (folds on the default pool:
-> 101.2-104.3 MB and still growing at the 4th fold).

Linux with glibc only; elsewhere (or when the call fails) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("scheduler")

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, now fixed


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix the mmap threshold at `threshold` bytes; True when glibc took it."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl, macOS): nothing to pin
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, threshold) == 1
    if not ok:
        log.warning("could not pin the malloc mmap threshold at %d bytes", threshold)
    return ok
