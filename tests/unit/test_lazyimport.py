"""`ipc.lazyimport`: a deferred package costs nothing until used, and works whole once used
(in a fresh interpreter: this one has both packages imported already)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
import ipc.lazysdk
import surrealdb
from surrealdb import RecordID
from surrealdb.connections import async_http, blocking_http
assert "aiohttp.client" not in sys.modules and "requests.sessions" not in sys.modules, \\
    "the SDK's import loaded a deferred package"
# first use: a submodule import through the stand-in, and attributes read from it
import aiohttp.web
assert aiohttp.web.Application.__name__ == "Application"
assert async_http.aiohttp.ClientTimeout(total=1).total == 1
import requests
assert blocking_http.requests.codes.ok == 200 and requests.Session.__name__ == "Session"
assert sys.modules["aiohttp"].__name__ == "aiohttp" and "aiohttp.client" in sys.modules
print("ok")
"""


def test_deferred_packages_load_on_first_use_and_not_before() -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_a_shard_worker_and_the_svc_command_start_without_them() -> None:
    probe = ("import sys, ssp.shard, svccli.__main__; "
             "print('aiohttp.client' in sys.modules, 'requests.sessions' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False False"
