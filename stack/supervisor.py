"""Start child processes, relaunch the ones that ask for it, stop them all cleanly.

The spec's exit-code contract: an SSP that exits with 2-6 wants to be relaunched (integrity
failure, unknown to the scheduler, resync directive, registration timeout). Any other exit of a
child is final for the stack: everything is stopped and ops/run exits non-zero.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("stack")

RELAUNCH_CODES = frozenset({2, 3, 4, 5, 6})


@dataclass
class Child:
    """One supervised process."""

    name: str
    argv: list[str]
    env: dict[str, str]
    health_url: str | None = None
    relaunch_on: frozenset[int] = frozenset()
    oneshot: bool = False  # a set-up step: must exit 0 before the next child starts
    #: healthy when this returns True for (status, body) of health_url; default: status 200
    ready: Callable[[int, bytes], bool] | None = None
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = field(default=0.0)

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True)
        self.started_at = time.monotonic()
        log.info("started %s (pid %d)", self.name, self.proc.pid)

    def wait_healthy(self, timeout: float = 180.0) -> bool:
        """Poll health_url until 200; False when the child died or time ran out."""
        if not self.health_url:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            if self._probe():
                return True
            time.sleep(0.1)
        return False

    def _probe(self) -> bool:
        assert self.health_url is not None
        try:
            with urllib.request.urlopen(self.health_url, timeout=1.0) as r:
                status, body = int(r.status), r.read()
        except urllib.error.HTTPError as e:
            status, body = int(e.code), e.read()
        except (urllib.error.URLError, OSError):
            return False
        if self.ready is None:
            return status == 200
        return self.ready(status, body)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


class Supervisor:
    """Runs children in start order; stops them in reverse order."""

    def __init__(self, children: list[Child], *, poll: float = 0.2) -> None:
        self.children = children
        self.poll = poll
        self._stopping = False

    def request_stop(self, *_: object) -> None:
        self._stopping = True

    def run(self, on_ready: Callable[[], None] | None = None) -> int:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        try:
            for c in self.children:
                if self._stopping:
                    return 0
                c.start()
                if c.oneshot:
                    assert c.proc is not None
                    rc = c.proc.wait()
                    if rc != 0:
                        log.error("%s failed with exit code %d; stopping", c.name, rc)
                        return rc
                    continue
                while not c.wait_healthy():
                    # An SSP told to resync (or not registered in time) before it ever
                    # answered healthy asks for a relaunch like any later exit does.
                    rc = c.proc.poll() if c.proc is not None else None
                    if self._stopping:
                        return 0
                    if rc is None or rc not in c.relaunch_on:
                        log.error("%s did not become healthy; stopping", c.name)
                        return 1
                    self._relaunch(c, rc)
            if on_ready:
                on_ready()
            return self._watch()
        finally:
            self.stop_all()

    def _watch(self) -> int:
        while not self._stopping:
            for c in self.children:
                if c.oneshot:
                    continue
                assert c.proc is not None
                rc = c.proc.poll()
                if rc is None:
                    continue
                if rc in c.relaunch_on:
                    self._relaunch(c, rc)
                    continue
                log.error("%s exited with %d; stopping the stack", c.name, rc)
                return rc or 1
            time.sleep(self.poll)
        return 0

    def _relaunch(self, c: Child, rc: int) -> None:
        c.restarts += 1
        # Back off a little when a child keeps dying right after start.
        if time.monotonic() - c.started_at < 5:
            time.sleep(min(5.0, 0.5 * c.restarts))
        log.warning("%s exited with %d; relaunching (restart %d)", c.name, rc, c.restarts)
        c.start()

    def stop_all(self, timeout: float = 20.0) -> None:
        for c in reversed(self.children):
            c.signal(signal.SIGTERM)
            if c.proc is None:
                continue
            try:
                c.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM for %.0fs; killing it", c.name, timeout)
                c.signal(signal.SIGKILL)
                c.proc.wait(timeout=10)
            log.info("stopped %s (exit %s)", c.name, c.proc.returncode)
