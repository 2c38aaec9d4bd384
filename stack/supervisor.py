"""Start the local stack's processes, relaunch the ones that die, stop them all cleanly.

Relaunch policy (every long-running child; a one-shot step such as `svc schema apply` must
exit 0 during start-up instead):

- Every exit the supervisor did not ask for is relaunched, whatever its cause: a signal
  (`kill -9`, the OOM killer), a non-zero code, or 0 (a service that stops by itself is not
  serving).
- Requested relaunch: a child that had answered healthy since its last start and exits with
  one of its `relaunch_codes` asked for a relaunch (the spec's SSP codes 2-6: integrity check
  failed, unknown to the scheduler, resync directive, scheduler unreachable, registration
  refused). It is relaunched at once and is not a crash.
- Anything else is a crash. Backoff: the k-th crash of a child within the window waits
  `0.5 s * 2**(k-1)` (0.5, 1, 2, 4, 8 s; at most 30 s) before the relaunch; other children are
  watched meanwhile.
- Crash budget: a child that crashes more than 5 times within 120 s is not relaunched again:
  the stack stops with a message naming the child and exits 1 (`RestartPolicy`).
- A child whose loss a relaunch cannot repair (`relaunch=False`: the in-memory database host,
  whose data dies with it) stops the stack at once with its `fatal_note`.
- Start-up: children start in list order, each once the previous one answered healthy (a
  one-shot step: exited 0). A child that exits before it ever answered healthy stops the stack
  (a bad configuration, a port in use), unless it asked for a relaunch.

Nothing a child started outlives it: each child runs in its own session, and when one exits
the rest of its process group is SIGKILLed before it is reaped (the group id cannot be reused
meanwhile). Each child is started through `ipc.lifeline` with SIGTERM, so if ops/run itself
dies (even by SIGKILL) every child gets SIGTERM and stops gracefully. Children get
`SVC_SUPERVISED=1`: a process that exits with one of its relaunch codes is started again.

`Supervisor.restart(name)` (any thread, or a signal handler) restarts a named child on request:
SIGTERM, SIGKILL after the stop timeout, started again at once, not counted as a crash.
"""

from __future__ import annotations

import http.client
import logging
import os
import queue
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ipc.backoff import delay
from ipc.lifeline import lifeline_argv

log = logging.getLogger("stack")

#: The spec's SSP exit codes that ask the supervisor for a relaunch (ssp/__main__.py).
RELAUNCH_CODES = frozenset({2, 3, 4, 5, 6})
#: In every child's environment: the process is relaunched when it exits.
SUPERVISED_ENV = "SVC_SUPERVISED"


@dataclass(frozen=True)
class RestartPolicy:
    """Backoff and crash budget of one child (see the module docstring)."""

    backoff_base_secs: float = 0.5
    backoff_cap_secs: float = 30.0
    max_crashes: int = 5  # relaunches after crashes allowed within window_secs
    window_secs: float = 120.0
    startup_timeout_secs: float = 180.0  # from a start until the child answers healthy
    stop_timeout_secs: float = 20.0  # SIGTERM, then SIGKILL

    def delay(self, crashes: int) -> float:
        """Seconds to wait before relaunching after the `crashes`-th crash in the window."""
        if crashes <= 0:
            return 0.0
        return delay(crashes, self.backoff_base_secs, cap=self.backoff_cap_secs)


class CrashLog:
    """The crash times of one child within the policy's window."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._times: deque[float] = deque()

    def record(self, now: float) -> int:
        """Count a crash at `now`; the number of crashes within the window, this one included."""
        self._times.append(now)
        return self.count(now)

    def count(self, now: float) -> int:
        """Crashes within the window that ends at `now`."""
        while self._times and now - self._times[0] > self.policy.window_secs:
            self._times.popleft()
        return len(self._times)

    def exhausted(self, crashes: int) -> bool:
        """True when `crashes` within the window is more than the budget allows."""
        return crashes > self.policy.max_crashes


def describe_exit(rc: int) -> str:
    """`exited with 4` or `was killed by SIGKILL`."""
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with {rc}"


@dataclass
class Child:
    """One supervised process."""

    name: str
    argv: list[str]
    env: dict[str, str]
    health_url: str | None = None
    relaunch_codes: frozenset[int] = frozenset()
    oneshot: bool = False  # a set-up step: must exit 0 before the next child starts
    #: False: its exit cannot be repaired by a relaunch; the stack stops with `fatal_note`.
    relaunch: bool = True
    fatal_note: str = ""
    #: healthy when this returns True for (status, body) of health_url; default: status 200
    ready: Callable[[int, bytes], bool] | None = None
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0  # relaunches so far, requested or after crashes
    started_at: float = field(default=0.0)
    healthy: bool = False  # answered healthy since its latest start
    ever_healthy: bool = False
    relaunch_at: float | None = None  # waiting (backoff) to be started again
    stop_deadline: float | None = None  # a requested restart: SIGTERM sent, waiting for exit
    crashes: CrashLog | None = None
    _next_probe: float = 0.0

    def start(self) -> None:
        env = dict(self.env)
        env[SUPERVISED_ENV] = "1"
        # Its own session (a Ctrl-C in the terminal reaches ops/run only, which stops the
        # children in order), and SIGTERM when ops/run dies however it dies.
        self.proc = subprocess.Popen(lifeline_argv(self.argv, sig=signal.SIGTERM), env=env,
                                     start_new_session=True)
        self.started_at = time.monotonic()
        # Without a health URL, running is all that can be known.
        self.healthy = self.health_url is None
        self.ever_healthy = self.ever_healthy or self.healthy
        self.relaunch_at = None
        self.stop_deadline = None
        self._next_probe = 0.0
        log.info("started %s (pid %d)", self.name, self.proc.pid)

    def exited(self) -> bool:
        """True once the process has exited; it is not reaped yet (see `reap`)."""
        if self.proc is None or self.proc.returncode is not None:
            return self.proc is not None
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.proc.poll() is not None
        return info is not None

    def wait_exit(self, timeout: float) -> bool:
        """Wait until the process exits (not reaping it); False on timeout."""
        deadline = time.monotonic() + timeout
        while not self.exited():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def reap(self) -> int:
        """Kill what is left of its process group, then collect the exit status. The exited
        (unreaped) leader keeps the group id reserved, so the kill cannot hit a stranger."""
        assert self.proc is not None
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        rc = self.proc.wait()
        self.proc = None
        return rc

    def probe(self, now: float) -> bool:
        """Poll health_url (at most every 0.1 s); sets `healthy` when it answers ready."""
        if self.healthy or self.proc is None:
            return self.healthy
        assert self.health_url is not None  # healthy from the start otherwise
        if now < self._next_probe:
            return False
        self._next_probe = now + 0.1
        try:
            with urllib.request.urlopen(self.health_url, timeout=1.0) as r:
                status, body = int(r.status), r.read()
        except urllib.error.HTTPError as e:
            status, body = int(e.code), e.read()
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            # nothing listening yet, or something that does not speak HTTP (a port another
            # process still holds, a server half up): not healthy, asked again later
            return False
        ok = status == 200 if self.ready is None else self.ready(status, body)
        if ok:
            self.healthy = self.ever_healthy = True
            if self.restarts:
                log.info("%s is healthy again (pid %d)", self.name, self.proc.pid)
        return ok

    def signal(self, sig: int) -> None:
        """Signal its process group. Never reaps (unlike Popen.poll): an exited leader not
        reaped yet keeps the group id reserved, so what is left of the group is reached."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


class StackFailed(Exception):
    """The stack must stop: `code` is ops/run's exit code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Supervisor:
    """Runs children in start order, relaunches them, stops them in reverse order."""

    def __init__(self, children: list[Child], *, poll: float = 0.2,
                 policy: RestartPolicy | None = None) -> None:
        self.children = children
        self.poll = poll
        self.policy = policy or RestartPolicy()
        for c in children:
            c.crashes = CrashLog(self.policy)
        self._stopping = False
        self._restarts: queue.SimpleQueue[str] = queue.SimpleQueue()

    def request_stop(self, *_: object) -> None:
        self._stopping = True

    def restart(self, name: str) -> None:
        """Restart the child called `name` (thread- and signal-safe; done by `run`'s loop):
        stopped gracefully, started again at once, not counted as a crash. KeyError when no
        long-running child has that name."""
        if not any(c.name == name and not c.oneshot for c in self.children):
            raise KeyError(name)
        self._restarts.put(name)

    def run(self, on_ready: Callable[[], None] | None = None) -> int:
        """Start everything, supervise until a stop is requested or the stack fails; every
        child is stopped before this returns. 0 after a requested stop."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        try:
            return self._loop(on_ready)
        except StackFailed as e:
            return e.code
        finally:
            self.stop_all()

    def _loop(self, on_ready: Callable[[], None] | None) -> int:
        started = 0  # children [0, started) have been started
        up = False
        while not self._stopping:
            now = time.monotonic()
            self._take_restart_requests(now)
            while not up and started < len(self.children):
                c = self.children[started]
                if c.proc is None and c.relaunch_at is None and not c.ever_healthy:
                    c.start()
                if not self._started_up(c, now):
                    break
                started += 1
            if not up and started == len(self.children):
                up = True
                if on_ready:
                    on_ready()
            for c in self.children[:started + 1]:
                if not c.oneshot:
                    self._watch(c, now)
            # Start-up waits on health probes: poll faster until everything is up.
            time.sleep(self.poll if up else min(self.poll, 0.05))
        return 0

    def _started_up(self, c: Child, now: float) -> bool:
        """True once `c` is up (healthy, or a one-shot that exited 0); StackFailed when it
        cannot be."""
        if c.oneshot:
            assert c.proc is not None
            if not c.exited():
                return False
            rc = c.reap()
            if rc != 0:
                log.error("%s failed (%s); stopping", c.name, describe_exit(rc))
                raise StackFailed(rc if rc > 0 else 1)
            c.ever_healthy = True  # done: never started again
            return True
        if c.ever_healthy:
            return True
        if c.proc is not None and not c.exited() and not c.probe(now) and \
                now - c.started_at > self.policy.startup_timeout_secs:
            log.error("%s did not become healthy within %.0fs; stopping", c.name,
                      self.policy.startup_timeout_secs)
            raise StackFailed(1)
        return c.ever_healthy

    def _take_restart_requests(self, now: float) -> None:
        while True:
            try:
                name = self._restarts.get_nowait()
            except queue.Empty:
                return
            for c in self.children:
                if c.name == name and c.proc is not None and c.stop_deadline is None:
                    log.info("restarting %s on request", c.name)
                    c.stop_deadline = now + self.policy.stop_timeout_secs
                    c.signal(signal.SIGTERM)

    def _watch(self, c: Child, now: float) -> None:
        if c.proc is None:
            if c.relaunch_at is not None and now >= c.relaunch_at:
                c.restarts += 1
                c.start()
            return
        if not c.exited():
            if c.stop_deadline is not None and now > c.stop_deadline:
                log.warning("%s ignored SIGTERM for %.0fs; killing it", c.name,
                            self.policy.stop_timeout_secs)
                c.signal(signal.SIGKILL)
                c.stop_deadline = now + self.policy.stop_timeout_secs
            elif c.ever_healthy:
                c.probe(now)
            return
        was_healthy, requested_stop = c.healthy, c.stop_deadline is not None
        rc = c.reap()
        if self._stopping:
            return
        if requested_stop:
            log.info("%s stopped (%s); starting it again", c.name, describe_exit(rc))
            c.restarts += 1
            c.start()
            return
        if not c.relaunch:
            log.error("%s %s. %s Stopping the stack.", c.name, describe_exit(rc), c.fatal_note)
            raise StackFailed(1)
        if rc in c.relaunch_codes and was_healthy:
            log.warning("%s %s; relaunching now (a requested relaunch, not a crash)", c.name,
                        describe_exit(rc))
            c.relaunch_at = now
            self._watch(c, now)
            return
        if not c.ever_healthy and rc not in c.relaunch_codes:
            log.error("%s %s before it was ever healthy; stopping", c.name, describe_exit(rc))
            raise StackFailed(rc if rc > 0 else 1)
        assert c.crashes is not None
        n = c.crashes.record(now)
        if c.crashes.exhausted(n):
            log.error("%s %s: %d crashes within %.0fs, more than the budget of %d; giving up "
                      "and stopping the stack", c.name, describe_exit(rc), n,
                      self.policy.window_secs, self.policy.max_crashes)
            raise StackFailed(1)
        delay = self.policy.delay(n)
        log.warning("%s %s; relaunching in %.1fs (crash %d of at most %d within %.0fs)",
                    c.name, describe_exit(rc), delay, n, self.policy.max_crashes,
                    self.policy.window_secs)
        c.relaunch_at = now + delay

    def stop_all(self) -> None:
        """SIGTERM each running child, last started first, and wait for it (SIGKILL after
        the stop timeout); the rest of its process group is killed too."""
        timeout = self.policy.stop_timeout_secs
        for c in reversed(self.children):
            c.relaunch_at = None
            if c.proc is None:
                continue
            c.signal(signal.SIGTERM)
            if not c.wait_exit(timeout):
                log.warning("%s ignored SIGTERM for %.0fs; killing it", c.name, timeout)
                c.signal(signal.SIGKILL)
                c.wait_exit(10)
            name = c.name
            rc = c.reap()
            log.info("stopped %s (%s)", name, describe_exit(rc))
