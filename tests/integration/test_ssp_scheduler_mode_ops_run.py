"""`ops/run --ssps 2`: database host, schema, `svc-scheduler` and two SSPs in scheduler mode;
both register and become Ready; a resync directive makes them exit 4 and ops/run relaunches
them until they are Ready again; Ctrl-C leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.integration.test_ops_run import _descendants
from tests.support import lifeline
from tests.support.procs import ROOT, base_env, free_port, free_ports, http_status


def _get_json(url: str) -> tuple[int | None, Any]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except (urllib.error.URLError, OSError, ValueError):
        return None, None


def _post(url: str) -> int:
    req = urllib.request.Request(url, data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _wait(pred: Any, proc: subprocess.Popen[bytes], log: Path, what: str,
          timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ops/run exited while waiting for {what}:\n" + \
            log.read_text(errors="replace")[-5000:]
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached:\n" + log.read_text(errors="replace")[-5000:])


def test_ops_run_cluster_mode_relaunches_ssps_after_a_resync(tmp_path: Path) -> None:
    db_port, sched_port = free_port(), free_port()
    ssp_port = free_ports(2)
    sched = f"http://127.0.0.1:{sched_port}"
    ssps = [f"http://127.0.0.1:{ssp_port + i}" for i in range(2)]
    log = tmp_path / "ops-run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(ROOT / "ops" / "run"), "--data", str(tmp_path / "data"),
             "--db-bind", f"127.0.0.1:{db_port}", "--ssps", "2",
             "--ssp-bind", f"127.0.0.1:{ssp_port}", "--scheduler-bind", f"127.0.0.1:{sched_port}",
             "--admin-bind", f"127.0.0.1:{free_port()}"],
            env=base_env(SVC_DB_USER="root", SVC_DB_PASS="cluster-test-pass",
                         HEARTBEAT_INTERVAL_MS="200"),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        lifeline.adopt(proc.pid)  # dies with this run, killed or not
    try:
        def ready_ids() -> set[str]:
            status, body = _get_json(sched + "/metrics")
            if status != 200 or not isinstance(body, dict):
                return set()
            return {s["id"] for s in body.get("ssps", []) if s.get("state") == "ready"}

        want = {f"ssp-{ssp_port}", f"ssp-{ssp_port + 1}"}
        _wait(lambda: ready_ids() == want, proc, log, "both SSPs ready at the scheduler")
        assert all(http_status(u + "/health") == 200 for u in ssps)
        _wait(lambda: "service is up" in log.read_text(errors="replace"), proc, log,
              "the announcement")
        text = log.read_text(errors="replace")
        assert f"scheduler       {sched}" in text and ssps[1] in text
        for u in ssps:
            status, body = _get_json(u + "/version")
            assert status == 200 and body["mode"] == "scheduler"
        assert (tmp_path / "data" / "scheduler" / "scheduler.yml").exists()
        assert "cluster-test-pass" not in (tmp_path / "data" / "scheduler" /
                                           "scheduler.yml").read_text()

        # Operator resync: every SSP is flagged clean -> 409 -> exit 4 -> relaunched -> Ready.
        assert _post(sched + "/admin/resync") == 202
        _wait(lambda: log.read_text(errors="replace").count("exited with 4; relaunching") >= 2,
              proc, log, "both SSPs relaunched after exit 4")
        _wait(lambda: ready_ids() == want, proc, log, "both SSPs ready again")
        assert all(http_status(u + "/health") == 200 for u in ssps)

        kids = _descendants(proc.pid)
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=90)
        text = log.read_text(errors="replace")
        assert proc.returncode == 0, text[-5000:]
        time.sleep(0.2)
        left = [k for k in kids if os.path.exists(f"/proc/{k}") and
                "zombie" not in Path(f"/proc/{k}/status").read_text().lower()]
        assert left == [], f"processes left behind: {left}"
        assert http_status(sched + "/health") is None
        assert "cluster-test-pass" not in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
