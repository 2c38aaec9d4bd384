"""Profile on demand, for the benchmarks (`bench_ssp.py --profile DIR`).

Put this directory on PYTHONPATH with `BENCH_PROFILE_DIR` set: each Python process then
toggles cProfile (main thread, thread-CPU timer) on SIGUSR1 and writes its stats to
`DIR/<module>-<pid>.prof` when it stops, so a benchmark profiles only its measured window and
not the start-up or the registrations before it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

_DIR = os.environ.get("BENCH_PROFILE_DIR")


def _install(out_dir: str) -> None:
    import cProfile

    state: dict[str, cProfile.Profile | None] = {"prof": None}

    def toggle(signum: int, frame: object) -> None:
        prof = state["prof"]
        if prof is None:
            prof = state["prof"] = cProfile.Profile(time.thread_time)
            prof.enable()
            return
        prof.disable()
        state["prof"] = None
        # argv[0] is the module's file by now: ssp/__main__.py -> ssp.__main__
        parts = os.path.normpath(sys.argv[0] or "python").split(os.sep)[-2:]
        name = ".".join(parts).removesuffix(".py")
        prof.dump_stats(os.path.join(out_dir, f"{name}-{os.getpid()}.prof"))

    signal.signal(signal.SIGUSR1, toggle)


if _DIR:
    _install(_DIR)
