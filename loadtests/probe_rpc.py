"""CPU per request of the DEALER -> ROUTER request/reply (`ipc.rpc`), client and server each
in its own process, as the benchmark client and the hub are.

    .venv/bin/python loadtests/probe_rpc.py [--calls 20000] [--concurrency 64]
        [--module ipc.rpc] [--baseline PATH]

The server answers each request at once (a small reply, as `/ingest`'s); the client keeps
`concurrency` calls in flight. Printed: calls/s and CPU microseconds per call in the client
and in the server. `--baseline PATH` runs a second implementation from a file (say the
previous `ipc/rpc.py`, `git show <commit>:ipc/rpc.py > /tmp/rpc_old.py`) the same way right
after, with the ratio of each figure against it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REPLY = {"status": 200, "body": {"status": "ok", "seq": 123456}}
EVENT = {"route": "POST /ingest", "body": {"table": "post", "op": "UPDATE", "id": "post:p1_2",
                                          "record": {"id": "post:p1_2", "owner": "user:u1",
                                                     "cat": 3, "n": 42}}}


def load(spec: str) -> ModuleType:
    if spec.endswith(".py"):
        s = importlib.util.spec_from_file_location("rpc_under_test", spec)
        assert s is not None and s.loader is not None
        m = importlib.util.module_from_spec(s)
        s.loader.exec_module(m)
        return m
    return importlib.import_module(spec)


def server_main(spec: str, endpoint: str, ready: Any, cpu_out: Any, stop: Any) -> None:
    rpc = load(spec)

    async def handler(body: Any) -> Any:
        return REPLY

    async def run() -> None:
        server = rpc.RpcServer(endpoint, handler)
        task = asyncio.get_running_loop().create_task(server.serve())
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        cpu_out.value = time.process_time()
        task.cancel()
        server.close()
    asyncio.run(run())


async def client_run(rpc: ModuleType, endpoint: str, calls: int, conc: int) -> float:
    client = rpc.RpcClient(endpoint)
    left = [calls]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await client.call(EVENT, timeout=30)
    await client.call(EVENT, timeout=30)  # connected
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    el = time.perf_counter() - t0
    client.close()
    return el


def measure(spec: str, calls: int, conc: int) -> dict[str, float]:
    endpoint = f"ipc://{tempfile.mkdtemp(prefix='probe-rpc-')}/s.sock"
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    cpu = ctx.Value("d", 0.0)
    proc = ctx.Process(target=server_main, args=(spec, endpoint, ready, cpu, stop))
    proc.start()
    ready.wait(30)
    # the server's CPU before the calls: read from /proc (its own figure comes at the end)
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    srv0 = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rpc = load(spec)
    c0 = time.process_time()
    el = asyncio.run(client_run(rpc, endpoint, calls, conc))
    c1 = time.process_time()
    stop.set()
    proc.join(30)
    return {"calls_s": calls / el, "client_us": (c1 - c0) / calls * 1e6,
            "server_us": (cpu.value - srv0) / calls * 1e6}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--module", default="ipc.rpc")
    p.add_argument("--baseline", default=None)
    p.add_argument("--rounds", type=int, default=2, help="alternate the two this many times")
    args = p.parse_args()
    specs = [args.module] + ([args.baseline] if args.baseline else [])
    rows: dict[str, list[dict[str, float]]] = {s: [] for s in specs}
    for _ in range(args.rounds):
        for s in specs:
            rows[s].append(measure(s, args.calls, args.concurrency))
    print(f"{args.calls} calls, {args.concurrency} in flight, {args.rounds} rounds each "
          f"(alternating); load {os.getloadavg()[0]:.1f}")
    print(f"{'implementation':<40} {'calls/s':>9} {'client us':>10} {'server us':>10}")
    best = {s: {k: (max if k == 'calls_s' else min)(r[k] for r in rs) for k in rs[0]}
            for s, rs in rows.items()}
    for s in specs:
        b = best[s]
        print(f"{s:<40} {b['calls_s']:>9.0f} {b['client_us']:>10.1f} {b['server_us']:>10.1f}")
    if args.baseline:
        a, b = best[args.module], best[args.baseline]
        print(f"{'ratio (module / baseline)':<40} {a['calls_s'] / b['calls_s']:>9.2f} "
              f"{a['client_us'] / b['client_us']:>10.2f} {a['server_us'] / b['server_us']:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
