"""The dashboard routes outside ``/admin/api``: ``GET /`` and the bundle at ``/admin``.

``GET /`` answers 301 to ``/admin/``. ``/admin`` and everything under it (but ``/admin/api``)
serves the dashboard from ``SVC_ADMIN_DIR`` (default: ``dashboard/`` of this source tree, plain
ES modules, no build step): a path naming a file of the bundle gets that file; any other path
gets ``index.html`` (the dashboard routes deep links such as ``/admin/views/<key>`` itself).
Paths cannot leave the bundle directory. Without a bundle (``SVC_ADMIN_DIR`` set empty, or no
``index.html`` in it) the scheduler logs one warning at start and serves a placeholder page
that says how to get the dashboard; the JSON API works either way.

Every file is sent with ``Cache-Control: no-cache`` and an ``ETag`` (its size and mtime): a
browser revalidates (304) instead of running a stale module after an upgrade. Pages carry a
Content-Security-Policy allowing only this origin's scripts, styles and API (no inline
script), ``X-Content-Type-Options: nosniff`` and ``frame-ancestors 'none'``.
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
<body>
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

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".mjs": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".svg": "image/svg+xml", ".json": "application/json", ".png": "image/png",
         ".ico": "image/x-icon", ".txt": "text/plain; charset=utf-8"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
}


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
                else " (SVC_ADMIN_DIR is set empty)"
            log.warning("no admin dashboard bundle%s: /admin serves a placeholder page", where)
            self.placeholder = PLACEHOLDER.format(where=html.escape(where)).encode()

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     path: str = "") -> None:
        if path == "api" or path.startswith("api/"):
            raise NotFound("no such route")
        resp.set_headers(_HEADERS)
        if not self.bundled or self.dir is None:
            resp.content_type = falcon.MEDIA_HTML
            resp.data = self.placeholder
            return
        target = self._file(path)
        try:
            st = target.stat()
            etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
            resp.cache_control = ["no-cache"]
            resp.set_header("ETag", etag)
            if req.get_header("If-None-Match") == etag:
                resp.status = falcon.HTTP_304
                return
            data = target.read_bytes()
        except OSError:
            raise NotFound("the dashboard file could not be read") from None
        resp.content_type = _TYPES.get(target.suffix.lower()) \
            or mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        resp.data = data

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
