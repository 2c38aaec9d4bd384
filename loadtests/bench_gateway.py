"""Gateway throughput: the same Falcon app in-process and behind gunicorn -k asgi.

Every row sends valid `POST /ingest` bodies (so the full path runs: auth, body read, JSON
parse, shape check, forward, reply) and counts 200 answers for a fixed time:

1. in-process, hub stub: the ASGI app called directly with a hub call that answers at once
   (no sockets at all) -- the baseline, the most the gateway code can do on one core;
2. in-process, ZeroMQ hub: the same, with the real forward to a hub process over ipc://;
3. gunicorn -k asgi, 1 and 2 workers: HTTP over loopback from a small asyncio keep-alive
   client in this process, to the same hub process.

The hub is `gateway.testing`'s fake hub in its own process, answering at once. The client
shares the machine's cores with gunicorn, so HTTP figures include its cost (as they would
with any local load generator); run on an idle machine for stable numbers.

    .venv/bin/python loadtests/bench_gateway.py [--seconds 5] [--connections 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import uvloop

from gateway.serve import gunicorn_argv
from gateway.ssp_app import GatewaySettings, build_app
from ipc.messages import reply
from ssp.config import SspConfig
from tests.support import lifeline

SECRET = "bench-secret"
BODY = json.dumps(
    {"table": "post", "op": "CREATE", "id": "post:1",
     "record": {"id": "post:1", "author": "user:1", "title": "hello", "n": 42, "_00_rv": 1}}
).encode()


class Stats:
    def __init__(self) -> None:
        self.ok = 0
        self.other = 0
        self.latencies: list[float] = []

    def row(self, seconds: float) -> dict[str, float]:
        lat = sorted(self.latencies) or [0.0]
        return {
            "rps": self.ok / seconds,
            "errors": float(self.other),
            "p50_ms": statistics.median(lat) * 1000,
            "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
        }


# ---------------------------------------------------------------------------- in-process


def _scope() -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/ingest", "raw_path": b"/ingest", "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8667),
        "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                    (b"authorization", f"Bearer {SECRET}".encode()),
                    (b"content-length", str(len(BODY)).encode())],
    }


async def _asgi_once(app: Callable[..., Awaitable[None]]) -> int:
    status = 0
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": BODY, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(msg: dict[str, Any]) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]

    await app(_scope(), receive, send)
    return status


async def run_inprocess(endpoint: str, stub: bool, seconds: float, concurrency: int) -> dict[str, float]:
    app = build_app(GatewaySettings(auth_secret=SECRET, hub_endpoint=endpoint))
    if stub:
        async def answer(msg: dict[str, Any], timeout: float) -> dict[str, Any]:
            return reply(200, {"accepted": True})

        app.hub.call = answer  # type: ignore[method-assign]
    stats = Stats()
    for _ in range(200):  # warm-up (and the hub connection)
        await _asgi_once(app)
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            status = await _asgi_once(app)
            stats.latencies.append(time.perf_counter() - t0)
            if status == 200:
                stats.ok += 1
            else:
                stats.other += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    app.hub.close()
    return stats.row(seconds)


# ---------------------------------------------------------------------------- HTTP


def _http_request(port: int) -> bytes:
    head = (
        f"POST /ingest HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {SECRET}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    )
    return head.encode() + BODY


async def run_http(port: int, seconds: float, connections: int) -> dict[str, float]:
    req = _http_request(port)
    stats = Stats()
    stop_at = time.perf_counter() + seconds

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                writer.write(req)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                stats.latencies.append(time.perf_counter() - t0)
                if status == 200:
                    stats.ok += 1
                else:
                    stats.other += 1
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(connections)))
    return stats.row(seconds)


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("gunicorn exited early")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (TimeoutError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError("gunicorn did not come up")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def main() -> None:
    parser = argparse.ArgumentParser(description="gateway throughput, in-process vs gunicorn")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()

    run_dir = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    endpoint = f"ipc://{run_dir}/hub.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    env.update(SVC_AUTH_SECRET=SECRET, SVC_SSP_RUN_DIR=str(run_dir), SVC_DB_URL="ws://127.0.0.1:9")
    hub = subprocess.Popen([sys.executable, "-m", "gateway.testing", "--endpoint", endpoint,
                            "--ready-file", str(run_dir / "ready")], cwd=ROOT, env=env)
    lifeline.adopt(hub.pid)  # dies with this run, killed or not
    rows: list[tuple[str, dict[str, float]]] = []
    try:
        while not (run_dir / "ready").exists():
            time.sleep(0.05)
        rows.append(("in-process, hub stub (no sockets)",
                     uvloop.run(run_inprocess(endpoint, True, args.seconds, args.connections))))
        rows.append(("in-process, ZeroMQ hub",
                     uvloop.run(run_inprocess(endpoint, False, args.seconds, args.connections))))
        for workers in (1, 2):
            port = _free_port()
            cfg = SspConfig.from_env({**env, "SVC_SSP_LISTEN_ADDR": f"127.0.0.1:{port}",
                                      "SVC_SSP_GATEWAY_WORKERS": str(workers)})
            gun = subprocess.Popen(gunicorn_argv(cfg), cwd=ROOT, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            lifeline.adopt(gun.pid)  # dies with this run, killed or not
            try:
                _wait_port(port, gun)
                uvloop.run(run_http(port, 1.0, args.connections))  # warm-up
                rows.append((f"gunicorn -k asgi, {workers} worker{'s' if workers > 1 else ''}",
                             uvloop.run(run_http(port, args.seconds, args.connections))))
            finally:
                _stop(gun)
    finally:
        _stop(hub)
        shutil.rmtree(run_dir, ignore_errors=True)

    base = rows[0][1]["rps"]
    print(f"\nPOST /ingest, {args.connections} concurrent, {args.seconds:g}s per row, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
    print("| path | req/s | ratio vs in-process stub | p50 ms | p99 ms | non-200 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['rps']:,.0f} | {r['rps'] / base:.3f} | {r['p50_ms']:.2f} | "
              f"{r['p99_ms']:.2f} | {r['errors']:.0f} |")


if __name__ == "__main__":
    main()
