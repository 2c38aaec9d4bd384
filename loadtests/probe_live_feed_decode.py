"""The database host's LIVE feed loop, per read of the database's changefeed: the full decode
(every row built, SDK RecordIDs) against the shallow decode that builds only followed tables.

    .venv/bin/python loadtests/probe_live_feed_decode.py [--rows 1000] [--repeat 30]
        [--gc default|host]

A reply of `--rows` change sets of the application's table `post` (each row with an id and an
`author` link, as issue 31's soak writes) plus one set of a followed low-traffic table, encoded
as the engine answers SHOW CHANGES FOR DATABASE. Prints the median per read of each path and
the ratio against the old (full) path, measured in the same run. `--gc host` collects as the
host now does (`engine.gcpolicy` thresholds, start-up frozen); `default` is CPython's 700.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

from surrealdb import RecordID

from dbclient.cbor import decode, decode_shallow, encode, materialize
from dbclient.feed import split_by_table


def reply(rows: int) -> bytes:
    sets: list[dict[str, Any]] = []
    for i in range(rows):
        row = {"id": RecordID("post", i), "author": RecordID("user", f"u{i % 1000}"),
               "category": f"c{i % 10}", "score": i % 100, "title": f"post {i}"}
        sets.append({"versionstamp": (1 << 40) + (i << 16), "changes": [
            {"current": row, "update": [{"op": "replace", "path": "/score", "value": 1}]}]})
    sets.append({"versionstamp": (1 << 40) + (rows << 16), "changes": [
        {"update": {"id": RecordID("_00_version", "post"), "v": 1}}]})
    return encode({"id": "host-1", "result": [{"status": "OK", "result": sets, "time": "1ms",
                                               "type": None}]})


def old_path(data: bytes, followed: set[str]) -> int:
    built = 0
    for batch in decode(data)["result"][0]["result"]:
        for table, changes in split_by_table(batch["changes"]).items():
            if table in followed:
                built += len(changes)
    return built


def new_path(data: bytes, followed: set[str]) -> int:
    built = 0
    for batch in decode_shallow(data)["result"][0]["result"]:
        for table, changes in split_by_table(batch["changes"], shallow=True).items():
            if table in followed:
                built += len(materialize(changes))
    return built


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--gc", choices=["default", "host"], default="host")
    args = p.parse_args()
    if args.gc == "host":
        from engine import gcpolicy

        gcpolicy.configure()
        gc.freeze()
    data = reply(args.rows)
    followed = {"_00_version"}
    assert old_path(data, followed) == new_path(data, followed) == 1
    times: dict[str, list[float]] = {"full decode (old)": [], "shallow + build followed": []}
    for _ in range(args.repeat):  # alternate, so a load change hits both alike
        for name, fn in (("full decode (old)", old_path), ("shallow + build followed", new_path)):
            t = time.perf_counter()
            fn(data, followed)
            times[name].append(time.perf_counter() - t)
    base = statistics.median(times["full decode (old)"])
    print(f"{args.rows} change sets, {len(data) / 1024:.0f} KiB per read, gc {args.gc}")
    print(f"{'path':<28} {'median ms':>10} {'ratio':>7}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<28} {m * 1000:>10.2f} {m / base:>7.2f}")


if __name__ == "__main__":
    main()
