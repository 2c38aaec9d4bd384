"""The dashboard routes (`scheduler.admin.dashboard`) on a bare Falcon app: files of the bundle,
index.html for deep links, 304 on a matching ETag, nothing outside the bundle, the placeholder
without one, and the headers every page carries."""

from __future__ import annotations

from pathlib import Path

import falcon.asgi
import falcon.testing
import pytest

from scheduler.admin import dashboard
from scheduler.config import DEFAULT_ADMIN_DIR


def client(directory: Path | None) -> falcon.testing.TestClient:
    app = falcon.asgi.App()
    dashboard.register(app, directory)
    return falcon.testing.TestClient(app)


def test_the_shipped_bundle_serves_files_and_index_for_deep_links() -> None:
    c = client(DEFAULT_ADMIN_DIR)
    r = c.simulate_get("/admin/js/main.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    assert r.headers["cache-control"] == "no-cache"
    index = (DEFAULT_ADMIN_DIR / "index.html").read_bytes()
    for deep in ("/admin", "/admin/", "/admin/views/some-key", "/admin/incidents/inc-1?x=1"):
        r = c.simulate_get(deep)
        assert r.status_code == 200 and r.content == index, deep
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-content-type-options"] == "nosniff"
    r = c.simulate_get("/admin/css/app.css")
    etag = r.headers["etag"]
    again = c.simulate_get("/admin/css/app.css", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert c.simulate_get("/").status_code == 301
    assert c.simulate_get("/admin/api/nope").status_code == 404


@pytest.mark.parametrize("path", ["/admin/../pyproject.toml", "/admin/%2e%2e/pyproject.toml",
                                  "/admin/js/../../scheduler/config.py"])
def test_paths_cannot_leave_the_bundle(path: str) -> None:
    r = client(DEFAULT_ADMIN_DIR).simulate_get(path)
    assert r.status_code in (200, 404)
    assert b"[project]" not in r.content and b"DEFAULT_ADMIN_DIR" not in r.content


def test_without_a_bundle_a_placeholder_says_how_to_get_one(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture
                                                             ) -> None:
    for directory in (None, tmp_path):
        r = client(directory).simulate_get("/admin/views/x")
        assert r.status_code == 200 and b"SVC_ADMIN_DIR" in r.content
    assert sum("no admin dashboard bundle" in m for m in caplog.messages) == 2
