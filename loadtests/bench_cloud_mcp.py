"""The hosted platform's MCP endpoint against its REST routes: ``tools/list`` and a typical
tool call (``env_list`` of a project with 20 variables) over HTTP with the SDK's own client,
in both protocol modes, next to the REST route the tool shares its runner with; and the size
of ``tools/list`` for an ``mcp:full`` token.

    .venv/bin/python loadtests/bench_cloud_mcp.py [--calls 200]

What runs (all on loopback): a database host (``--memory``) and ``svc-cloud`` (one gunicorn
worker). Each row is ``--calls`` sequential calls on one client (keep-alive, bearer) after 10
warm-up calls: p50, p99 and max in ms. Baseline: ``GET /v1/projects/{p}/env`` with the same
MCP token (the route ``env_list`` is; the same checks and queries), measured in the same run.
Target: MCP within 2x REST.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx2
import mcp_types as types
from bench_mcp import WARMUP, row, timed  # the admin endpoint's benchmark: same method
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from cloud.mcp import INSTRUCTIONS, tool_of
from cloud.ops import OPS
from cloud.scopes import expand
from tests.support.cloud_stack import running_cloud
from tests.support.procs import start_db_host


async def run(url: str, token: str, calls: int) -> list[str]:
    lines = ["| request | p50 ms | p99 ms | max ms | p50 vs REST |", "|---|---|---|---|---|"]
    args = {"project": "bench", "limit": 20}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=60) as http:
        async def rest() -> None:
            r = await http.get(url + "/v1/projects/bench/env", params={"limit": 20})
            assert r.status_code == 200 and len(r.json()["items"]) == 20

        base_ms = await timed(calls, rest)
        base = statistics.median(base_ms)
        lines.append(row("`GET /v1/projects/{p}/env` (REST)", base_ms, None))
        for mode in ("legacy", "2026-07-28"):
            async with Client(streamable_http_client(url + "/v1/mcp", http_client=http),
                              mode=mode, cache=None) as client:
                async def listing() -> None:
                    assert (await client.list_tools()).tools

                async def call() -> None:
                    r = await client.call_tool("env_list", args)
                    assert not r.is_error and len(r.structured_content["items"]) == 20

                label = "handshake" if mode == "legacy" else "per-request"
                lines.append(row(f"MCP `tools/list` ({label})", await timed(calls, listing),
                                 base))
                lines.append(row(f"MCP `env_list` ({label})", await timed(calls, call), base))
    return lines


def tools_list_size() -> tuple[int, int]:
    granted = expand(["mcp:full"])
    doc = types.ListToolsResult(tools=[tool_of(o) for o in OPS if o.scope in granted]
                                ).model_dump(mode="json", by_alias=True, exclude_none=True)
    text = json.dumps(doc, separators=(",", ":")) + INSTRUCTIONS
    return len(doc["tools"]), len(text.encode())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cloud-"))
    host = start_db_host(tmp / "db", memory=True)
    try:
        with running_cloud(host, tmp) as c:
            _, session, _ = c.user("bench")
            c.ok("POST", "/v1/projects", session, {"slug": "bench"})
            c.ok("PATCH", "/v1/projects/bench/env", session,
                 {"vars": {f"VAR_{i:02d}": f"value-{i}" for i in range(20)}})
            token = c.mint(session, ["mcp:full"])
            lines = asyncio.run(run(c.url, token, a.calls))
    finally:
        host.process.stop()
    n, size = tools_list_size()
    print(f"\n{a.calls} sequential calls each, after {WARMUP} warm-up calls; load average "
          f"{os.getloadavg()[0]:.1f}:\n")
    print("\n".join(lines))
    print(f"\n`tools/list` for an `mcp:full` token: {n} tools, {size} bytes with the "
          f"instructions, ~{-(-size // 3)} tokens (bytes/3, conservative) or "
          f"~{-(-size // 4)} (bytes/4)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
