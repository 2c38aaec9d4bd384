"""The hosted platform's control plane for tests: ``svc-cloud`` as a real process on a
loopback port, its state in a namespace of its own on a database host, with a fresh key ring
and fingerprint key; helpers to sign users up and call the API.

Secret values never reach a test's output: compare them through :func:`digest` (a failing
assertion then shows digests, not values).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cloud.crypto import KeyRing
from tests.support.procs import DbHost, ManagedProcess, base_env, free_port

_n = itertools.count()
PASSWORD = "correct horse battery staple"


def digest(value: str) -> str:
    """What a test compares instead of a secret value."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def new_keyring(*kids: str) -> str:
    return ",".join(KeyRing.generate_entry(k) for k in kids or ("k1",))


def cloud_env(host: DbHost, ns: str, **extra: str) -> dict[str, str]:
    env = base_env(
        SVC_CLOUD_DB_URL=host.ws_url, SVC_CLOUD_DB_USER=host.user,
        SVC_CLOUD_DB_PASS=host.password, SVC_CLOUD_DB_NS=ns, SVC_CLOUD_DB_NAME="control",
        SVC_CLOUD_KEYRING=new_keyring(),
        SVC_CLOUD_FINGERPRINT_KEY=base64.b64encode(os.urandom(32)).decode(),
        SVC_CLOUD_REPO_POLL_SECS="0", SVC_CLOUD_USAGE_SAMPLE_SECS="0",
        SVC_CLOUD_USAGE_FLUSH_SECS="0.5", SVC_CLOUD_LOCAL_REPOS="true",
        # a control plane only unless a test deploys (test_cloud_deploy.py)
        SVC_CLOUD_EXECUTOR="none")
    env.update(extra)
    return env


@dataclass
class Cloud:
    process: ManagedProcess
    port: int
    env: dict[str, str]
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, method: str, path: str, token: str | None = None, body: Any = None,
             params: dict[str, Any] | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.http.request(method, self.url + path, headers=headers, params=params,
                                 json=body)

    def ok(self, method: str, path: str, token: str | None = None, body: Any = None,
           params: dict[str, Any] | None = None) -> Any:
        r = self.call(method, path, token, body, params)
        assert r.status_code in (200, 201, 204), (method, path, r.status_code, r.text[:500])
        return r.json() if r.content else None

    def user(self, name: str | None = None) -> tuple[str, str, dict[str, Any]]:
        """A new user: ``(email, session token, signup answer)``."""
        email = f"{name or 'user'}{next(_n)}-{os.getpid()}@example.test"
        signed = self.ok("POST", "/v1/auth/signup", body={"email": email,
                                                          "password": PASSWORD})
        login = self.ok("POST", "/v1/auth/login", body={"email": email, "password": PASSWORD})
        return email, login["token"], signed

    def mint(self, session: str, scopes: list[str] | None, label: str = "t",
             kind: str = "tokens", **extra: Any) -> str:
        body: dict[str, Any] = {"label": label, **extra}
        if scopes is not None:
            body["scopes"] = scopes
        return str(self.ok("POST", f"/v1/{kind}", session, body)["token"])

    def start(self, timeout: float = 60.0) -> Cloud:
        self.process.start()
        self.process.wait_http(self.url + "/v1/health", timeout=timeout)
        return self

    def stop(self) -> int | None:
        self.http.close()  # an idle kept-alive connection would hold gunicorn's graceful stop
        self.http = httpx.Client(timeout=30)
        return self.process.stop()

    def log_text(self) -> str:
        return self.process.log_text()


def make_cloud(host: DbHost, tmp: Path, ns: str | None = None, **extra: str) -> Cloud:
    port = free_port()
    env = cloud_env(host, ns or f"cloud{next(_n)}", SVC_CLOUD_BIND=f"127.0.0.1:{port}", **extra)
    proc = ManagedProcess("svc-cloud", [sys.executable, "-m", "cloud"], env,
                          tmp / f"svc-cloud-{port}.log")
    return Cloud(proc, port, env)


@contextmanager
def running_cloud(host: DbHost, tmp: Path, ns: str | None = None, **extra: str
                  ) -> Iterator[Cloud]:
    c = make_cloud(host, tmp, ns, **extra)
    c.start()
    try:
        yield c
    finally:
        c.stop()
