"""Round trips per second through the database host (SDK over ws) next to the same calls on
the embedded engine in-process, with the ratio, in one run.

    python loadtests/bench_dbhost.py [--seconds N]

Cases: (a) `RETURN 1`, (b) a select by id, (c) one transaction of 1,000 RELATE statements,
(d) a CREATE and its LIVE notification on another connection (host only).
Each case runs N seconds (default 4) sequentially on one connection; the in-process baseline
pays the same CBOR encode/decode the SDK does, so the ratio is the cost of the host itself
(WebSocket, framing, session routing) on top of the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surrealdb import AsyncSurreal
from surrealdb.data.cbor import decode, encode
from surrealdb_embedded import AsyncEmbeddedDB

from tests.support.procs import start_db_host

RELATES = 1000


def relate_txn() -> str:
    """One transaction of RELATE statements between fresh record ids."""
    tag = uuid.uuid4().hex[:8]
    body = "".join(f"RELATE person:p{tag}_{i}->likes->item:i{tag}_{i};\n" for i in range(RELATES))
    return f"BEGIN;\n{body}COMMIT;"


async def rate(fn: Callable[[], Awaitable[Any]], seconds: float) -> tuple[float, int]:
    """Calls per second of fn, run back to back for `seconds` (after a short warm-up)."""
    for _ in range(3):
        await fn()
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        await fn()
        n += 1
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start), n


class InProcess:
    """The embedded engine called directly, with the SDK's CBOR encode/decode."""

    def __init__(self) -> None:
        self.db = AsyncEmbeddedDB("mem://")
        self.n = 0

    async def start(self) -> None:
        await self.db.connect()
        await self.query("DEFINE NAMESPACE bench")
        await self.call("use", ["bench", "inproc"])

    async def call(self, method: str, params: list[Any]) -> Any:
        self.n += 1
        reply = decode(await self.db.execute(encode({"id": self.n, "method": method,
                                                       "params": params})))
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["result"]

    async def query(self, text: str, variables: dict[str, Any] | None = None) -> Any:
        results = await self.call("query", [text, variables or {}])
        for r in results:
            if r["status"] != "OK":
                raise RuntimeError(r["result"])
        return results


async def run(seconds: float) -> list[tuple[str, float, float]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-dbhost-"))
    host = start_db_host(tmp, memory=True)
    rows: list[tuple[str, float, float]] = []
    try:
        sdk = AsyncSurreal(host.ws_url)
        await sdk.signin({"username": host.user, "password": host.password})
        await sdk.use("bench", "host")
        local = InProcess()
        await local.start()
        for target in (sdk.query, local.query):
            await target("CREATE item:1 SET v = 1")

        async def via_host_txn() -> None:
            await sdk.query(relate_txn())

        async def local_txn() -> None:
            await local.query(relate_txn())

        cases: list[tuple[str, Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]] = [
            ("RETURN 1", lambda: sdk.query("RETURN 1"), lambda: local.query("RETURN 1")),
            ("SELECT * FROM item:1", lambda: sdk.query("SELECT * FROM item:1"),
             lambda: local.query("SELECT * FROM item:1")),
            (f"txn of {RELATES} RELATE", via_host_txn, local_txn),
        ]
        for name, through_host, in_process in cases:
            # Alternate halves (host, in-process, in-process, host) so that load from other
            # processes and table growth fall on both sides alike.
            h1, _ = await rate(through_host, seconds / 2)
            l1, _ = await rate(in_process, seconds / 2)
            l2, _ = await rate(in_process, seconds / 2)
            h2, _ = await rate(through_host, seconds / 2)
            rows.append((name, (h1 + h2) / 2, (l1 + l2) / 2))

        # LIVE exists only through the host: a write, then its notification on another
        # connection (the engine alone has no live queries, so no ratio).
        watcher = AsyncSurreal(host.ws_url)
        await watcher.signin({"username": host.user, "password": host.password})
        await watcher.use("bench", "host")
        notes: asyncio.Queue[Any] = asyncio.Queue()
        watcher.live_queues[str(await watcher.live("feed"))] = [notes]
        counter = iter(range(10**9))

        async def write_and_see() -> None:
            await sdk.query(f"CREATE feed:{next(counter)}")
            await notes.get()

        live_rate, _ = await rate(write_and_see, seconds)
        rows.append(("CREATE -> LIVE notification", live_rate, float("nan")))
        await watcher.close()
        await sdk.close()
        await local.db.close()
    finally:
        host.process.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement")
    args = p.parse_args(argv)
    rows = asyncio.run(run(args.seconds))
    print(f"{'case':<28} {'host (SDK ws) /s':>17} {'in-process /s':>14} {'host/in-proc':>13}")
    for name, h, loc in rows:
        if math.isnan(loc):  # no in-process equivalent
            print(f"{name:<28} {h:>17.1f} {'n/a':>14} {'n/a':>13}")
        else:
            print(f"{name:<28} {h:>17.1f} {loc:>14.1f} {h / loc:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
