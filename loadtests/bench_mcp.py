"""Admin MCP endpoint latency: `tools/list` and the `overview` tool over HTTP with the SDK's own
client, in both protocol modes, against the REST route they run through.

    .venv/bin/python loadtests/bench_mcp.py [--calls 200]

What runs (all on loopback): a database host (`--memory`), `svc-scheduler` with its admin
listener and two SSPs in scheduler mode (tests/support/admin_cluster.py), one registered view.
Each row is `--calls` sequential calls on one client (keep-alive, bearer) after 10 warm-up
calls: p50, p99 and max in ms. Baseline: `GET /admin/api/overview` straight (the route the
`overview` tool calls in process), so the last column is what the MCP layer adds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.admin_cluster import admin_cluster
from tests.support.procs import start_db_host

WARMUP = 10


async def timed(n: int, fn: Callable[[], Awaitable[Any]]) -> list[float]:
    for _ in range(WARMUP):
        await fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def row(name: str, ms: list[float], base: float | None) -> str:
    s = sorted(ms)
    p50 = statistics.median(s)
    p99 = s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]
    vs = f"{p50 / base:.2f}x" if base else "1.00x"
    return f"| {name} | {p50:.1f} | {p99:.1f} | {s[-1]:.1f} | {vs} |"


async def run(admin: str, token: str, calls: int) -> list[str]:
    auth = {"Authorization": f"Bearer {token}"}
    lines = ["| request | p50 ms | p99 ms | max ms | p50 vs REST |", "|---|---|---|---|---|"]
    async with httpx2.AsyncClient(headers=auth, timeout=60) as http:
        async def rest() -> None:
            r = await http.get(admin + "/admin/api/overview")
            assert r.status_code == 200

        base_ms = await timed(calls, rest)
        base = statistics.median(base_ms)
        lines.append(row("`GET /admin/api/overview` (REST)", base_ms, None))
        for mode in ("legacy", "2026-07-28"):
            async with Client(streamable_http_client(admin + "/admin/api/mcp", http_client=http),
                              mode=mode, cache=None) as client:
                async def listing() -> None:
                    assert (await client.list_tools()).tools

                async def overview() -> None:
                    r = await client.call_tool("overview", {})
                    assert not r.is_error

                label = "handshake" if mode == "legacy" else "per-request"
                lines.append(row(f"MCP `tools/list` ({label})", await timed(calls, listing), base))
                lines.append(row(f"MCP `overview` ({label})", await timed(calls, overview), base))
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    host = start_db_host(tmp / "db", memory=True)
    try:
        with admin_cluster(host, tmp, "bmcp_") as c:
            c.register_view("b1", "SELECT * FROM post WHERE n >= 3", "bench")
            lines = asyncio.run(run(c.admin, c.mint("full", "bench"), args.calls))
    finally:
        host.process.stop()
    print(f"\n{args.calls} sequential calls each, after {WARMUP} warm-up calls:\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
