"""The dashboard's jobs and schedules pages in Chromium against a cluster whose SSPs run the
job table: the bulk kill of running jobs succeeds for each (the backend holds every call), the
bulk retry puts the killed jobs back to work, and the schedules page with no schedule says how
to add one, in code, not raw Markdown."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.test_dashboard import LONG, new_context, sign_in_breakglass
from tests.support.admin_cluster import AdminCluster, admin_cluster, wait_until
from tests.support.procs import DbHost

expect.set_options(timeout=LONG)


class HoldingBackend:
    """A job backend on a loopback port that holds every call until the test ends (a job it
    was given stays `processing` until it is killed)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.calls: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.calls.append(self.headers.get("X-Job-Id") or "")
                outer.done.wait(120)
                body = b'{"ok": true}'
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the caller gave up (the job was killed)

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.done.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def cluster(host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminCluster]:
    backend = HoldingBackend()
    jobs = json.dumps({"job_tables": {"main": {
        "name": "job", "base_url": backend.url, "auth_token": "job-token", "concurrency": 4,
        "timeout_secs": 120, "lease_secs": 30}}})
    try:
        # three jobs waiting, one failed: the SSPs pick the waiting ones up from the sweep
        with admin_cluster(host, tmp_path_factory.mktemp("dashjobs"), "djobs_",
                           ssp_env={"SVC_JOB_CONFIG": jobs},
                           job_statuses=("pending", "pending", "pending", "failed"),
                           SVC_JOB_SWEEP_SECS="1") as c:
            yield c
    finally:
        backend.stop()


@pytest.fixture(scope="module")
def operator(browser: Browser, cluster: AdminCluster) -> Iterator[Page]:
    ctx = new_context(browser)
    page = ctx.new_page()
    sign_in_breakglass(page, cluster)
    yield page
    ctx.close()


def job(c: AdminCluster, key: str) -> dict[str, Any]:
    status, body = c.api("GET", f"/admin/api/jobs/job:{key}")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def test_running_jobs_are_killed_together_then_retried_together(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    wait_until(lambda: all(job(cluster, k)["status"] == "processing" for k in ("j0", "j1")),
               90, "j0 and j1 running on an SSP")
    answers: list[int] = []
    page.on("response", lambda r: answers.append(r.status)
            if r.request.method == "POST" and r.url.endswith(("/kill", "/retry")) else None)
    page.goto(cluster.admin + "/admin/jobs")
    for key in ("job:j0", "job:j1"):
        page.get_by_label(f"Select job {key}").check()
    page.locator("button[data-action=bulk-kill]").click()
    expect(page.locator("dialog#confirm")).to_contain_text("Kill 2 jobs?")
    page.locator("#confirm-ok").click()
    result = page.locator("[data-bulk-result][data-bulk-done]")
    expect(result).to_contain_text("killed 2 of 2")
    expect(result.locator("[role=alert]")).to_have_count(0)
    assert answers == [200, 200], answers
    # The list shows the accepted kills at once, boxes unchecked, not at the next sample.
    for key in ("job:j0", "job:j1"):
        row = page.locator(f"tr[data-job='{key}']")
        assert row.locator(".badge").inner_text() in ("kill requested", "failed"), key
        assert not page.get_by_label(f"Select job {key}").is_checked(), key
    assert page.locator("tr[data-job='job:j2'] .badge").inner_text() == "processing"
    expect(page.locator("button[data-action=bulk-kill]")).to_have_text("Kill selected (0)")
    for key in ("j0", "j1"):
        wait_until(lambda key=key: job(cluster, key)["status"] == "failed", 60,
                   f"{key} failed by the kill")
        assert any(e.get("kind") == "killed" for e in job(cluster, key)["errors"])
    assert job(cluster, "j2")["status"] == "processing"  # not selected: still running
    for key in ("job:j0", "job:j1"):  # the next sample replaces the request with the outcome
        expect(page.locator(f"tr[data-job='{key}'] .badge")).to_have_text("failed")
    page.screenshot(path=artifacts / "jobs-bulk-kill-succeeds.png", full_page=True)

    answers.clear()
    page.reload()
    for key in ("job:j0", "job:j1"):
        page.get_by_label(f"Select job {key}").check()
    page.locator("button[data-action=bulk-retry]").click()
    expect(page.locator("dialog#confirm")).to_contain_text("Retry 2 jobs?")
    page.locator("#confirm-ok").click()
    expect(page.locator("[data-bulk-result][data-bulk-done]")).to_contain_text("retried 2 of 2")
    assert answers == [200, 200], answers
    for key in ("job:j0", "job:j1"):
        assert page.locator(f"tr[data-job='{key}'] .badge").inner_text() in (
            "retry requested", "pending", "processing"), key
    for key in ("j0", "j1"):  # back to work: claimed again by an SSP
        wait_until(lambda key=key: job(cluster, key)["status"] in ("pending", "processing"),
                   60, f"{key} back to work")


def test_the_schedules_page_without_a_schedule_says_how_to_add_one(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    status, body = cluster.api("GET", "/admin/api/schedules")
    assert status == 200 and body["schedules"] == [], body
    page.goto(cluster.admin + "/admin/schedules")
    empty = page.locator("[data-empty-schedules]")
    expect(empty).to_have_text("No schedule: add schedules: to project.yml and run "
                               "svc workflows apply.")
    expect(empty.locator("code")).to_have_text(["schedules:", "project.yml",
                                                "svc workflows apply"])
    assert "`" not in (page.locator("main").text_content() or "")
    expect(page.locator("main .error, main [role=alert]")).to_have_count(0)
    page.screenshot(path=artifacts / "schedules-empty.png", full_page=True)


def test_an_ssps_page_says_how_it_last_started(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    sid = cluster.ssps[0].ssp_id
    page.goto(cluster.admin + f"/admin/ssps/{sid}")
    # a first start has no snapshot: cold, with the pages read and the reason
    expect(page.locator(f"[data-ssp='{sid}']")).to_contain_text(
        re.compile(r"Last start\s*cold \(\d+ pages, [\d.]+ s\): no snapshot\.json"))
    page.screenshot(path=artifacts / "ssp-last-start.png", full_page=True)
