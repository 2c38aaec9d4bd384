"""Where a running database host's engine time goes, per statement shape.

    python loadtests/probe_db_statements.py --url http://127.0.0.1:PORT [--reset] [--limit 25]
        [--every SECS --times N]

Reads `GET /debug/statements` (`dbhost.stats`) with the root user's credentials from
`SVC_DB_USER` / `SVC_DB_PASS` (or `--user`; the password is read from the environment only, so
it never shows in a process list) and prints the shapes with the most engine time: requests a
second, mean and max milliseconds, share of all engine time. `--reset` starts the host's
counters again first; `--every` prints a table per interval (each one covering that interval).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request


def _call(url: str, auth: str, method: str = "GET") -> dict:
    req = urllib.request.Request(url, method=method, headers={"Authorization": auth})
    with urllib.request.urlopen(req, timeout=10) as r:
        body: dict = json.loads(r.read())
        return body


def print_table(report: dict, limit: int) -> None:
    print(f"over {report['elapsed_s']:.1f} s: {report['requests']:,} requests, "
          f"{report['engine_s']:.1f} s in the engine "
          f"({report['engine_s'] / max(report['elapsed_s'], 1e-9):.2f} engine-seconds per second), "
          f"{report['shapes']} shapes")
    print(f"{'share':>6} {'per s':>8} {'mean ms':>8} {'max ms':>8}  shape")
    for row in report["statements"][:limit]:
        print(f"{row['share'] * 100:5.1f}% {row['per_s']:8.1f} {row['mean_ms']:8.2f} "
              f"{row['max_ms']:8.1f}  {row['shape'][:110]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the host's base URL, http://HOST:PORT")
    ap.add_argument("--user", default=os.environ.get("SVC_DB_USER", "root"))
    ap.add_argument("--limit", type=int, default=25)
    ap.add_argument("--reset", action="store_true")
    ap.add_argument("--every", type=float, default=0.0)
    ap.add_argument("--times", type=int, default=1)
    a = ap.parse_args()
    password = os.environ.get("SVC_DB_PASS", "root")
    auth = "Basic " + base64.b64encode(f"{a.user}:{password}".encode()).decode()
    url = a.url.rstrip("/") + "/debug/statements"
    try:
        if a.reset or a.every:
            _call(url, auth, "DELETE")
        for i in range(max(1, a.times)):
            if a.every:
                time.sleep(a.every)
            report = _call(f"{url}?limit={max(1, min(a.limit, 500))}", auth)
            print_table(report, a.limit)
            if a.every and i + 1 < a.times:
                _call(url, auth, "DELETE")
                print()
    except urllib.error.HTTPError as e:
        print(f"the host answered {e.code}: {e.read()[:200]!r}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"cannot reach {url}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
