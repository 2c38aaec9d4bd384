"""`svc sql` runs SurrealQL through the host; `svc view watch` prints a view's state and edges."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.support import lifeline
from tests.support.procs import ROOT, DbHost, base_env


def _env(host: DbHost, db: str) -> dict[str, str]:
    return base_env(SVC_DB_URL=host.ws_url, SVC_DB_USER=host.user, SVC_DB_PASS=host.password,
                    SVC_DB_NS="tools", SVC_DB_NAME=db)


def _svc(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "svccli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_svc_sql_prints_each_statement_as_json(shared_db_host: DbHost) -> None:
    env = _env(shared_db_host, "sql")
    r = _svc(env, "sql", "CREATE thread:1 SET title = 'hi', at = d'2024-01-01T00:00:00Z'; "
                         "SELECT * FROM thread; RETURN 1 + 1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 3
    assert '"id": "thread:1"' in lines[1] and "2024-01-01T00:00:00Z" in lines[1]
    assert lines[2] == "2"


def test_svc_sql_reports_a_failing_statement_without_the_password(shared_db_host: DbHost) -> None:
    env = _env(shared_db_host, "sqlbad")
    r = _svc(env, "sql", "SELECT * FROM no_such_table")
    assert r.returncode == 1
    assert "no_such_table" in r.stderr
    assert shared_db_host.password not in r.stderr + r.stdout


def test_svc_sql_without_a_database_url_is_a_configuration_error() -> None:
    r = _svc(base_env(), "sql", "RETURN 1")
    assert r.returncode == 2 and "SVC_DB_URL" in r.stderr


def test_svc_view_watch_follows_the_query_row_and_its_edges(shared_db_host: DbHost, tmp_path: Path) -> None:
    env = _env(shared_db_host, "watch")
    setup = ("DEFINE TABLE _00_list_ref_user_alice TYPE RELATION SCHEMALESS; "
             "CREATE thread:1, thread:2; "
             "CREATE _00_query:top SET auth_id = user:alice, state = 'materializing', rowCount = 1; "
             "RELATE _00_query:top->_00_list_ref_user_alice->thread:1")
    assert _svc(env, "sql", setup).returncode == 0
    log = tmp_path / "watch.out"
    with open(log, "w") as out:
        watcher = subprocess.Popen([sys.executable, "-m", "svccli", "view", "watch", "query:top",
                                    "--seconds", "6"], env=env, cwd=ROOT, stdout=out,
                                   stderr=subprocess.STDOUT, text=True)
        lifeline.adopt(watcher.pid)  # dies with this run, killed or not
        deadline = time.monotonic() + 20
        while "+ thread:1" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        change = ("UPDATE _00_query:top SET state = 'ready', rowCount = 1; "
                  "DELETE _00_list_ref_user_alice WHERE out = thread:1; "
                  "RELATE _00_query:top->_00_list_ref_user_alice->thread:2")
        assert _svc(env, "sql", change).returncode == 0
        watcher.wait(timeout=30)
    text = log.read_text()
    assert "query:top: state=materializing rowCount=1" in text
    assert "query:top: state=ready rowCount=1" in text
    assert text.index("+ thread:1") < text.index("- thread:1")
    assert "+ thread:2" in text
