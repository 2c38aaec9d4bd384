"""The Backups page in a real browser (Debian's chromium via Playwright) against a real cluster
with object storage (a local ``rclone serve s3``): back up, restore from the catalog, and the
restore's stage followed live to done; the written rows are gone again afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.test_dashboard import LONG, new_context, sign_in_breakglass
from tests.support.admin_cluster import AdminCluster, admin_cluster, run_async, wait_until
from tests.support.objstore import S3Server, running_s3
from tests.support.procs import DbHost

pytestmark = pytest.mark.slow
expect.set_options(timeout=LONG)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_s3(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="module")
def cluster(host: DbHost, s3: S3Server, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[AdminCluster]:
    # The restore waits at its replica stage until the test lets it go on (the failpoint of
    # backup.service), so the page is seen showing a stage between queued and done.
    with admin_cluster(host, tmp_path_factory.mktemp("dash-bk"), "dbk_",
                       SVC_BACKUP_PAUSE_AT="replica", **s3.env()) as c:
        yield c


@pytest.fixture(scope="module")
def operator(browser: Browser, cluster: AdminCluster) -> Iterator[Page]:
    ctx = new_context(browser)
    page = ctx.new_page()
    sign_in_breakglass(page, cluster)
    yield page
    ctx.close()


async def _posts(c: AdminCluster) -> int:
    from tests.support.ssp_stack import root_db

    root = await root_db(c.host, c.ns, c.ns)
    try:
        rows = await root.query_one("SELECT count() AS n FROM post GROUP ALL")
        return int(rows[0]["n"]) if rows else 0
    finally:
        await root.close()


async def _write(c: AdminCluster) -> None:
    from tests.support.ssp_stack import app_write, root_db

    root = await root_db(c.host, c.ns, c.ns)
    try:
        await app_write(root, "CREATE post:after_backup SET owner = user:alice, title = 'x', n = 99")
    finally:
        await root.close()


def test_backup_then_restore_with_the_stage_shown_live(
        operator: Page, cluster: AdminCluster, artifacts: Path) -> None:
    page = operator
    page.goto(cluster.admin + "/admin/backups")
    expect(page.locator("div.page[data-page=backups]")).to_be_visible()
    expect(page.locator("main")).to_contain_text("reachable")
    page.locator("#backup-name").fill("from the browser")
    page.locator("[data-action=backup-create]").click()
    # the answer names its operation (a link to the operation's page) and the backup id
    accepted = page.locator("main [data-operation]")
    expect(accepted).to_contain_text("operation ")
    expect(page.locator("main [role=status]", has=page.locator("[data-operation]"))) \
        .to_contain_text("backup ")
    row = page.locator("tr[data-backup]").filter(has_text="from the browser")
    expect(row).to_have_count(1)
    expect(page.locator("tr[data-local-backup][data-status=done]")).to_have_count(1)
    before = run_async(_posts(cluster))
    run_async(_write(cluster))
    assert run_async(_posts(cluster)) == before + 1

    row.locator("button", has_text="Restore").click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("Writes made since the backup are lost")
    expect(page.locator("#confirm-cancel")).to_be_focused()
    page.locator("#confirm-ok").click()
    stages = page.locator("ol[data-restore-stage]").first
    # The page follows the stage by itself (it polls every second while a restore runs).
    expect(stages).to_have_attribute("data-restore-stage", "replica")
    expect(stages.locator("li[data-stage=replica]")).to_have_attribute("data-state", "current")
    expect(stages.locator("li[data-state=done]")).to_have_count(3)  # queued, running, main_db
    page.screenshot(path=artifacts / "backups-restoring.png", full_page=True)
    (cluster.sched.data / "backup-work" / "continue").touch()
    expect(stages).to_have_attribute("data-restore-stage", "done")
    expect(stages.locator("li[data-state=done]")).to_have_count(5)
    page.screenshot(path=artifacts / "backups.png", full_page=True)
    assert run_async(_posts(cluster)) == before
    wait_until(lambda: cluster.ready_ssps() == {s.ssp_id for s in cluster.ssps}, 180,
               "both SSPs ready after the restore")
