"""Start and stop the service's real processes for integration tests.

Every process gets loopback ports chosen at random, writes its output to a log file under the
test's tmp dir (shown when it fails to start), and is always stopped: SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import lifeline

ROOT = Path(__file__).resolve().parents[2]


# Under pytest-xdist (`ops/test` runs the suite on workers gw0, gw1, ...) each worker takes its
# ports from a range of its own below the kernel's ephemeral range (32768-60999 here), so two
# workers never pick the same port between one's probe and its process's bind, and no outgoing
# connection's ephemeral port can take one either. A single process keeps the kernel's choice.
_WORKER_PORTS_BASE = 20_000
_WORKER_PORTS_SPAN = 3_000
_WORKER_RANGES = (32_768 - _WORKER_PORTS_BASE) // _WORKER_PORTS_SPAN  # 4; more: the kernel's
# Ports handed out are this far apart: a service given port p may take the next ones too
# (`ops/run --ssps 2 --ssp-bind p` serves the second SSP on p + 1).
_PORT_STRIDE = 10
# Each process starts at a random place in its range: the ranges are per worker index, so
# another run on the machine (gw1 of another checkout, a second `pytest -n 2`) or a process a
# test starts (loadtests/soak_stack.py under gw1) walks the same range, and starting from the
# same first port they offered each other the same ports, probed free by both and bound by
# one (test_soak_smoke: the scheduler's admin port "address already in use").
_next_port = itertools.count(random.SystemRandom().randrange(_WORKER_PORTS_SPAN // _PORT_STRIDE))


def _worker_index() -> int | None:
    w = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(w[2:]) if w.startswith("gw") and w[2:].isdigit() else None


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    w = _worker_index()
    if w is None or w >= _WORKER_RANGES:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    base = _WORKER_PORTS_BASE + w * _WORKER_PORTS_SPAN
    for _ in range(_WORKER_PORTS_SPAN // _PORT_STRIDE):
        port = base + (next(_next_port) * _PORT_STRIDE) % _WORKER_PORTS_SPAN
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                # no SO_REUSEADDR: a port with connections in TIME_WAIT is passed over
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port left in worker gw{w}'s range from {base}")


def free_ports(n: int) -> int:
    """A port p such that p .. p+n-1 were all free a moment ago (a service that takes the
    ports after the one it is given: `ops/run --ssps n --ssp-bind p`)."""
    for _ in range(200):
        start = free_port()
        socks = []
        try:
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", start + i))
            return start
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no run of free ports found")


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """GET url and return the status, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, OSError):
        return None


def statuses_on_one_connection(host: str, port: int, path: str, idle_secs: float) -> list[int]:
    """GET `path` twice on one kept-alive connection with `idle_secs` of silence between; the
    second raises (RemoteDisconnected) when the server dropped the idle connection."""
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        out = []
        for k in range(2):
            if k:
                time.sleep(idle_secs)
            conn.request("GET", path)
            r = conn.getresponse()
            r.read()
            assert not r.will_close, "the server asked to close the connection"
            out.append(r.status)
        return out
    finally:
        conn.close()


@dataclass
class ManagedProcess:
    """A child process started for a test, with its log file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    extra: dict[str, object] = field(default_factory=dict)
    cwd: Path | None = None  # another checkout to run from (a benchmark's "before")

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=str(self.cwd or ROOT),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() reaches grandchildren
        )
        log.close()
        # stopped with the runner when the runner dies without its teardown (SIGKILL)
        lifeline.adopt(self.proc.pid)
        return self

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_http(self, url: str, want: int = 200, timeout: float = 30.0) -> None:
        """Wait until GET url answers `want`; fail with the process log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before {url} answered:\n"
                    + self.log_text()[-4000:]
                )
            if http_status(url, timeout=1.0) == want:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: {url} did not answer {want} in {timeout}s:\n"
                           + self.log_text()[-4000:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the whole process group (a crash, not a shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self.proc is not None:
            lifeline.release(self.proc.pid)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, then SIGKILL the group; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Reap anything left in the group (a child that ignored the parent's shutdown).
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        lifeline.release(self.proc.pid)
        return self.proc.returncode


def base_env(**overrides: str) -> dict[str, str]:
    """The test runner's environment minus SVC_* leakage, plus overrides.

    `SVC_SSP_VIEW_PERMISSIONS=off` unless a test says otherwise: most tests (and benchmarks)
    register views over tables defined without permissions, which record users cannot read,
    so the default `enforce` refuses them (ssp/permissions.py). The tests of that rule set
    `enforce` themselves (tests/integration/test_view_permissions.py).

    `SVC_SSP_SHARDS=1` unless a test says otherwise: an SSP starts one shard process per CPU
    by default, each loading every table, and the stacks a test starts through `ops/run` or
    `python -m stack` pass this environment on. A test about several shards asks for them.

    `SVC_SSP_REGISTER_RETRY_MAX_MS=500`: an SSP in scheduler mode retries its registration
    at most 0.5 s apart, not 5 s (the default), so one started while its scheduler is starting
    or re-cloning (a restore) registers soon after the scheduler takes it.

    `SVC_SSP_GATEWAY_GRACEFUL_SECS=1`: an SSP's gateway waits on SIGTERM for every open
    connection, an idle keep-alive one (the scheduler's, a test's client) included, up to this
    long; the default 5 s made most SSP stops and relaunches of a run 5 s longer. A test of
    the gateway's graceful stop sets its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["SVC_SSP_VIEW_PERMISSIONS"] = "off"
    env["SVC_SSP_SHARDS"] = "1"
    env["SVC_SSP_REGISTER_RETRY_MAX_MS"] = "500"
    env["SVC_SSP_GATEWAY_GRACEFUL_SECS"] = "1"
    env.update(overrides)
    return env


@dataclass
class DbHost:
    """A running `svc-db` database host."""

    process: ManagedProcess
    port: int
    path: Path | None
    user: str
    password: str

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/rpc"


def start_db_host(
    tmp: Path,
    *,
    memory: bool = True,
    path: Path | None = None,
    port: int | None = None,
    user: str = "root",
    password: str = "root-test-pass",
    extra_env: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
    wait: bool = True,
    engine: str | None = None,
) -> DbHost:
    """Start `python -m dbhost` on a free loopback port and wait for GET /health.

    `engine`: the host's `--engine`; by default `TEST_DB_ENGINE` from the runner's
    environment, else the embedded build (so any module can be run on the Node build)."""
    port = port or free_port()
    argv = [sys.executable, "-m", "dbhost", "--bind", f"127.0.0.1:{port}"]
    argv += ["--engine", engine or os.environ.get("TEST_DB_ENGINE") or "embedded"]
    if memory and path is None:
        argv.append("--memory")
    else:
        path = path or (tmp / "dbdata")
        argv += ["--path", str(path)]
    argv += extra_args or []
    env = base_env(SVC_DB_USER=user, SVC_DB_PASS=password, **(extra_env or {}))
    mp = ManagedProcess("svc-db", argv, env, tmp / f"svc-db-{port}.log").start()
    host = DbHost(mp, port, path, user, password)
    if wait:
        mp.wait_http(f"{host.http_url}/health")
    return host


def start_http_events_host(tmp: Path) -> DbHost:
    """A host on SurrealDB's Node build whose events may `http::post` to loopback services:
    what transport http needs (the embedded build has no `http::*` functions)."""
    return start_db_host(tmp, engine="node", extra_args=["--allow-net", "127.0.0.1"])


@contextlib.contextmanager
def http_events_host(tmp: Path) -> Iterator[DbHost]:
    """:func:`start_http_events_host`, stopped on leaving."""
    host = start_http_events_host(tmp)
    try:
        yield host
    finally:
        host.process.stop()
