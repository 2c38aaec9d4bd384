"""A small synchronous client of the platform's REST API (``svc cloud``), with the CLI's saved
session.

Where it finds the API and the credential, first found wins: ``--api`` / ``--token`` flags,
``SVC_CLOUD_API_URL`` / ``SVC_CLOUD_TOKEN`` (automation: an API key), then the file ``svc
cloud login`` writes (``$XDG_CONFIG_HOME/svc/cloud.json``, else ``~/.config/svc/cloud.json``,
mode 0600: it holds a session token). The default API is ``http://127.0.0.1:9680``, what
``ops/run --cloud`` serves.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ApiError", "CloudClient", "Session", "session_file"]

DEFAULT_API = "http://127.0.0.1:9680"


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {body.get('error', '')}: {body.get('message', '')}")
        self.status = status
        self.body = body


def session_file(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser()
                                               / ".config")
    return Path(base) / "svc" / "cloud.json"


@dataclass
class Session:
    api: str
    token: str | None
    email: str | None = None

    @classmethod
    def load(cls, env: Mapping[str, str], api: str | None = None, token: str | None = None
             ) -> Session:
        saved: dict[str, Any] = {}
        path = session_file(env)
        if path.is_file():
            try:
                saved = json.loads(path.read_text())
            except ValueError:
                saved = {}
        return cls(api=(api or env.get("SVC_CLOUD_API_URL") or saved.get("api")
                        or DEFAULT_API).rstrip("/"),
                   token=token or env.get("SVC_CLOUD_TOKEN") or saved.get("token"),
                   email=saved.get("email"))

    def save(self, env: Mapping[str, str]) -> Path:
        path = session_file(env)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"api": self.api, "token": self.token, "email": self.email}, f)
        return path

    @staticmethod
    def forget(env: Mapping[str, str]) -> bool:
        path = session_file(env)
        if path.is_file():
            path.unlink()
            return True
        return False


class CloudClient:
    def __init__(self, session: Session, timeout: float = 30.0) -> None:
        self.session = session
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None,
             params: Mapping[str, Any] | None = None) -> Any:
        query = {k: ("true" if v is True else "false" if v is False else str(v))
                 for k, v in (params or {}).items() if v is not None}
        url = self.session.api + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.session.token:
            req.add_header("Authorization", f"Bearer {self.session.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = {"error": f"http_{e.code}", "message": raw.decode(errors="replace")[:300]}
            raise ApiError(e.code, doc if isinstance(doc, dict) else {}) from None
        return json.loads(raw) if raw else None

    def pages(self, path: str, params: Mapping[str, Any] | None = None
              ) -> Iterator[dict[str, Any]]:
        """Every item of a list, following next_cursor."""
        args = dict(params or {})
        args.setdefault("limit", 100)
        while True:
            page = self.call("GET", path, params=args)
            yield from page["items"]
            if not page.get("next_cursor"):
                return
            args["cursor"] = page["next_cursor"]
