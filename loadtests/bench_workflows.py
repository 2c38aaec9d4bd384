"""Workflow and schedule benchmark: schedule lateness at 1,000 schedules a minute, and the
per-step orchestration overhead of a workflow against the same jobs inserted directly.

    .venv/bin/python loadtests/bench_workflows.py [--schedules 1000] [--minutes 2]
        [--steps 20] [--rounds 3] [--targets table,workflow]

What runs (all real processes on loopback ports, as in tests/support/workflow_stack.py): a
database host (`--memory`), `svc-scheduler` (its workflow engine at the production defaults:
`SVC_WORKFLOW_POLL_MS=1000`, definitions read every 5 s, job sweep 30 s), one SSP in scheduler
mode running the jobs (table `job` at concurrency 8, `job_one` at concurrency 1), and a
backend answering 200 at once (in this process, its own thread).

1. Overhead. The same `--steps` jobs on `job_one` (concurrency 1: one at a time either way):
   a workflow chaining them (step n+1 depends on step n), started by a schedule trigger, vs
   the rows inserted directly in one statement and admitted by one `/job/dispatch`. Time from
   the start (trigger / insert) until the last job is `completed`; per-step overhead =
   (workflow - direct) / steps; and the engine's own gap per step: the next step's
   `started_at` (its job created) minus the previous job's `finished_at`. Medians of
   `--rounds`.
2. Lateness. `--schedules` schedules with cron `* * * * *` (every minute), target one job in
   `job` (`table`) or a one-step workflow (`workflow`), applied with `svc workflows apply`,
   observed for `--minutes` minute boundaries. Lateness of a fire = its `fired_at` (the
   database's clock when the fire's transaction committed) minus its due time; "job
   started" = when the SSP claimed the fire's job (its `started_at`) minus the due time. Target: p99 <= 1 s on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surrealdb import RecordID

from tests.support.procs import start_db_host
from tests.support.ssp_stack import root_db
from tests.support.workflow_stack import WorkflowStack, prepare, start_stack

NEVER = "0 0 1 1 *"
PROD = {"SVC_WORKFLOW_POLL_MS": "1000", "SVC_WORKFLOW_DEFINITIONS_POLL_SECS": "5",
        "SVC_WORKFLOW_DISPATCH_TIMEOUT_SECS": "3600", "SVC_JOB_SWEEP_SECS": "30"}


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


async def wait(pred: Any, timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = await pred()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


# ---------------------------------------------------------------------------- overhead


async def workflow_round(stack: WorkflowStack, steps: int) -> tuple[float, list[float]]:
    _, before = await stack.call("GET", "/workflows/runs?schedule=chain_now&limit=500")
    seen = {r["key"] for r in before["runs"]}
    t0 = time.monotonic()
    status, body = await stack.call("POST", "/schedules/chain_now/trigger")
    assert status == 200, body

    async def new_run() -> Any:
        _, got = await stack.call("GET", "/workflows/runs?schedule=chain_now&limit=500")
        fresh = [r for r in got["runs"] if r["key"] not in seen]
        return fresh[0]["key"] if fresh else None
    key = await wait(new_run, 60, "the chain run")
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        async def done() -> Any:
            row = await root.query_one("SELECT status FROM ONLY $r",
                                       {"r": RecordID("_00_workflow_run", key)})
            return row if row and row["status"] != "running" else None
        row = await wait(done, 300, "the chain run's end")
        total = time.monotonic() - t0
        assert row["status"] == "completed", row
        srows = await root.query_one("SELECT step, started_at FROM _00_step_run WHERE run = $r",
                                     {"r": RecordID("_00_workflow_run", key)})
        jobs = await root.query_one("SELECT id, finished_at FROM job_one WHERE workflow_run = $r",
                                    {"r": RecordID("_00_workflow_run", key)})
    finally:
        await root.close()
    started = {r["step"]: r["started_at"] for r in srows}
    finished = {str(j["id"].id).removeprefix(f"wf_{key}_"): j["finished_at"] for j in jobs}
    gaps = [(started[f"s{i:02d}"] - finished[f"s{i - 1:02d}"]).total_seconds() * 1000
            for i in range(1, steps)]
    return total, gaps


async def direct_round(stack: WorkflowStack, steps: int) -> float:
    root = await root_db(stack.host, stack.ns, stack.ns)
    tag = uuid.uuid4().hex[:8]
    try:
        rows = [{"id": RecordID("job_one", f"d{tag}_{i:02d}"), "status": "pending",
                 "path": "/ok", "payload": {"i": i}, "created_at": datetime.now(UTC)}
                for i in range(steps)]
        t0 = time.monotonic()
        await root.query("INSERT INTO job_one $rows RETURN NONE", {"rows": rows})
        status, _ = await stack.call_ingest("/job/dispatch", {
            "job_id": f"job_one:d{tag}_00", "table": "job_one", "payload": {}})
        assert status == 200

        async def done() -> bool:
            n = await root.query_one("SELECT count() AS n FROM job_one WHERE status = "
                                     "'completed' AND string::starts_with(record::id(id), $p) "
                                     "GROUP ALL", {"p": f"d{tag}_"})
            return bool(n) and n[0]["n"] == steps
        await wait(done, 300, "the direct jobs")
        return time.monotonic() - t0
    finally:
        await root.close()


# ---------------------------------------------------------------------------- lateness


async def lateness(stack: WorkflowStack, target: str, n: int, minutes: int) -> dict[str, Any]:
    scheds = {f"m{i:04d}": ({"cron": "* * * * *", "table": "job", "path": "/ok"}
                            if target == "table" else {"cron": "* * * * *", "workflow": "one"})
              for i in range(n)}
    t_apply = time.monotonic()
    await asyncio.to_thread(stack.apply, {"one": {"steps": {"a": {"table": "job",
                                                                  "path": "/ok"}}}}, scheds)
    applied = datetime.now(UTC)
    apply_secs = time.monotonic() - t_apply
    # first due: the next minute boundary after the engine has read the definitions
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        async def fires_of_minutes() -> Any:
            got = await root.query_one(
                "SELECT due_at, count() AS n FROM _00_schedule_run WHERE due_at > $t AND "
                "schedule IN $names GROUP BY due_at", {"t": applied, "names": list(scheds)})
            full = [g for g in got if g["n"] >= n]
            return full if len(full) >= minutes else None
        await wait(fires_of_minutes, 60 * (minutes + 2), f"{minutes} minutes of fires")
        await asyncio.to_thread(stack.apply, {}, {})  # removes the schedules
        rows = await root.query_one(
            "SELECT due_at, fired_at, job, run, status FROM _00_schedule_run WHERE due_at > $t "
            "AND schedule IN $names", {"t": applied, "names": list(scheds)})
        late = [(r["fired_at"] - r["due_at"]).total_seconds() * 1000 for r in rows]
        if target == "table":
            jobs = await root.query_one(
                "SELECT started_at, schedule_run FROM job WHERE schedule IN $names",
                {"names": list(scheds)})
        else:
            jobs = await root.query_one(
                "SELECT started_at, workflow_run.schedule_run AS schedule_run FROM job WHERE "
                "workflow_run.schedule IN $names", {"names": list(scheds)})
        dues = {str(r["id"]): r["due_at"] for r in await root.query_one(
            "SELECT id, due_at FROM _00_schedule_run WHERE schedule IN $names",
            {"names": list(scheds)})}
        job_at = [(j["started_at"] - dues[str(j["schedule_run"])]).total_seconds() * 1000
                  for j in jobs if str(j.get("schedule_run")) in dues
                  and isinstance(j.get("started_at"), datetime)]
        per_minute: dict[Any, int] = {}
        for r in rows:
            per_minute[r["due_at"]] = per_minute.get(r["due_at"], 0) + 1
    finally:
        await root.close()
    return {"target": target, "schedules": n, "fires": len(rows),
            "per_minute": sorted(per_minute.values()), "apply_s": apply_secs,
            "p50": pct(late, 50), "p99": pct(late, 99), "max": max(late) if late else 0,
            "job_p50": pct(job_at, 50), "job_p99": pct(job_at, 99)}


def print_rounds(stack: WorkflowStack) -> None:
    """The engine's ten longest rounds of decisions, from its debug log."""
    pat = re.compile(r"workflows: (\d+) units \((\d+) statements\) decided in ([\d.]+) ms, "
                     r"committed in ([\d.]+) ms")
    rounds = []
    for f in stack.sched.log_dir.glob("*.log"):
        for line in f.read_text(errors="replace").splitlines():
            m = pat.search(line)
            if m:
                rounds.append((float(m[3]) + float(m[4]), line[:23], *m.groups()))
    rounds.sort(reverse=True)
    print(f"\nLongest rounds of decisions ({len(rounds)} logged)\n")
    print("| at | units | statements | decide ms | commit ms |")
    print("|---|---|---|---|---|")
    for _, at, u, st, dec, com in rounds[:10]:
        print(f"| {at} | {u} | {st} | {dec} | {com} |")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedules", type=int, default=1000)
    ap.add_argument("--minutes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--targets", default="table,workflow")
    ap.add_argument("--rounds-log", action="store_true",
                    help="log the engine's rounds (SVC_LOG_LEVEL=debug) and print the ten "
                         "longest: units, statements, decide and commit ms")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-wf-"))
    host = start_db_host(tmp)
    stack = None
    try:
        ns = "bench_" + uuid.uuid4().hex[:8]
        await prepare(host, ns)
        env = {**PROD, **({"SVC_LOG_LEVEL": "debug"} if args.rounds_log else {})}
        stack = await asyncio.to_thread(start_stack, tmp, host, ns, scheduler_env=env)
        chain = {f"s{i:02d}": {"table": "job_one", "path": "/ok",
                               "depends_on": [f"s{i - 1:02d}"] if i else []}
                 for i in range(args.steps)}
        await asyncio.to_thread(stack.apply, {"chain": {"steps": chain}},
                                {"chain_now": {"cron": NEVER, "workflow": "chain"}})
        wf_t, direct_t, gaps = [], [], []
        for _ in range(args.rounds):
            t, g = await workflow_round(stack, args.steps)
            wf_t.append(t)
            gaps += g
            direct_t.append(await direct_round(stack, args.steps))
        w, d = statistics.median(wf_t), statistics.median(direct_t)
        print(f"\nPer-step orchestration overhead ({args.steps} jobs on a concurrency-1 table, "
              f"median of {args.rounds} rounds)\n")
        print("| run | total s | per step ms | vs direct |")
        print("|---|---|---|---|")
        print(f"| jobs inserted directly (one INSERT, one dispatch) | {d:.2f} | "
              f"{d / args.steps * 1000:.0f} | 1.00x |")
        print(f"| workflow chain (step n+1 after step n) | {w:.2f} | "
              f"{w / args.steps * 1000:.0f} | {w / d:.2f}x |")
        print(f"\nworkflow overhead per step: {(w - d) / args.steps * 1000:.0f} ms; engine gap "
              f"(job finished -> next job created): p50 {pct(gaps, 50):.0f} ms, "
              f"p99 {pct(gaps, 99):.0f} ms")
        results = [await lateness(stack, t, args.schedules, args.minutes)
                   for t in args.targets.split(",")]
        print(f"\nSchedule lateness ({args.schedules} schedules, `* * * * *`, "
              f"{args.minutes} minute boundaries each)\n")
        print("| target | fires | fires per minute | p50 ms | p99 ms | max ms | job started "
              "p50 / p99 ms |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['target']} | {r['fires']} | {min(r['per_minute'])}-"
                  f"{max(r['per_minute'])} | {r['p50']:.0f} | {r['p99']:.0f} | {r['max']:.0f} "
                  f"| {r['job_p50']:.0f} / {r['job_p99']:.0f} |")
        if args.rounds_log:
            print_rounds(stack)
    finally:
        if stack is not None:
            stack.stop()
        host.process.stop()


if __name__ == "__main__":
    asyncio.run(main())
