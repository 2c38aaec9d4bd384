"""The TypeScript client in a real browser (Debian's chromium via Playwright): bundled for the
browser by `npm run bundle` (rolldown, declared in clients/ts/package.json), loaded by a page
that signs in as a record user, opens a live view by writing its `_00_query` row (the page
holds no service secret; the SSP has one) and shows each step. A write made by another
process appears on the page.

The page's origin is not the service's: the client checks the SSP's `/health` with a
cross-origin `fetch`, which the browser allows because the service answers that route (and
only that one) with `Access-Control-Allow-Origin: *`. Were it refused, every check would fail
and the view would show `gap`; the test asserts it never does.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser
from surrealdb import AsyncSurreal

from tests.integration.test_viewclient import SCHEMA
from tests.support.admin_cluster import run_async
from tests.support.procs import ROOT, DbHost, ManagedProcess
from tests.support.ssp_stack import apply_schema, root_db, start_ssp, unique_db

TS = ROOT / "clients" / "ts"
BUNDLE = TS / "dist" / "browser" / "viewclient.js"
SECRET = "browser-test-service-secret-91c2"
LONG = 60_000  # ms

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>live top 10</title></head>
<body data-status="connecting"><ol id="rows"></ol><pre id="error"></pre>
<script type="module">
import { connect } from "/viewclient.js";
const cfg = JSON.parse(decodeURIComponent(location.hash.slice(1)));
try {
  const client = await connect(cfg.url, cfg.ns, cfg.db,
    { access: "account", variables: { name: "pia", pass: "pia-pw" } },
    { serviceUrl: cfg.service, healthIntervalMs: 500 });
  const view = await client.view(
    "SELECT id, title, score FROM thread ORDER BY score DESC LIMIT 10", {});
  window.statuses = [];
  const show = (s) => {
    document.body.dataset.status = s.status;
    window.statuses.push(s.status);
    const ol = document.getElementById("rows");
    ol.replaceChildren(...s.rows.map((r) => {
      const li = document.createElement("li");
      li.textContent = `${r.title} (${r.score})`;
      return li;
    }));
  };
  show({ status: view.status, rows: view.rows });
  view.subscribe(show);
  window.viewId = view.id;
} catch (e) {
  document.getElementById("error").textContent = String(e);
}
</script></body></html>
"""


@dataclass
class Site:
    url: str
    service: str
    ns: str
    db: str
    host: DbHost
    ssp: ManagedProcess


def _serve() -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if self.path == "/viewclient.js":
                self._send(200, "text/javascript", BUNDLE.read_bytes())
            elif self.path.split("#")[0] in ("/", "/index.html"):
                self._send(200, "text/html", PAGE.encode())
            else:
                self._send(404, "text/plain", b"not found")

        def _send(self, status: int, ctype: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def _prepare(host: DbHost, ns: str, db: str) -> None:
    root = await root_db(host, ns, db)
    try:
        await root.query(SCHEMA)  # the Python client's tests' app: users, posts, threads
        await root.query("CREATE thread:t1 SET title = 'first', score = 1")
    finally:
        await root.close()
    probe = AsyncSurreal(host.ws_url)
    try:
        await probe.signup({"namespace": ns, "database": db, "access": "account",
                            "variables": {"name": "pia", "pass": "pia-pw"}})
    finally:
        await probe.close()


async def _write(host: DbHost, ns: str, db: str, sql: str) -> None:
    root = await root_db(host, ns, db)
    try:
        await root.query(sql)
    finally:
        await root.close()


@pytest.fixture(scope="module")
def site(host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    built = subprocess.run(["npm", "run", "--silent", "bundle"], cwd=TS, env=env,
                           capture_output=True, text=True, timeout=180, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    tmp = tmp_path_factory.mktemp("tsbrowser")
    ns, db = unique_db()
    run_async(_prepare(host, ns, db))
    apply_schema(host, ns, db)
    ssp = start_ssp(tmp, host, ns, db, SVC_AUTH_SECRET=SECRET)
    server = _serve()
    try:
        ssp.process.wait_http(f"http://127.0.0.1:{ssp.port}/health", timeout=60)
        yield Site(f"http://127.0.0.1:{server.server_address[1]}", f"http://127.0.0.1:{ssp.port}",
                   ns, db, host, ssp.process)
    finally:
        server.shutdown()
        ssp.process.stop(timeout=40)


def test_a_page_opens_a_live_view_and_sees_a_write_appear(browser: Browser, site: Site,
                                                          artifacts: Path) -> None:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        cfg = {"url": site.host.ws_url, "ns": site.ns, "db": site.db, "service": site.service}
        page.goto(f"{site.url}/#" + json.dumps(cfg).replace(" ", ""))
        page.wait_for_function("document.body.dataset.status === 'ready' || "
                               "document.getElementById('error').textContent !== ''",
                               timeout=LONG)
        assert page.inner_text("#error") == "", page.inner_text("#error")
        assert page.inner_text("#rows").split("\n") == ["first (1)"], errors
        run_async(_write(site.host, site.ns, site.db,
                           "CREATE thread:t2 SET title = 'second', score = 5"))
        page.wait_for_function("document.getElementById('rows').textContent"
                               ".startsWith('second (5)')", timeout=LONG)
        assert page.inner_text("#rows").split("\n") == ["second (5)", "first (1)"]
        page.screenshot(path=str(artifacts / "ts_client_browser.png"))
        # Health checks ran every 500 ms against the other origin and none failed.
        assert "gap" not in page.evaluate("window.statuses"), page.evaluate("window.statuses")
        assert page.evaluate(f"fetch({site.service + '/health'!r}).then((r) => r.status)") == 200
        # The view is the page's own row, with the page's user as its identity.
        view_id = page.evaluate("window.viewId")
        assert view_id.startswith("query:c")
        assert errors == []
    finally:
        page.close()
