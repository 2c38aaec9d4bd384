"""The dashboard routes outside ``/admin/api``: ``GET /`` and the bundle at ``/admin``.

``GET /`` answers 301 to ``/admin/``. ``/admin`` and everything under it (but ``/admin/api``)
serves the built dashboard from ``SVC_ADMIN_DIR``: a path naming a file of the bundle gets that
file; any other path gets ``index.html`` (the dashboard routes deep links itself). Paths
cannot leave the bundle directory. Without a bundle (no ``SVC_ADMIN_DIR``, or no
``index.html`` in it) the scheduler logs one warning at start and serves a placeholder page
that says how to get the dashboard; the JSON API works either way.
"""

from __future__ import annotations

import html
import logging
import mimetypes
from pathlib import Path
from typing import Any

import falcon
import falcon.asgi

from scheduler.admin.errors import NotFound

log = logging.getLogger("scheduler.admin.dashboard")

__all__ = ["Dashboard", "Root"]

PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>surreal-views admin</title></head>
<body style="font-family: sans-serif; max-width: 46em; margin: 3em auto; line-height: 1.5">
<h1>Admin dashboard not installed</h1>
<p>This scheduler serves the admin API at <code>/admin/api</code>, but no dashboard bundle
was found{where}.</p>
<p>To get the dashboard: build it (or unpack a release bundle) into a directory holding
<code>index.html</code>, set <code>SVC_ADMIN_DIR</code> to that directory and restart the
scheduler.</p>
<p>Meanwhile the API answers directly: <code>GET /admin/api/config</code> (public), then sign
in with <code>POST /admin/api/session</code> (<code>{{"password": ...}}</code> with
<code>SVC_ADMIN_PASSWORD</code>, or <code>{{"username", "password"}}</code> for a user on the
<code>svc admin</code> roster) and send the token as <code>Authorization: Bearer ...</code>.</p>
</body></html>
"""


class Root:
    """``GET /`` -> 301 ``/admin/``."""

    public = True

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        raise falcon.HTTPMovedPermanently("/admin/")


class Dashboard:
    """``/admin`` and ``/admin/{path}``."""

    public = True

    def __init__(self, directory: Path | None) -> None:
        self.dir = directory.resolve() if directory is not None else None
        index = self.dir / "index.html" if self.dir is not None else None
        self.bundled = index is not None and index.is_file()
        if not self.bundled:
            where = f" in SVC_ADMIN_DIR={directory}" if directory is not None \
                else " (SVC_ADMIN_DIR is not set)"
            log.warning("no admin dashboard bundle%s: /admin serves a placeholder page", where)
            self.placeholder = PLACEHOLDER.format(where=html.escape(where)).encode()

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     path: str = "") -> None:
        if path == "api" or path.startswith("api/"):
            raise NotFound("no such route")
        if not self.bundled or self.dir is None:
            resp.content_type = falcon.MEDIA_HTML
            resp.data = self.placeholder
            return
        target = self._file(path)
        resp.content_type = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        resp.data = target.read_bytes()
        if target.name == "index.html":
            resp.cache_control = ["no-cache"]

    def _file(self, path: str) -> Path:
        assert self.dir is not None
        if path and "\x00" not in path:
            try:
                candidate = (self.dir / path).resolve()
            except (OSError, ValueError):
                candidate = None
            if candidate is not None and candidate.is_relative_to(self.dir) \
                    and candidate.is_file():
                return candidate
        return self.dir / "index.html"


def register(app: Any, directory: Path | None) -> Dashboard:
    dash = Dashboard(directory)
    app.add_route("/", Root())
    app.add_route("/admin", dash)
    app.add_route("/admin/{path:path}", dash)
    return dash
