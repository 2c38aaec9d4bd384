"""The dashboard's Pools page in a real browser (Debian's chromium via Playwright) against a
real `svc-scheduler` with a pool of the local provider (`min_machines: 1`, so a real agent
process runs without any job): the pool's status and machines, pause / resume, and draining a
machine (the pool then boots a replacement to keep its minimum). The same scheduler is linked
to a stand-in of the platform's link API (`/v1/link/deployment`, the one route the overview
reads): the overview shows the deployment and its instances."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.integration.test_scheduler_process import SchedulerProc, launch, write_config
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import root_db

pytestmark = pytest.mark.slow

LONG = 120_000  # ms: the machine is shared; conditions are waited on, never slept
PASSWORD = "pools-dashboard-breakglass-42"
LINK_SECRET = "pools-dashboard-link-secret-0123456789"
DEPLOYMENT = {
    "deployment": {"id": "dep_42", "version": 7, "status": "healthy", "trigger": "push",
                   "started_by": "ci", "started_at": "2026-01-02T03:04:05+00:00",
                   "finished_at": "2026-01-02T03:05:00+00:00", "spec": {}},
    "instances": [
        {"id": "inst_s", "role": "scheduler", "kind": "process", "status": "healthy",
         "url": "http://10.0.0.5:8080", "healthy_at": "2026-01-02T03:04:30+00:00"},
        {"id": "inst_p", "role": "ssp", "kind": "process", "status": "healthy",
         "url": "http://10.0.0.6:8081", "healthy_at": "2026-01-02T03:04:40+00:00"}],
}
expect.set_options(timeout=LONG)


def run_async(coro: Any) -> Any:
    """A coroutine run in a thread of its own (Playwright's sync API keeps a loop here)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _schema(host: DbHost, ns: str) -> None:
    db = await root_db(host, ns, ns)
    await db.query("DEFINE TABLE pjob SCHEMALESS;")
    await db.close()


class _Platform(BaseHTTPRequestHandler):
    """The platform's link route as the scheduler calls it (bearer + project checked)."""

    def do_GET(self) -> None:
        ok = (self.path == "/v1/link/deployment"
              and self.headers.get("Authorization") == f"Bearer {LINK_SECRET}"
              and self.headers.get("X-Svc-Project") == "acme")
        data = json.dumps(DEPLOYMENT if ok else {"error": "unauthorized"}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def platform() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Platform)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def scheduler(host: DbHost, platform: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[SchedulerProc, str]]:
    tmp = tmp_path_factory.mktemp("pools-dash")
    ns = "pdash_" + uuid.uuid4().hex[:8]
    run_async(_schema(host, ns))
    port, admin_port = free_port(), free_port()
    jobs = {"job_tables": {"worker": {"name": "pjob", "base_url": "http://127.0.0.1:9",
                                      "auth_token": "t"}}}
    s = launch(tmp, write_config(tmp, host, ns, port), port, ns,
               SVC_BACKENDS=json.dumps([{"name": "worker", "run_on": {"pool": "p1"}}]),
               SVC_JOB_CONFIG=json.dumps(jobs),
               SVC_POOLS=json.dumps({"p1": {"slots": 3, "min_machines": 1,
                                            "max_machines": 2}}),
               SVC_POOL_HOST="127.0.0.1", SVC_POOL_PORT=str(free_port()),
               SVC_POOL_HEARTBEAT_MS="200", SVC_POOL_TICK_MS="100",
               SVC_ADMIN_PORT=str(admin_port), SVC_ADMIN_PASSWORD=PASSWORD,
               SVC_CLOUD_API_URL=platform, SVC_CLOUD_PROJECT="acme",
               SVC_AUTH_SECRET=LINK_SECRET)
    try:
        yield s, f"http://127.0.0.1:{admin_port}"
    finally:
        assert s.process.stop() == 0, s.process.log_text()[-3000:]


def _sign_in(page: Page, admin: str) -> None:
    page.goto(admin + "/admin/")
    page.get_by_role("tab", name="Break-glass").click()
    page.get_by_label("Break-glass password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("[data-card=scheduler]")).to_be_visible()


def _signed_in(browser: Browser, admin: str) -> tuple[BrowserContext, Page, list[str]]:
    """A signed-in page in its own context, and the page's errors as they come."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.set_default_timeout(LONG)
    page = ctx.new_page()
    errs: list[str] = []
    page.on("pageerror", lambda e: errs.append(str(e)))
    page.on("console", lambda m: errs.append(m.text) if m.type == "error" else None)
    _sign_in(page, admin)
    return ctx, page, errs


def test_pools_page_shows_machines_pauses_and_drains(
        browser: Browser, scheduler: tuple[SchedulerProc, str], artifacts: Path) -> None:
    _, admin = scheduler
    ctx, page, errs = _signed_in(browser, admin)

    page.locator("nav#nav a[data-page=pools]").click()
    row = page.locator("tr[data-pool=p1]")
    expect(row).to_have_attribute("data-status", "healthy")  # the minimum machine registered
    expect(row.locator("[data-machines=ready]")).to_contain_text("1 ready")
    expect(row.locator("[data-waiting]")).to_have_text("0")
    page.screenshot(path=artifacts / "pools.png", full_page=True)

    # pause asks first, then shows the pool paused; resume undoes it
    row.locator("button[data-action=pause]").click()
    expect(page.locator("#confirm")).to_be_visible()
    expect(page.locator("#confirm-body")).to_contain_text("Kept across scheduler restarts")
    page.locator("#confirm-ok").click()
    expect(row).to_have_attribute("data-paused", "true")
    row.locator("button[data-action=resume]").click()
    expect(row).to_have_attribute("data-paused", "false")

    # one pool's machines; drain the ready one: it is destroyed and a new one keeps the minimum
    row.get_by_role("link", name="p1").click()
    expect(page).to_have_url(admin + "/admin/pools/p1")
    first = page.locator("tr[data-state=ready]")
    expect(first).to_have_count(1)
    machine_id = first.get_attribute("data-machine")
    first.locator("button[data-action=drain]").click()
    expect(page.locator("#confirm-body")).to_contain_text("takes no new job")
    page.locator("#confirm-ok").click()
    expect(page.locator(f"tr[data-machine='{machine_id}']")).to_have_attribute(
        "data-state", "destroyed")
    expect(page.locator(f"tr[data-machine='{machine_id}']")).to_contain_text("operator drain")
    expect(page.locator("tr[data-state=ready]")).to_have_count(1)
    assert page.locator("tr[data-state=ready]").get_attribute("data-machine") != machine_id
    page.screenshot(path=artifacts / "pools_p1.png", full_page=True)
    assert not errs, errs
    ctx.close()


def test_a_linked_scheduler_shows_its_deployment_and_instances(
        browser: Browser, scheduler: tuple[SchedulerProc, str], artifacts: Path) -> None:
    _, admin = scheduler
    ctx, page, errs = _signed_in(browser, admin)
    try:  # an open page holds streams the scheduler's shutdown would wait for
        card = page.locator("[data-card=cloud] [data-linked=true]")
        expect(card).to_contain_text("version 7")
        expect(card).to_contain_text("healthy")
        expect(card).to_contain_text("dep_42")
        for inst, role in (("inst_s", "scheduler"), ("inst_p", "ssp")):
            expect(page.locator(f"tr[data-instance={inst}]")).to_have_attribute("data-role", role)
        expect(page.locator("tr[data-instance=inst_p]")).to_contain_text("http://10.0.0.6:8081")
        expect(page.locator("[data-card=cloud] [data-linked=false]")).to_have_count(0)
        page.screenshot(path=artifacts / "overview-cloud.png", full_page=True)
        assert not errs, errs
    finally:
        ctx.close()
