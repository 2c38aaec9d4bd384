"""Profile on demand, for the benchmarks (`bench_ssp.py --profile DIR`).

Put this directory on PYTHONPATH with `BENCH_PROFILE_DIR` set: each Python process then
starts and stops a profile of its main thread on SIGUSR1, so a benchmark profiles only its
measured window and not the start-up or the registrations before it. Two kinds
(`BENCH_PROFILE_KIND`):

- `sample` (default): a sampling profiler. Every 1 ms of the process's CPU time
  (`ITIMER_PROF`) the interrupted stack is counted; written as `DIR/<module>-<pid>.folded`
  (one line per distinct stack, `a;b;c count`, the format flame-graph tools read) and
  `DIR/<module>-<pid>.top` (the functions by share of samples: own, and with callees). Its
  shares are of CPU time as it was spent: cProfile's per-call cost inflates code that makes
  many small calls several-fold (a parameter check that took 3 ms per write showed as 70 ms).
- `cprofile`: cProfile with a thread-CPU timer, `DIR/<module>-<pid>.prof` (`python -m pstats`),
  for call counts.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from types import FrameType
from typing import Any

_DIR = os.environ.get("BENCH_PROFILE_DIR")
_KIND = os.environ.get("BENCH_PROFILE_KIND", "sample")
_INTERVAL = 0.001


def _name() -> str:
    # argv[0] is the module's file by now: ssp/__main__.py -> ssp.__main__
    parts = os.path.normpath(sys.argv[0] or "python").split(os.sep)[-2:]
    return ".".join(parts).removesuffix(".py")


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename.split(os.sep)
    return f"{'/'.join(path[-2:])}:{code.co_name}"


class _Sampler:
    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.stacks: Counter[tuple[str, ...]] = Counter()
        self.on = False

    def sample(self, signum: int, frame: FrameType | None) -> None:
        stack = []
        while frame is not None:
            stack.append(_where(frame))
            frame = frame.f_back
        self.stacks[tuple(reversed(stack))] += 1

    def toggle(self) -> None:
        if not self.on:
            self.stacks.clear()
            signal.signal(signal.SIGPROF, self.sample)
            signal.setitimer(signal.ITIMER_PROF, _INTERVAL, _INTERVAL)
            self.on = True
            return
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        self.on = False
        base = os.path.join(self.out_dir, f"{_name()}-{os.getpid()}")
        with open(base + ".folded", "w") as f:
            for stack, n in self.stacks.most_common():
                f.write(f"{';'.join(stack)} {n}\n")
        total = sum(self.stacks.values()) or 1
        own: Counter[str] = Counter()
        incl: Counter[str] = Counter()
        for stack, n in self.stacks.items():
            own[stack[-1]] += n
            for fn in set(stack):
                incl[fn] += n
        with open(base + ".top", "w") as f:
            f.write(f"{total} samples of {_INTERVAL * 1000:.0f} ms CPU (main thread)\n")
            f.write("own %  with callees %  function\n")
            for fn, n in incl.most_common(80):
                f.write(f"{own[fn] * 100 / total:6.1f} {n * 100 / total:8.1f}  {fn}\n")


def _install(out_dir: str) -> None:
    if _KIND == "cprofile":
        import cProfile

        state: dict[str, Any] = {"prof": None}

        def toggle(signum: int, frame: object) -> None:
            prof = state["prof"]
            if prof is None:
                prof = state["prof"] = cProfile.Profile(time.thread_time)
                prof.enable()
                return
            prof.disable()
            state["prof"] = None
            prof.dump_stats(os.path.join(out_dir, f"{_name()}-{os.getpid()}.prof"))

        signal.signal(signal.SIGUSR1, toggle)
        return
    sampler = _Sampler(out_dir)
    signal.signal(signal.SIGUSR1, lambda signum, frame: sampler.toggle())


if _DIR:
    _install(_DIR)
