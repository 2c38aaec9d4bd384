"""`ipc.lazyimport`: a deferred package costs nothing until used, and works whole once used
(in a fresh interpreter: this one has both packages imported already)."""

from __future__ import annotations

import os
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


PROJECT_PROBE = """
import os, sys
from pathlib import Path
import svccli.__main__
from svccli.settings import ConfigError, find_project
before = "project.rootconfig" in sys.modules
try:
    find_project({}, None, Path(os.getcwd()))
except ConfigError:
    print("ConfigError", end=" ")
print(before, "project.rootconfig" in sys.modules)
"""


def test_svc_loads_the_project_file_models_only_for_a_project_file(tmp_path: Path) -> None:
    # `svc schema apply` runs ~70 times in the suite; the project file's pydantic models were
    # ~40% of its start, imported for nothing in a directory without project.yml
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def probe() -> str:
        r = subprocess.run([sys.executable, "-c", PROJECT_PROBE], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout.strip()

    assert probe() == "False False"
    (tmp_path / "project.yml").write_text("not: a valid project\n")
    assert probe() == "ConfigError False True"  # loaded, and its problems are reported


def test_the_ssp_hub_and_the_scheduler_load_boto3_only_for_the_object_store() -> None:
    # a third of a second of CPU per start of every SSP and scheduler that never backs up
    probe = ("import sys, ssp.__main__, scheduler.__main__; print('botocore' in sys.modules); "
             "from backup.objstore import ObjectStore, StorageError; "
             "from backup.storeerror import StorageError as E; "
             "print('botocore' in sys.modules, StorageError is E)")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "True", "True"]
