"""The operator dashboard in a real browser (Debian's chromium via Playwright) against a real
cluster: a database host, `svc-scheduler` serving the shipped dashboard, two supervised SSPs and
a backend whose health check the test switches. One cluster and one browser for the module; each
test leaves the cluster as it found it. A screenshot of each page goes to tests/artifacts/.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.support.admin_cluster import AdminCluster, admin_cluster, run_async, wait_until
from tests.support.admin_stack import BREAKGLASS
from tests.support.procs import DbHost

pytestmark = pytest.mark.slow

LONG = 120_000  # ms: generous, the machine is shared; conditions are waited on, not slept
PAGES = ["", "ssps", "views", "presence", "backends", "backends/pay", "logs", "jobs",
         "jobs/job:j0", "operations", "backups", "incidents", "access", "pools"]
MEASURED: dict[str, Any] = {}
expect.set_options(timeout=LONG)


@pytest.fixture(scope="module")
def cluster(host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminCluster]:
    # a ring of 500 log lines: the logs page's gap needs 600 sign-ins, not 5,200
    with admin_cluster(host, tmp_path_factory.mktemp("dash"), "dash_",
                       SVC_ADMIN_LOG_LINES="500") as c:
        yield c


@pytest.fixture(scope="module")
def measured(artifacts: Path) -> Iterator[dict[str, Any]]:
    yield MEASURED
    (artifacts / "dashboard-measured.json").write_text(json.dumps(MEASURED, indent=2))
    print("\ndashboard measured:", json.dumps(MEASURED))


def new_context(browser: Browser, width: int = 1280, height: int = 800) -> BrowserContext:
    ctx = browser.new_context(viewport={"width": width, "height": height})
    ctx.set_default_timeout(LONG)
    return ctx


def sign_in_breakglass(page: Page, c: AdminCluster) -> None:
    page.goto(c.admin + "/admin/")
    page.get_by_role("tab", name="Break-glass").click()
    page.get_by_label("Break-glass password").fill(BREAKGLASS)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("[data-card=scheduler]")).to_be_visible()


def errors_of(page: Page) -> list[str]:
    errs: list[str] = []
    page.on("pageerror", lambda e: errs.append(str(e)))
    page.on("console", lambda m: errs.append(m.text) if m.type == "error" else None)
    return errs


@pytest.fixture(scope="module")
def operator(browser: Browser, cluster: AdminCluster) -> Iterator[Page]:
    """A break-glass session in its own browser context (its own localStorage)."""
    ctx = new_context(browser)
    page = ctx.new_page()
    sign_in_breakglass(page, cluster)
    yield page
    ctx.close()


def test_first_load_signs_in_with_break_glass_and_every_page_renders(
        browser: Browser, cluster: AdminCluster, artifacts: Path,
        measured: dict[str, Any]) -> None:
    ctx = new_context(browser)
    page = ctx.new_page()
    errs = errors_of(page)
    loads = []
    for _ in range(3):  # the first fetches everything, the next revalidate (304) on a warm stack
        page.goto(cluster.admin + "/admin/")
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        loads.append(page.evaluate("""() => {
            const n = performance.getEntriesByType('navigation')[0];
            const rs = performance.getEntriesByType('resource');
            return {dom_content_loaded_ms: n.domContentLoadedEventEnd, load_ms: n.loadEventEnd,
                    scripts: rs.filter(r => r.initiatorType === 'script' || r.name.endsWith('.js')).length,
                    bytes: rs.reduce((a, r) => a + r.encodedBodySize, 0) + n.encodedBodySize};
        }"""))
    measured["first_load_cold"] = loads[0]
    measured["first_load_warm"] = loads[1:]
    assert loads[0]["scripts"] >= 10  # every module came (no build step: one file each)
    page.screenshot(path=artifacts / "signin.png")
    # a wrong password is shown where it happened, not as a crash
    page.get_by_role("tab", name="Break-glass").click()
    page.get_by_label("Break-glass password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("Sign-in failed")
    page.get_by_label("Break-glass password").fill(BREAKGLASS)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("[data-card=scheduler]")).to_be_visible()
    # break-glass is flagged, the bearer is in localStorage for this endpoint, never a cookie
    expect(page.locator(".badge.breakglass")).to_have_text("BREAK-GLASS")
    expect(page.locator("#breakglass-banner")).to_be_visible()
    stored = page.evaluate("() => Object.keys(localStorage)")
    assert stored == [f"svc-admin:{cluster.admin}:session"]
    assert ctx.cookies() == []
    expect(page.locator("#conn")).to_have_attribute("data-state", "live")
    for path in PAGES:
        page.goto(cluster.admin + "/admin/" + path)  # also a deep link loaded as is
        expect(page.locator(f"div.page[data-page='{path.split('/')[0] or 'overview'}']")) \
            .to_be_visible()
        expect(page.locator("main .loading")).to_have_count(0)
        name = path.replace("/", "_").replace(":", "_") or "overview"
        page.screenshot(path=artifacts / f"{name}.png", full_page=True)
    # this cluster has no machine pool: an empty list, not an error
    expect(page.locator("main")).to_contain_text("No machine pool is configured")
    expect(page.locator("main .error, main [role=alert]")).to_have_count(0)
    # keyboard: the skip link and the navigation are reachable and move the focus
    page.goto(cluster.admin + "/admin/")
    page.keyboard.press("Tab")
    expect(page.locator("a.skip")).to_be_focused()
    nav = page.locator("nav#nav a[data-page=presence]")
    nav.focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(cluster.admin + "/admin/presence")
    expect(page.locator("main")).to_be_focused()
    assert not [e for e in errs if "401" not in e], errs
    ctx.close()


def test_a_view_registered_by_a_client_appears_with_its_rows_and_follows_writes(
        operator: Page, cluster: AdminCluster, artifacts: Path,
        measured: dict[str, Any]) -> None:
    page = operator
    page.goto(cluster.admin + "/admin/views?sort=rows")
    expect(page.locator("main .loading")).to_have_count(0)
    started = time.monotonic()
    cluster.register_view("bv1", "SELECT * FROM post WHERE n >= 3", "tab-b1")
    row = page.locator("tr[data-view=bv1]")
    expect(row).to_be_visible()
    measured["view_registered_to_row_secs"] = round(time.monotonic() - started, 2)
    rows_cell = row.locator("td").nth(3)
    expect(rows_cell).to_have_text("7")  # p3..p9
    cluster.write_post("bw1", 15)
    cluster.write_post("bw2", 16)
    expect(rows_cell).to_have_text("9")
    page.screenshot(path=artifacts / "views-live.png", full_page=True)
    # the detail, and a reload on its deep link lands on the same page
    row.get_by_role("link", name="bv1").click()
    expect(page).to_have_url(cluster.admin + "/admin/views/bv1")
    expect(page.locator("pre[data-query]")).to_have_text("SELECT * FROM post WHERE n >= 3")
    page.reload()
    expect(page.get_by_role("heading", name="View query:bv1")).to_be_visible()
    expect(page.locator("pre[data-query]")).to_have_text("SELECT * FROM post WHERE n >= 3")
    page.screenshot(path=artifacts / "view-detail.png", full_page=True)
    page.go_back()
    expect(page).to_have_url(cluster.admin + "/admin/views?sort=rows")


def test_a_rolling_restart_shows_its_progress_until_done(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    page.goto(cluster.admin + "/admin/ssps")
    page.locator("[data-action=restart-all]").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Restart all 2 SSPs")
    expect(page.locator("#confirm-cancel")).to_be_focused()  # the safe choice is the default
    page.locator("#confirm-ok").click()
    roll = page.locator("[data-roll]")
    expect(roll).to_have_attribute("data-roll", "running")
    expect(roll.locator("[data-progress]")).to_have_attribute("data-progress", "1/2",
                                                              timeout=180_000)
    page.screenshot(path=artifacts / "ssps-rolling.png", full_page=True)
    expect(roll).to_have_attribute("data-roll", "done", timeout=180_000)
    expect(roll.locator("[data-progress]")).to_have_attribute("data-progress", "2/2")
    page.goto(cluster.admin + "/admin/operations")
    expect(page.locator("tr[data-status=done]").first).to_contain_text("ssps_restart_all")
    wait_until(lambda: cluster.ready_ssps() == {s.ssp_id for s in cluster.ssps}, 120,
               "both SSPs ready")


def test_a_backend_going_down_shows_on_overview_and_as_an_incident(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    # the incidents page stays open: the new incident arrives without a reload, and the
    # time range asks the API for incidents started within it (`since`)
    listed: list[str] = []
    page.on("request", lambda r: listed.append(r.url) if "/admin/api/incidents?" in r.url
            else None)
    page.goto(cluster.admin + "/admin/incidents?component=pay&state=open")
    page.locator("select[name=range]").select_option("1h")
    expect(page).to_have_url(cluster.admin + "/admin/incidents?component=pay&state=open&range=1h")
    expect(page.locator("#incidents-updated")).to_contain_text("live")
    expect(page.locator("tr[data-kind=backend_down]")).to_have_count(0)
    asked = [u for u in listed if "range" not in u and "since=" in u]
    assert asked, listed
    since = int(asked[-1].split("since=")[1].split("&")[0])
    assert abs(since - (time.time() * 1000 - 3_600_000)) < 300_000, since
    cluster.backend.healthy = False
    try:
        inc = page.locator("tr[data-kind=backend_down][data-state=open]")
        expect(inc).to_have_count(1)  # live: no reload, no click
        page.goto(cluster.admin + "/admin/")
        card = page.locator("[data-card=backends]")
        expect(card.locator("[data-backend=pay]")).to_contain_text("unhealthy")
        expect(page.locator("[data-card=incidents] .stat")).not_to_have_text("0")
        page.screenshot(path=artifacts / "overview-backend-down.png", full_page=True)
        page.goto(cluster.admin + "/admin/incidents?component=pay&state=open&range=1h")
        expect(inc).to_have_count(1)
        inc.get_by_role("link").click()
        expect(page.locator("ol.timeline li").first).to_contain_text("backend pay")
        page.screenshot(path=artifacts / "incident-detail.png", full_page=True)
        page.goto(cluster.admin + "/admin/backends/pay")
        expect(page.locator("[data-chart=probes] svg")).to_be_visible()
        expect(page.locator("main")).not_to_contain_text("very-secret-value")
    finally:
        cluster.backend.healthy = True
    page.goto(cluster.admin + "/admin/backends")
    expect(page.locator("tr[data-backend=pay]")).to_have_attribute("data-status", "healthy")


def test_a_read_token_session_has_the_destructive_buttons_disabled(
        browser: Browser, cluster: AdminCluster, artifacts: Path) -> None:
    read = cluster.mint("read", "dashboard-reader")
    ctx = new_context(browser)
    page = ctx.new_page()
    page.goto(cluster.admin + "/admin/")
    page.get_by_role("tab", name="Access token").click()
    page.get_by_label("Access token").fill(read)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("[data-scope=read]")).to_have_text("read-only")
    page.goto(cluster.admin + "/admin/ssps")
    buttons = page.locator("main button[data-action]")
    expect(buttons.first).to_be_visible()
    assert buttons.count() >= 2 * 3 + 2 + 3
    for i in range(buttons.count()):
        expect(buttons.nth(i)).to_be_disabled()
        expect(buttons.nth(i)).to_have_attribute("title", "Read-only session: this needs a "
                                                          "full-scope sign-in or token")
    expect(page.locator("[data-readonly]")).to_contain_text("Read-only session")
    page.screenshot(path=artifacts / "ssps-read-only.png", full_page=True)
    page.goto(cluster.admin + "/admin/jobs")
    expect(page.locator("button[data-action='clear:job']")).to_be_disabled()
    page.goto(cluster.admin + "/admin/access")
    expect(page.get_by_role("button", name="Mint token")).to_be_disabled()
    # signing out of this one does not touch the operator's session in the other context
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert page.evaluate("() => localStorage.length") == 0
    # the form comes back on the way this tab signed in, also after a reload
    expect(page.get_by_role("tab", name="Access token")).to_have_attribute("aria-selected",
                                                                            "true")
    page.reload()
    expect(page.get_by_role("tab", name="Access token")).to_have_attribute("aria-selected",
                                                                            "true")
    expect(page.get_by_label("Access token")).to_be_visible()
    ctx.close()


def test_tokens_are_listed_by_id_and_revoked_from_the_list(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    page.goto(cluster.admin + "/admin/access")
    page.locator("#mint input[name=label]").fill("browser-listed")
    page.get_by_role("button", name="Mint token").click()
    token = page.locator("#minted-token").input_value()
    assert cluster.api("GET", "/admin/api/me", token=token)[0] == 200
    row = page.locator("#token-list tr", has_text="browser-listed")
    expect(row).to_contain_text("minted (mcp)")
    expect(page.locator("#token-list")).not_to_contain_text(token)  # listed by id only
    row.get_by_role("button", name="Revoke").click()
    page.locator("#confirm-ok").click()
    expect(page.locator("#token-list tr", has_text="browser-listed")).to_contain_text("revoked")
    page.screenshot(path=artifacts / "access-tokens.png", full_page=True)
    assert cluster.api("GET", "/admin/api/me", token=token)[0] == 401


async def _many_sign_ins(admin: str, n: int) -> None:
    """`n` successful break-glass sign-ins: each writes one line to the scheduler's log."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        sem = asyncio.Semaphore(16)

        async def one() -> None:
            async with sem, http.post(admin + "/admin/api/session",
                                      json={"password": BREAKGLASS}) as r:
                assert r.status == 200

        await asyncio.gather(*(one() for _ in range(n)))


def test_the_logs_page_shows_a_gap_after_a_forced_overflow(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    page.goto(cluster.admin + "/admin/logs?source=scheduler&backfill=20")
    box = page.locator(".logbox")
    expect(box.locator(".logline").first).to_be_visible()
    expect(page.locator("#log-state")).to_contain_text("live")
    expect(box.locator("[data-gap]")).to_have_count(0)
    page.locator("#log-pause").click()
    expect(page.locator("#log-state")).to_contain_text("paused")
    # more lines than the scheduler's ring keeps (SVC_ADMIN_LOG_LINES=500 in this module)
    # while this viewer is not reading
    run_async(_many_sign_ins(cluster.admin, 600))
    page.locator("#log-pause").click()
    gap = box.locator("[data-gap]")
    expect(gap).to_have_count(1)
    expect(gap).to_contain_text("dropped")
    expect(page.locator("#log-gaps")).to_contain_text("1 gap")
    expect(box.locator(".logline").last).to_contain_text("admin sign-in")
    page.screenshot(path=artifacts / "logs-gap.png", full_page=True)


def test_usable_on_a_narrow_window(browser: Browser, cluster: AdminCluster,
                                   artifacts: Path) -> None:
    ctx = new_context(browser, 390, 800)
    page = ctx.new_page()
    sign_in_breakglass(page, cluster)
    nav = page.locator("nav#nav")
    expect(nav).to_be_hidden()
    toggle = page.get_by_role("button", name="Menu")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    nav.get_by_role("link", name="Incidents").click()
    expect(page).to_have_url(cluster.admin + "/admin/incidents")
    expect(nav).to_be_hidden()
    # nothing wider than the window but the tables, which scroll inside their own box
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    page.screenshot(path=artifacts / "narrow-incidents.png", full_page=True)
    ctx.close()


def test_the_page_reconnects_by_itself_after_a_scheduler_restart(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    page.goto(cluster.admin + "/admin/operations")
    conn = page.locator("#conn")
    expect(conn).to_have_attribute("data-state", "live")
    cluster.sched.process.kill9()
    expect(conn).to_have_attribute("data-state", "reconnecting")
    cluster.sched.restart()  # same ports, same data: the signed session token survives
    expect(conn).to_have_attribute("data-state", "live", timeout=180_000)
    page.goto(cluster.admin + "/admin/")
    expect(page.locator("[data-card=scheduler]")).to_be_visible()
    wait_until(lambda: cluster.ready_ssps() == {s.ssp_id for s in cluster.ssps}, 180,
               "both SSPs registered again")


def _view(cluster: AdminCluster, key: str, sort: str = "recent") -> dict[str, Any] | None:
    status, body = cluster.api("GET", f"/admin/api/views?sort={sort}&limit=1000")
    assert status == 200, body
    return next((v for v in body["views"] if v["key"] == key), None)


def test_views_show_freshness_least_fresh_first_and_the_detail_follows_writes(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    page.goto(cluster.admin + "/admin/operations")  # a stream open: samplers at live cadence
    cluster.register_view("fa", "SELECT * FROM post WHERE n >= 20", "tab-fa")
    cluster.register_view("fb", "SELECT * FROM post WHERE n >= 30", "tab-fb")
    cluster.write_post("fw1", 35)  # both views change

    def published(key: str) -> Any:
        v = _view(cluster, key)
        return v and v["freshness"]["last_publish_at_ms"]
    wait_until(lambda: published("fa") and published("fb"), 120, "fa and fb published")
    fb_at = published("fb")
    cluster.write_post("fw2", 25)  # only fa changes: fb is now the less fresh
    wait_until(lambda: (published("fa") or 0) > fb_at, 120, "fa published again")
    fb = _view(cluster, "fb", "stale")
    assert fb is not None and fb["freshness"]["served"] is True
    assert fb["freshness"]["since_publish_ms"] >= 0
    assert isinstance(fb["freshness"]["lag_events"], int)
    status, body = cluster.api("GET", "/admin/api/views?sort=freshest")
    assert status == 400 and "stale" in body["message"]

    # events in flight to an SSP rank a view first too: the order is read once none are
    wait_until(lambda: all((_view(cluster, k, "stale") or {}).get("freshness", {})
                           .get("lag_events") == 0 for k in ("fa", "fb")), 60,
               "no event in flight to either view's SSP")
    page.goto(cluster.admin + "/admin/views?sort=stale")
    rows = page.locator("tr[data-view]")
    expect(page.locator("tr[data-view=fa]")).to_be_visible()
    expect(page.locator("tr[data-view=fb]")).to_be_visible()
    order = rows.evaluate_all("rs => rs.map(r => r.dataset.view)")
    # Least fresh first, after the stale, the slow and those with events in flight: on a
    # loaded machine fa's publication p99 may pass the slow mark (250 ms), and a slow view
    # comes before a fresher one. No write follows, so the marks read now are the page's.
    slow = {k: _view(cluster, k, "stale")["slow"] for k in ("fa", "fb")}  # type: ignore[index]
    want = ["fa", "fb"] if slow["fa"] and not slow["fb"] else ["fb", "fa"]
    assert [k for k in order if k in ("fa", "fb")] == want, (order, slow)
    cell = page.locator("tr[data-view=fa] [data-fresh]")
    expect(cell).to_contain_text("published")
    expect(cell).to_contain_text("behind")
    expect(cell).to_have_attribute("data-lag", re.compile(r"^\d+$"))
    page.screenshot(path=artifacts / "views-freshness.png", full_page=True)
    # the detail: its freshness, and live (a write shows without a click or reload)
    page.goto(cluster.admin + "/admin/views/fa")
    fresh = page.locator("[data-card=freshness]")
    expect(fresh).to_contain_text("Last publication")
    expect(fresh.locator("[data-figure=lag]")).to_contain_text("events")
    figure = page.locator("[data-figure=rows]")
    expect(figure).not_to_have_text("–")
    before = int(figure.inner_text().replace(",", ""))
    cluster.write_post("fw3", 45)
    expect(figure).to_have_text(str(before + 1))
    expect(page.locator("#view-updated")).to_contain_text("live")
    page.screenshot(path=artifacts / "view-freshness.png", full_page=True)


def test_ssp_and_operation_pages_are_deep_links(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    sid = cluster.ssps[0].ssp_id
    page.goto(cluster.admin + "/admin/ssps")
    page.locator(f"a[href='/admin/ssps/{sid}']").first.click()
    expect(page).to_have_url(cluster.admin + f"/admin/ssps/{sid}")
    expect(page.get_by_role("heading", name=f"SSP {sid}")).to_be_visible()
    expect(page.locator(f"[data-ssp='{sid}']")).to_contain_text("events")
    page.reload()  # a real route: the same page loads directly
    expect(page.locator(f"[data-ssp='{sid}']")).to_be_visible()
    expect(page.locator("[data-chart=ssp-lag]")).to_be_visible()
    page.screenshot(path=artifacts / "ssp-detail.png", full_page=True)
    # an action from the SSP's page, then its operation's own page
    page.locator(f"button[data-action='reload:{sid}']").click()
    accepted = page.locator("main [role=status]", has_text="operation ")
    expect(accepted).to_be_visible()
    op_id = accepted.inner_text().split("operation ", 1)[1].strip()
    page.goto(cluster.admin + f"/admin/operations/{op_id}")
    expect(page.get_by_role("heading", name=f"Operation {op_id}")).to_be_visible()
    row = page.locator(f"[data-op='{op_id}']")
    expect(row).to_have_attribute("data-status", "done")
    expect(row).to_contain_text("ssp_reload")
    page.reload()
    expect(page.locator(f"[data-op='{op_id}']")).to_have_attribute("data-status", "done")
    page.screenshot(path=artifacts / "operation-detail.png", full_page=True)
    page.goto(cluster.admin + "/admin/operations")
    page.locator(f"tr[data-op='{op_id}'] a").first.click()
    expect(page).to_have_url(cluster.admin + f"/admin/operations/{op_id}")


def test_logs_filter_by_level_and_text_and_download_what_is_shown(
        operator: Page, cluster: AdminCluster, artifacts: Path, tmp_path: Path) -> None:
    page = operator
    run_async(_many_sign_ins(cluster.admin, 3))
    page.goto(cluster.admin + "/admin/logs?source=scheduler&backfill=300")
    box = page.locator(".logbox")
    expect(box.locator(".logline[data-level=info]").first).to_be_visible()
    page.locator("#log-level").select_option("warning")
    expect(box.locator(".logline[data-level=info]:visible")).to_have_count(0)
    expect(page.locator("#log-shown")).to_contain_text("lines match")
    page.locator("#log-level").select_option("debug")
    page.locator("#log-search").fill("admin sign-in")
    shown = box.locator(".logline:visible")
    expect(shown.first).to_be_visible()
    texts = shown.all_inner_texts()
    assert texts and all("admin sign-in" in t.lower() for t in texts), texts[:5]
    assert box.locator(".logline:not(:visible)").count() > 0  # the others are hidden
    n = int(page.locator("#log-shown").get_attribute("data-shown") or "0")
    page.locator("#log-pause").click()  # the shown set stays put while it downloads
    n = int(page.locator("#log-shown").get_attribute("data-shown") or "0")
    with page.expect_download() as dl:
        page.locator("#log-download").click()
    path = tmp_path / "shown.log"
    dl.value.save_as(path)
    lines = [x for x in path.read_text().splitlines() if x.strip()]
    assert len(lines) == n and all("admin sign-in" in x.lower() for x in lines), lines[:5]
    page.screenshot(path=artifacts / "logs-filtered.png", full_page=True)
    page.locator("#log-pause").click()


def test_jobs_selected_are_killed_together_after_a_confirmation(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    answers: list[int] = []
    page.on("response", lambda r: answers.append(r.status)
            if r.request.method == "POST" and r.url.endswith("/kill") else None)
    page.goto(cluster.admin + "/admin/jobs")
    bulk = page.locator("button[data-action=bulk-kill]")
    expect(bulk).to_be_disabled()
    for job in ("job:j1", "job:j2"):
        page.get_by_label(f"Select job {job}").check()
    expect(bulk).to_have_text("Kill selected (2)")
    expect(page.locator("button[data-action=bulk-retry]")).to_have_text("Retry selected (2)")
    bulk.click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Kill 2 jobs?")
    expect(dialog).to_contain_text("job:j1, job:j2")
    page.locator("#confirm-cancel").click()  # dismissed: nothing is asked of the cluster
    expect(dialog).to_be_hidden()
    assert answers == []
    bulk.click()
    page.locator("#confirm-ok").click()
    result = page.locator("[data-bulk-result][data-bulk-done]")
    expect(result).to_be_visible()
    assert len(answers) == 2, answers  # one kill per selected job
    ok = sum(1 for a in answers if a < 300)
    expect(result).to_contain_text(f"killed {ok} of 2")
    expect(result.locator("[data-refused]")).to_have_count(2 - ok)
    page.screenshot(path=artifacts / "jobs-bulk-kill.png", full_page=True)


def test_a_view_is_unregistered_from_its_page_after_a_confirmation(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    cluster.register_view("uv1", "SELECT * FROM post WHERE n >= 8", "tab-u1")
    wait_until(lambda: _view(cluster, "uv1") is not None, 120, "uv1 listed")
    page.goto(cluster.admin + "/admin/views/uv1")
    expect(page.locator("pre[data-query]")).to_have_text("SELECT * FROM post WHERE n >= 8")
    page.locator("button[data-action=unregister]").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Unregister view query:uv1?")
    page.locator("#confirm-cancel").click()
    expect(dialog).to_be_hidden()
    assert cluster.api("GET", "/admin/api/views/uv1")[0] == 200
    page.locator("button[data-action=unregister]").click()
    page.locator("#confirm-ok").click()
    expect(page).to_have_url(cluster.admin + "/admin/views?unregistered=uv1")
    expect(page.locator("[data-unregistered=uv1]")).to_contain_text("query:uv1")
    expect(page.locator("tr[data-view]").first).to_be_visible()
    expect(page.locator("tr[data-view=uv1]")).to_have_count(0)
    assert cluster.api("GET", "/admin/api/views/uv1")[0] == 404
    assert cluster.api("DELETE", "/admin/api/views/uv1")[0] == 404
    read = cluster.mint("read", "unregister-reader")
    assert cluster.api("DELETE", "/admin/api/views/fa", token=read)[0] == 403
    # the next samples agree: it stays gone
    wait_until(lambda: _view(cluster, "uv1") is None and cluster.api(
        "GET", "/admin/api/presence")[1]["sampled_at_ms"] > time.time() * 1000 - 5000,
        60, "a fresh sample without uv1")
    assert _view(cluster, "uv1") is None
    page.screenshot(path=artifacts / "view-unregistered.png", full_page=True)


def test_charts_come_from_the_service_history_and_survive_a_reload(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator

    def history() -> Any:
        status, body = cluster.api("GET", "/admin/api/history")
        assert status == 200, body
        return [x for x in body["samples"] if x["ssps"]]
    wait_until(lambda: len(history()) >= 2, 60, "two history samples with SSPs")
    body = cluster.api("GET", "/admin/api/history?range=day")[1]
    assert body["step_secs"] == 60 and body["capacity"] == 1440 and body["samples"]
    assert cluster.api("GET", "/admin/api/history?range=week")[0] == 400
    oldest = history()[0]["t"]
    opened = int(time.time() * 1000)
    page.goto(cluster.admin + "/admin/")
    lag = page.locator("[data-chart=lag]")
    # from the first render after the history arrived: points older than this page
    expect(lag).to_have_attribute("data-oldest", re.compile(r"^\d+$"))
    assert int(lag.get_attribute("data-oldest") or "0") <= min(oldest, opened)
    page.reload()
    expect(lag).to_have_attribute("data-oldest", re.compile(r"^\d+$"))
    assert int(lag.get_attribute("data-oldest") or "0") < opened
    page.locator("#history-range").select_option("day")
    expect(page.locator("[data-chart=throughput]")).to_be_visible()
    expect(page.locator("main")).to_contain_text("last day")
    # not linked to a platform: a short note, no error
    expect(page.locator("[data-card=cloud] [data-linked=false]")).to_contain_text("Not linked")
    expect(page.locator("main .error, main [role=alert]")).to_have_count(0)
    page.screenshot(path=artifacts / "overview-history.png", full_page=True)
