"""The Workflow runs and Schedules pages in a real browser (Debian's chromium via Playwright)
against a real stack: a database host, `svc-scheduler` serving the shipped dashboard and running
the workflow engine, one SSP running the job tables, and a backend the jobs call
(`tests.support.workflow_stack`). One stack and one browser for the module; definitions are
applied with `svc workflows apply`, runs are started by triggering schedules. A screenshot of
each page goes to tests/artifacts/.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.support.admin_cluster import run_async, wait_until
from tests.support.admin_stack import BREAKGLASS
from tests.support.procs import DbHost
from tests.support.workflow_stack import WorkflowStack, prepare, start_stack

pytestmark = pytest.mark.slow

LONG = 120_000  # ms: generous, the machine is shared; conditions are waited on, not slept
NEVER = "0 0 1 1 *"  # fires on its own once a year: the tests trigger the schedules
expect.set_options(timeout=LONG)


def step(*deps: str, path: str = "/ok", **extra: Any) -> dict[str, Any]:
    return {"table": "job", "path": path, "depends_on": list(deps), **extra}


WORKFLOWS = {
    "diamond": {"steps": {"a": step(), "b": step("a"), "c": step("a"), "d": step("b", "c")}},
    # b answers 503 until the backend's toggle is set: fails at once (no retry), c is doomed
    "flip": {"steps": {"a": step(), "b": step("a", path="/toggle", retries=0),
                       "c": step("b")}},
    "held": {"steps": {"h": step(path="/hold"), "after": step("h")}},
}
SCHEDULES = {
    "diamond_now": {"cron": NEVER, "workflow": "diamond"},
    "flip_now": {"cron": NEVER, "workflow": "flip"},
    "held_now": {"cron": NEVER, "workflow": "held", "concurrency": "allow"},
    "flaky": {"cron": NEVER, "table": "job", "path": "/fail", "retries": 0,
              "quarantine_after": 1},
}


@pytest.fixture(scope="module")
def stack(shared_db_host: DbHost, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[WorkflowStack]:
    ns = "wfdash_" + uuid.uuid4().hex[:8]
    run_async(prepare(shared_db_host, ns))  # Playwright keeps a loop in this thread
    s = start_stack(tmp_path_factory.mktemp("wfdash"), shared_db_host, ns)
    try:
        s.apply(workflows=WORKFLOWS, schedules=SCHEDULES)
        wait_until(lambda: len(s.api("GET", "/schedules")[1]["schedules"]) == len(SCHEDULES),
                   60, "the schedules loaded by the engine")
        yield s
    finally:
        s.backend.release()
        s.stop()


def new_context(browser: Browser) -> BrowserContext:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(LONG)
    return ctx


def errors_of(page: Page) -> list[str]:
    errs: list[str] = []
    page.on("pageerror", lambda e: errs.append(str(e)))
    page.on("console", lambda m: errs.append(m.text) if m.type == "error" else None)
    return errs


@pytest.fixture(scope="module")
def operator(browser: Browser, stack: WorkflowStack) -> Iterator[Page]:
    """A break-glass session in its own browser context."""
    ctx = new_context(browser)
    page = ctx.new_page()
    page.goto(stack.sched.admin + "/admin/")
    page.get_by_role("tab", name="Break-glass").click()
    page.get_by_label("Break-glass password").fill(BREAKGLASS)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("[data-card=scheduler]")).to_be_visible()
    yield page
    ctx.close()


def trigger_run(stack: WorkflowStack, schedule: str) -> str:
    """Trigger `schedule` through the API; the key of the run its fire started."""
    def keys() -> set[str]:
        status, body = stack.api("GET", f"/workflows/runs?schedule={schedule}&limit=500")
        assert status == 200, body
        return {r["key"] for r in body["runs"]}
    before = keys()
    status, body = stack.api("POST", f"/schedules/{schedule}/trigger")
    assert status == 200, body
    fresh = wait_until(lambda: keys() - before, 60, f"a run of {schedule}")
    return str(next(iter(fresh)))


def run_status(stack: WorkflowStack, key: str) -> dict[str, Any]:
    status, body = stack.api("GET", f"/workflows/runs/{key}")
    assert status == 200, body
    return body["run"]  # type: ignore[no-any-return]


def wait_run(stack: WorkflowStack, key: str, *statuses: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        run = run_status(stack, key)
        return run if run["status"] in statuses else None
    return wait_until(reached, 90, f"run {key} in {statuses}")  # type: ignore[no-any-return]


def test_the_runs_list_filters_and_the_detail_draws_the_step_dag(
        operator: Page, stack: WorkflowStack, artifacts: Path) -> None:
    page = operator
    errs = errors_of(page)
    key = trigger_run(stack, "diamond_now")
    wait_run(stack, key, "completed")
    page.goto(stack.sched.admin + "/admin/workflows")
    row = page.locator(f"tr[data-run='{key}']")
    expect(row).to_have_attribute("data-status", "completed")
    expect(row.locator(".badge.s-ok")).to_have_text("completed")  # the state's colour
    expect(row).to_contain_text("4 completed")
    # times are relative ("… ago"), with the absolute time in the title
    created = row.locator("time[data-at]").first.text_content() or ""
    assert created == "just now" or created.endswith(" ago"), created
    # a filter is sent to the API: no failed diamond run, so the row goes
    page.locator("form.filters input[name=name]").fill("diamond")
    page.locator("form.filters select[name=status]").select_option("failed")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(stack.sched.admin + "/admin/workflows?name=diamond&status=failed")
    expect(page.locator("main .empty")).to_have_text("No workflow run matches.")
    page.locator("form.filters select[name=status]").select_option("completed")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator(f"tr[data-run='{key}']")).to_be_visible()
    page.screenshot(path=artifacts / "workflows-list.png", full_page=True)
    # the detail: one node per step coloured by its state, one edge per dependency
    page.locator(f"tr[data-run='{key}']").get_by_role("link", name=key).click()
    expect(page).to_have_url(stack.sched.admin + f"/admin/workflows/{key}")
    dag = page.locator("svg.dag")
    expect(dag.locator("g.dag-node")).to_have_count(4)
    for name in "abcd":
        node = dag.locator(f"g.dag-node[data-step={name}]")
        expect(node).to_have_attribute("data-status", "completed")
        expect(node).to_have_class("dag-node s-ok")
    edges = sorted((e.get_attribute("data-from"), e.get_attribute("data-to"))
                   for e in dag.locator("path.dag-edge").all())
    assert edges == [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]
    # d sits right of b and c, which sit right of a (columns by depth)
    xs = {n: float(dag.locator(f"g.dag-node[data-step={n}] rect").get_attribute("x") or 0)
          for n in "abcd"}
    assert xs["a"] < xs["b"] == xs["c"] < xs["d"], xs
    # each node links to its step's job
    expect(dag.locator("a").first).to_have_attribute("href", f"/admin/jobs/job%3Awf_{key}_a")
    expect(page.locator("tr[data-step=a] td").nth(5)).to_have_text(f"job:wf_{key}_a")
    page.screenshot(path=artifacts / "workflow-run-dag.png", full_page=True)
    page.get_by_label("Hide completed steps").check()
    expect(dag.locator("g.dag-node")).to_have_count(0)
    assert "completed steps hidden" in (dag.get_attribute("aria-label") or "")
    page.get_by_label("Hide completed steps").uncheck()
    expect(page.locator("svg.dag g.dag-node")).to_have_count(4)
    assert not errs, errs


def test_a_failed_run_is_retried_then_rerun_from_its_page(
        operator: Page, stack: WorkflowStack, artifacts: Path) -> None:
    page = operator
    stack.backend.set_toggle(False)
    key = trigger_run(stack, "flip_now")
    wait_run(stack, key, "failed")
    page.goto(stack.sched.admin + f"/admin/workflows/{key}")
    dag = page.locator("svg.dag")
    expect(page.locator("[data-run-status]")).to_have_attribute("data-run-status", "failed")
    expect(dag.locator("g.dag-node[data-step=a]")).to_have_attribute("data-status", "completed")
    expect(dag.locator("g.dag-node[data-step=b]")).to_have_class("dag-node s-bad")
    expect(dag.locator("g.dag-node[data-step=c]")).to_have_attribute("data-status", "skipped")
    expect(page.locator("tr[data-step=c]")).to_contain_text("upstream_failed")
    page.screenshot(path=artifacts / "workflow-run-failed.png", full_page=True)
    stack.backend.set_toggle(True)
    page.locator("button[data-action=retry]").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("1 run")
    expect(dialog).to_contain_text("1 completed steps are kept")
    page.locator("#confirm-ok").click()
    expect(page.locator("[data-run-status]")).to_have_attribute("data-run-status", "completed")
    expect(dag.locator("g.dag-node[data-step=c]")).to_have_attribute("data-status", "completed")
    run = run_status(stack, key)
    assert run["retry_count"] == 1
    steps = {s["name"]: s for s in run["steps"]}
    assert steps["a"]["job"] == f"job:wf_{key}_a"  # kept, not run again
    assert steps["b"]["job"] == f"job:wf_{key}_b_r1"
    # rerun: a new run of the same DAG, linked back to this one
    page.locator("button[data-action=rerun]").click()
    expect(page).not_to_have_url(stack.sched.admin + f"/admin/workflows/{key}")
    expect(page.locator(f"a[data-rerun-of='{key}']")).to_be_visible()
    expect(page.locator("[data-run-status]")).to_have_attribute("data-run-status", "completed")
    page.locator(f"a[data-rerun-of='{key}']").click()
    expect(page).to_have_url(stack.sched.admin + f"/admin/workflows/{key}")


def test_bulk_cancel_states_scope_and_count_and_kills_the_selected_runs(
        operator: Page, stack: WorkflowStack, artifacts: Path) -> None:
    page = operator
    stack.backend.hold()
    keys = [trigger_run(stack, "held_now") for _ in range(3)]
    for k in keys:
        wait_until(lambda k=k: stack.backend.calls_of(f"job:wf_{k}_h"), 60, f"{k}'s held call")
    page.goto(stack.sched.admin + "/admin/workflows?status=running")
    bulk = page.locator("button[data-action=bulk-cancel]")
    for k in keys:
        expect(page.locator(f"tr[data-run='{k}']")).to_have_attribute("data-status", "running")
    expect(bulk).to_be_disabled()  # nothing selected yet
    for k in keys[:2]:
        page.get_by_label(f"Select run {k}").check()
    expect(bulk).to_have_text("Cancel selected (2)")
    expect(bulk).to_be_enabled()
    bulk.click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Cancel 2 workflow runs?")
    for k in keys[:2]:
        expect(dialog).to_contain_text(k)
    expect(dialog).not_to_contain_text(keys[2])
    expect(page.locator("#confirm-cancel")).to_be_focused()  # the safe choice is the default
    page.screenshot(path=artifacts / "workflows-bulk-cancel.png", full_page=True)
    page.locator("#confirm-cancel").click()  # dismissed: nothing is cancelled
    expect(dialog).to_be_hidden()
    assert all(run_status(stack, k)["status"] == "running" for k in keys)
    cancels: list[str] = []
    page.on("request", lambda r: cancels.append(r.url) if r.method == "POST"
            and "/cancel" in r.url else None)
    bulk.click()
    page.locator("#confirm-ok").click()
    result = page.locator("[data-bulk-result][data-bulk-done]")
    expect(result).to_contain_text("cancelled 2 of 2")
    # the whole selection in ONE request (the route answers per run)
    assert cancels == [stack.sched.admin + "/admin/api/workflows/runs/cancel"], cancels
    for k in keys[:2]:
        wait_run(stack, k, "killed")
    # the bulk route itself: bad input is a 400 naming it, each id answers on its own
    for bad in ({}, {"ids": []}, {"ids": "x"}, {"ids": [1]}, {"ids": [keys[0], keys[0]]},
                {"ids": ["r"] * 201}):
        status, body = stack.api("POST", "/workflows/runs/cancel", bad)
        assert status == 400 and "ids" in body["message"], (bad, status, body)
    status, body = stack.api("POST", "/workflows/runs/cancel", {"ids": [keys[0], "no-such-run"]})
    assert status == 200 and body["total"] == 2 and body["cancelled"] == 0, body
    assert [(r["id"], r["ok"], r["status"]) for r in body["results"]] == \
        [(keys[0], False, 409), ("no-such-run", False, 404)], body
    page.goto(stack.sched.admin + "/admin/workflows?name=held")
    for k in keys[:2]:
        row = page.locator(f"tr[data-run='{k}']")
        expect(row).to_have_attribute("data-status", "killed")
        expect(row.locator(".badge.s-special")).to_have_text("killed")
    expect(page.locator(f"tr[data-run='{keys[2]}']")).to_have_attribute("data-status", "running")
    # the third from its own page: cancel asks first, naming the run
    page.goto(stack.sched.admin + f"/admin/workflows/{keys[2]}")
    page.locator("button[data-action=cancel]").click()
    expect(dialog).to_contain_text(f"Cancels 1 run ({keys[2]}")
    page.locator("#confirm-ok").click()
    expect(page.locator("[data-run-status]")).to_have_attribute("data-run-status", "killed")
    expect(page.locator("svg.dag g.dag-node[data-step=h]")).to_have_attribute("data-status",
                                                                              "killed")
    stack.backend.release()


def test_schedules_pause_resume_trigger_release_and_the_outcome_chart(
        operator: Page, stack: WorkflowStack, artifacts: Path) -> None:
    page = operator
    errs = errors_of(page)
    # outcomes to chart: one diamond success, one flaky failure (which quarantines it)
    wait_run(stack, trigger_run(stack, "diamond_now"), "completed")
    status, body = stack.api("POST", "/schedules/flaky/trigger")
    assert status == 200, body
    wait_until(lambda: stack.api("GET", "/schedules/flaky")[1]["schedule"]["quarantined"], 60,
               "flaky quarantined")
    page.goto(stack.sched.admin + "/admin/schedules")
    row = page.locator("tr[data-schedule=diamond_now]")
    expect(row).to_have_attribute("data-state", "active")
    expect(page.locator("tr[data-schedule=flaky]")).to_have_attribute("data-state", "quarantined")
    chart = page.locator("[data-chart=schedule-outcomes] svg")
    expect(chart).to_be_visible()
    diamond_bar = chart.locator("g[data-bar=diamond_now]")
    assert int(diamond_bar.get_attribute("data-success") or 0) >= 1
    expect(diamond_bar.locator("rect.o-success")).to_have_count(1)
    expect(chart.locator("g[data-bar=flaky]")).to_have_attribute("data-failure", "1")
    expect(chart.locator("g[data-bar=flaky] rect.o-failure")).to_have_count(1)
    page.screenshot(path=artifacts / "schedules.png", full_page=True)
    # pause asks first and says what it stops; resume does not ask
    row.locator("button[data-action='pause:diamond_now']").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Stops the fires of 1 schedule (diamond_now")
    page.locator("#confirm-ok").click()
    expect(row).to_have_attribute("data-state", "paused")
    assert stack.api("GET", "/schedules/diamond_now")[1]["schedule"]["paused"] is True
    # a paused schedule refuses a trigger: the refusal is shown where it happened
    row.locator("button[data-action='trigger:diamond_now']").click()
    expect(page.locator("main [role=alert]")).to_contain_text("paused")
    row.locator("button[data-action='resume:diamond_now']").click()
    expect(row).to_have_attribute("data-state", "active")
    before = len(stack.api("GET", "/workflows/runs?schedule=diamond_now")[1]["runs"])
    row.locator("button[data-action='trigger:diamond_now']").click()
    wait_until(lambda: len(stack.api("GET", "/workflows/runs?schedule=diamond_now")[1]["runs"])
               > before, 60, "the triggered run")
    # release lifts the quarantine after a confirmation
    flaky = page.locator("tr[data-schedule=flaky]")
    flaky.locator("button[data-action='release:flaky']").click()
    expect(dialog).to_contain_text("Lets 1 schedule (flaky) fire again")
    page.locator("#confirm-ok").click()
    expect(flaky).to_have_attribute("data-state", "active")
    # the detail: next fires, recent fires, outcomes per day
    page.goto(stack.sched.admin + "/admin/schedules/diamond_now")
    expect(page.locator("ol[data-next-fires='5'] li")).to_have_count(5)
    fires = page.locator("tr[data-fire]")
    expect(fires.first).to_be_visible()
    assert fires.count() >= 2
    days = page.locator("[data-chart=schedule-days] svg g[data-bar]")
    expect(days.first).to_be_visible()
    assert sum(int(d.get_attribute("data-success") or 0) for d in days.all()) >= 2
    page.screenshot(path=artifacts / "schedule-detail.png", full_page=True)
    assert not [e for e in errs if "409" not in e], errs  # the paused trigger's 409 is expected


def test_a_read_session_has_every_workflow_control_disabled_with_the_reason(
        browser: Browser, stack: WorkflowStack, artifacts: Path) -> None:
    status, body = stack.api("POST", "/tokens", {"label": "wf-reader", "scope": "read",
                                                 "ttl_days": 1})
    assert status == 201, body
    key = trigger_run(stack, "diamond_now")
    wait_run(stack, key, "completed")
    ctx = new_context(browser)
    page = ctx.new_page()
    page.goto(stack.sched.admin + "/admin/")
    page.get_by_role("tab", name="Access token").click()
    page.get_by_label("Access token").fill(body["token"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("[data-scope=read]")).to_have_text("read-only")
    reason = "Read-only session: this needs a full-scope sign-in or token"
    page.goto(stack.sched.admin + "/admin/workflows")
    expect(page.locator(f"tr[data-run='{key}']")).to_be_visible()
    for action in ("bulk-cancel", "select-running"):
        button = page.locator(f"button[data-action={action}]")
        expect(button).to_be_disabled()
        expect(button).to_have_attribute("title", reason)
    expect(page.locator("[data-readonly]")).to_contain_text("Read-only session")
    page.goto(stack.sched.admin + f"/admin/workflows/{key}")
    expect(page.locator("svg.dag g.dag-node")).to_have_count(4)  # reading works
    rerun = page.locator("button[data-action=rerun]")
    expect(rerun).to_be_disabled()
    expect(rerun).to_have_attribute("title", reason)
    page.goto(stack.sched.admin + "/admin/schedules")
    buttons = page.locator("main button[data-action]")
    expect(buttons.first).to_be_visible()
    assert buttons.count() >= 2 * len(SCHEDULES)
    for i in range(buttons.count()):
        expect(buttons.nth(i)).to_be_disabled()
        expect(buttons.nth(i)).to_have_attribute("title", reason)
    page.screenshot(path=artifacts / "schedules-read-only.png", full_page=True)
    ctx.close()
