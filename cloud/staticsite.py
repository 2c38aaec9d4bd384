"""The server of a static app (``project.yml`` ``deploy.static``): the files of one directory
over HTTP on ``$PORT`` (``python -m cloud.staticsite <dir>``), run by the platform as the
app's role instance, like any app, on whichever executor runs the deployment.

What it serves: ``GET`` and ``HEAD`` of the files under the directory; a directory's
``index.html`` for the directory; 404 for anything else (no directory listing, no file that
resolves outside the directory through a symbolic link: a repository's link to ``/etc``
serves nothing). Other methods answer 405. One line per request on stdout (the instance's
log). A missing directory is an error at start (the deployment fails with it), not an empty
site.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["SiteHandler", "main"]


class SiteHandler(SimpleHTTPRequestHandler):
    server_version = "svc-static"
    sys_version = ""

    def __init__(self, *args: Any, directory: str, **kwargs: Any) -> None:
        self.root = Path(directory).resolve()
        super().__init__(*args, directory=str(self.root), **kwargs)

    def translate_path(self, path: str) -> str:
        # the stdlib's mapping drops `..` segments; a symbolic link can still point out
        # of the directory, so the resolved target must stay under it
        mapped = Path(super().translate_path(path)).resolve()
        if mapped != self.root and self.root not in mapped.parents:
            return str(self.root / ".svc-static-outside")  # never exists: 404
        return str(mapped)

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(HTTPStatus.NOT_FOUND, "Not found")
        return None

    def _refuse(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, "Only GET and HEAD")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815 - the stdlib's names

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        sys.stdout.write(f"INFO {self.command} {self.path[:200]} "
                         f"{args[1] if len(args) > 1 else ''}\n")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cloud.staticsite")
    p.add_argument("dir")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 0) or None)
    ns = p.parse_args(argv)
    if ns.port is None:
        print("ERROR no port: set PORT or --port", file=sys.stderr)
        return 2
    root = Path(ns.dir)
    if not root.is_dir():
        print(f"ERROR the static site's directory {root} does not exist (did deploy.static."
              "build write it? deploy.static.dir names it, default dist)", file=sys.stderr)
        return 1
    server = ThreadingHTTPServer((ns.host, ns.port), partial(SiteHandler,
                                                             directory=str(root)))
    print(f"INFO serving {root} on http://{ns.host}:{ns.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
