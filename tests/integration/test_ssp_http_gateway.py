"""The real path: gunicorn -k asgi running the gateway, forwarding over ZeroMQ to a hub process.

The hub here is `gateway.testing`'s fake hub run as its own process (the contract of
`ipc.messages`); the gateway and gunicorn are exactly what `svc-ssp` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.serve import gunicorn_argv
from gateway.testing import FakeHub
from ipc.messages import reply
from ssp.config import SspConfig
from tests.support.procs import ManagedProcess, base_env, free_port, statuses_on_one_connection

SECRET = "it-s3cret"
AUTH = {"Authorization": f"Bearer {SECRET}"}
INGEST = {"table": "post", "op": "create", "id": "post:1", "record": {"id": "post:1", "n": 1}}


@dataclass
class Gateway:
    url: str
    gunicorn: ManagedProcess
    hub: ManagedProcess


def _wait_file(path: Path, proc: ManagedProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.log_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} not ready in {timeout}s:\n{proc.log_text()[-4000:]}")
        time.sleep(0.05)


@pytest.fixture(scope="module", params=[1, 2], ids=["1-worker", "2-workers"])
def gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    workers = request.param
    logs = tmp_path_factory.mktemp("gateway")
    run_dir = Path(tempfile.mkdtemp(prefix="gw-it-"))  # short: unix socket paths are limited
    endpoint = f"ipc://{run_dir}/hub.sock"
    hub = ManagedProcess(
        "fake-hub",
        [sys.executable, "-m", "gateway.testing", "--endpoint", endpoint, "--ready-file", str(run_dir / "ready")],
        base_env(),
        logs / "hub.log",
    ).start()
    port = free_port()
    env = base_env(
        SVC_AUTH_SECRET=SECRET,
        SVC_SSP_RUN_DIR=str(run_dir),
        SVC_DB_URL="ws://127.0.0.1:9",  # the gateway never talks to the database
    )
    cfg = SspConfig.from_env({**env, "SVC_SSP_LISTEN_ADDR": f"127.0.0.1:{port}",
                              "SVC_SSP_GATEWAY_WORKERS": str(workers)})
    gunicorn = ManagedProcess("gunicorn", gunicorn_argv(cfg), env, logs / "gunicorn.log")
    try:
        _wait_file(run_dir / "ready", hub)
        gunicorn.start()
        gunicorn.wait_http(f"http://127.0.0.1:{port}/health")
        yield Gateway(f"http://127.0.0.1:{port}", gunicorn, hub)
    finally:
        gunicorn.stop()
        hub.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def test_public_health_is_answered_by_the_hub(gateway: Gateway) -> None:
    r = httpx.get(f"{gateway.url}/health")
    assert (r.status_code, r.json()) == (200, {"status": "ready"})


def test_private_route_needs_the_bearer(gateway: Gateway) -> None:
    r = httpx.post(f"{gateway.url}/ingest", json=INGEST)
    assert r.status_code == 401
    assert r.json()["error"] == "unauthorized"
    r = httpx.post(f"{gateway.url}/ingest", json=INGEST, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401


def test_ingest_is_forwarded_and_answered(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.url, headers=AUTH) as client:
        # several requests so both workers (when there are two) take some
        for _ in range(20):
            r = client.post("/ingest", json=INGEST)
            assert (r.status_code, r.json()) == (200, {"accepted": True})


def test_malformed_body_is_400_through_gunicorn(gateway: Gateway) -> None:
    r = httpx.post(f"{gateway.url}/ingest", content=b'{"table": "post", "op": "MERGE"}',
                   headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"] == "invalid" and "op" in r.json()["message"]


def test_oversized_body_is_413_through_gunicorn(gateway: Gateway) -> None:
    big = {**INGEST, "record": {"x": "y" * (2 * 1024 * 1024)}}
    r = httpx.post(f"{gateway.url}/ingest", json=big, headers=AUTH)
    assert r.status_code == 413


def test_get_with_path_params_is_forwarded(gateway: Gateway) -> None:
    r = httpx.get(f"{gateway.url}/debug/view/query:abc", headers=AUTH)
    assert (r.status_code, r.json()) == (200, {"route": "GET /debug/view/{view_id}"})
    assert httpx.get(f"{gateway.url}/nope", headers=AUTH).status_code == 404


def test_logs_backfill_without_tail_closes(gateway: Gateway) -> None:
    httpx.post(f"{gateway.url}/log", json={"message": "backfilled line"}, headers=AUTH).raise_for_status()
    r = httpx.get(f"{gateway.url}/logs", params={"tail": "false", "backfill": "1000"}, headers=AUTH, timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert "data: info backfilled line\n" in r.text


def test_logs_tail_streams_a_line_logged_after_connecting(gateway: Gateway) -> None:
    marker = f"streamed-{time.monotonic_ns()}"
    with (
        httpx.Client(base_url=gateway.url, headers=AUTH, timeout=10) as client,
        client.stream("GET", "/logs", params={"backfill": "0"}) as stream,
    ):
        assert stream.status_code == 200
        # the headers arrived: the stream is open, now log through the gateway
        client.post("/log", json={"message": marker, "level": "warn"}).raise_for_status()
        seen = ""
        for chunk in stream.iter_text():
            seen += chunk
            if marker in seen:
                break
    assert f"data: warn {marker}\n" in seen


def test_gunicorn_without_a_hub_says_bootstrapping_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="gw-it-"))
    port = free_port()
    env = base_env(SVC_SSP_RUN_DIR=str(run_dir), SVC_DB_URL="ws://127.0.0.1:9")
    cfg = SspConfig.from_env({**env, "SVC_SSP_LISTEN_ADDR": f"127.0.0.1:{port}"})
    proc = ManagedProcess("gunicorn", gunicorn_argv(cfg), env, tmp_path / "gunicorn.log").start()
    try:
        proc.wait_http(f"http://127.0.0.1:{port}/no-such-route", want=404, timeout=60)
        # An idle keep-alive connection outlives gunicorn's 2 s default: clients pool theirs
        # for ipc.http.CLIENT_KEEPALIVE_SECS and must never pick one the server has closed.
        assert statuses_on_one_connection("127.0.0.1", port, "/no-such-route", 3.0) == [404, 404]
        # no hub: /health waits for its timeout and answers 503 bootstrapping
        r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=30)
        assert r.status_code == 503 and r.json()["status"] == "bootstrapping"
    finally:
        code = proc.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    assert code == 0, proc.log_text()[-3000:]
    assert "Traceback" not in proc.log_text()


def test_a_hub_crash_gives_503_and_the_gateway_recovers_when_it_is_back(tmp_path: Path) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="gw-it-"))
    endpoint = f"ipc://{run_dir}/hub.sock"
    port = free_port()
    env = base_env(SVC_AUTH_SECRET=SECRET, SVC_SSP_RUN_DIR=str(run_dir), SVC_DB_URL="ws://127.0.0.1:9")

    def start_hub(n: int) -> ManagedProcess:
        ready = run_dir / f"ready-{n}"
        hub = ManagedProcess("fake-hub", [sys.executable, "-m", "gateway.testing", "--endpoint", endpoint,
                                          "--ready-file", str(ready)], base_env(), tmp_path / f"hub{n}.log")
        hub.start()
        _wait_file(ready, hub)
        return hub

    cfg = SspConfig.from_env({**env, "SVC_SSP_LISTEN_ADDR": f"127.0.0.1:{port}"})
    gunicorn = ManagedProcess("gunicorn", gunicorn_argv(cfg), env, tmp_path / "gunicorn.log")
    hub = start_hub(1)
    try:
        gunicorn.start()
        gunicorn.wait_http(f"http://127.0.0.1:{port}/health")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=30) as client:
            assert client.post("/ingest", json=INGEST).status_code == 200
            hub.kill9()
            r = client.get("/health")
            assert r.status_code == 503 and r.json()["error"] == "SSP_NOT_READY"
            hub = start_hub(2)
            # ZeroMQ reconnects the gateway's socket to the new hub by itself
            gunicorn.wait_http(f"http://127.0.0.1:{port}/health", timeout=30)
            r = client.post("/ingest", json=INGEST)
            assert (r.status_code, r.json()) == (200, {"accepted": True})
    finally:
        gunicorn.stop()
        hub.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def test_sigterm_with_an_open_log_stream_still_stops_gunicorn(tmp_path: Path) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="gw-it-"))
    endpoint = f"ipc://{run_dir}/hub.sock"
    hub = ManagedProcess("fake-hub", [sys.executable, "-m", "gateway.testing", "--endpoint", endpoint,
                                      "--ready-file", str(run_dir / "ready")], base_env(), tmp_path / "hub.log")
    port = free_port()
    env = base_env(SVC_AUTH_SECRET=SECRET, SVC_SSP_RUN_DIR=str(run_dir), SVC_DB_URL="ws://127.0.0.1:9")
    cfg = SspConfig.from_env({**env, "SVC_SSP_LISTEN_ADDR": f"127.0.0.1:{port}"})
    gunicorn = ManagedProcess("gunicorn", gunicorn_argv(cfg), env, tmp_path / "gunicorn.log")
    try:
        hub.start()
        _wait_file(run_dir / "ready", hub)
        gunicorn.start()
        gunicorn.wait_http(f"http://127.0.0.1:{port}/health")
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=30) as client,
            client.stream("GET", "/logs") as stream,
        ):
            assert stream.status_code == 200
            # graceful timeout (1 s in the tests): the worker stops though the stream never ends
            code = gunicorn.stop(timeout=30)
            # the stream is over (cut or closed): reading it returns instead of blocking
            with contextlib.suppress(httpx.HTTPError):
                for _ in stream.iter_bytes():
                    pass
        assert code == 0, gunicorn.log_text()[-3000:]
    finally:
        gunicorn.stop()
        hub.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@dataclass
class _Held:
    """A gunicorn gateway whose hub holds `POST /ingest` until `release` is set."""

    gunicorn: ManagedProcess
    port: int
    entered: asyncio.Event
    release: asyncio.Event

    def post_ingest(self) -> asyncio.Task[Any]:
        """Send an ingest request from a thread; the task ends with its response."""
        return asyncio.create_task(asyncio.to_thread(
            httpx.post, f"http://127.0.0.1:{self.port}/ingest", json=INGEST, headers=AUTH,
            timeout=30))

    async def stopped_cleanly(self) -> str:
        """Wait for the master to exit 0; its log."""
        code = await asyncio.to_thread(self.gunicorn.stop, 30)
        log = self.gunicorn.log_text()
        assert code == 0, log[-3000:]
        return log


@contextlib.asynccontextmanager
async def _held_gateway(tmp_path: Path, graceful_secs: str) -> Any:
    run_dir = Path(tempfile.mkdtemp(prefix="gw-it-"))
    hub = FakeHub(f"ipc://{run_dir}/hub.sock")
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(msg: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return reply(200, {"accepted": True})

    hub.replies["POST /ingest"] = held
    hub.start()
    port = free_port()
    env = base_env(SVC_AUTH_SECRET=SECRET, SVC_SSP_RUN_DIR=str(run_dir),
                   SVC_DB_URL="ws://127.0.0.1:9", SVC_SSP_GATEWAY_GRACEFUL_SECS=graceful_secs)
    cfg = SspConfig.from_env({**env, "SVC_SSP_LISTEN_ADDR": f"127.0.0.1:{port}"})
    gunicorn = ManagedProcess("gunicorn", gunicorn_argv(cfg), env, tmp_path / "gunicorn.log")
    try:
        gunicorn.start()
        await asyncio.to_thread(gunicorn.wait_http, f"http://127.0.0.1:{port}/health")
        yield _Held(gunicorn, port, entered, release)
    finally:
        release.set()
        gunicorn.stop()
        await hub.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


async def test_sigterm_wakes_the_worker_at_once_and_a_request_in_flight_is_still_answered(
        tmp_path: Path) -> None:
    # gateway.gunicorn_hooks.stop_without_delay cancels the worker's heartbeat sleep on
    # SIGTERM: its graceful stop must still let a request that is already in flight finish.
    # The default graceful timeout (5 s), not the tests' 1 s: the request must be answered
    # however long this busy machine takes to release it after the stop began.
    async with _held_gateway(tmp_path, "5") as g:
        pending = g.post_ingest()
        await asyncio.wait_for(g.entered.wait(), 30)  # the request is inside the gateway
        assert g.gunicorn.proc is not None
        g.gunicorn.proc.terminate()
        # the worker begins its graceful stop at once (it used to notice a second later) ...
        await _wait_log(g.gunicorn, "Worker shutting down")
        assert not pending.done()
        # ... and still answers what it had accepted before it exits
        g.release.set()
        r = await asyncio.wait_for(pending, 30)
        assert (r.status_code, r.json()) == (200, {"accepted": True})
        assert "Traceback" not in await g.stopped_cleanly()


async def _wait_log(proc: ManagedProcess, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in proc.log_text():
        assert proc.alive(), proc.log_text()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in:\n" + proc.log_text()[-3000:]
        await asyncio.sleep(0.05)


async def test_sigterm_closes_idle_keep_alive_connections_and_answers_the_busy_one(
        tmp_path: Path) -> None:
    # gunicorn's graceful stop waits for every open connection: a client's pooled idle one
    # held each SSP stop for the whole graceful timeout. The hooks close idle connections at
    # SIGTERM; one whose request is in flight still gets its answer.
    async with _held_gateway(tmp_path, "30") as g:
        idle = http.client.HTTPConnection("127.0.0.1", g.port, timeout=30)
        try:
            idle.request("GET", "/no-such-route")  # answered, then kept open, idle
            r0 = idle.getresponse()
            r0.read()
            assert r0.status == 404 and not r0.will_close
            pending = g.post_ingest()
            await asyncio.wait_for(g.entered.wait(), 30)
            assert g.gunicorn.proc is not None
            g.gunicorn.proc.terminate()
            await _wait_log(g.gunicorn, "Waiting for 1 connections to finish")  # the busy one
            assert idle.sock is not None
            assert await asyncio.to_thread(idle.sock.recv, 1) == b""  # the server closed it
            g.release.set()
            r = await asyncio.wait_for(pending, 30)
            assert (r.status_code, r.json()) == (200, {"accepted": True})
            assert "Forcing close" not in await g.stopped_cleanly()
        finally:
            idle.close()
