"""apps: the bounded logs and the plan from a project's apps to processes (no process runs
here; tests/integration/test_apps_supervisor.py runs them)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from apps import AppFailed, vault_keys
from apps.logs import MAX_LINE, LogBook, guess_level
from apps.model import LogLine
from apps.plan import app_command, app_health, order
from project.appconfig import AppConfig
from project.rootconfig import LoadedApp


def app(name: str, tmp: Path, **doc: Any) -> LoadedApp:
    d = tmp / name
    d.mkdir(exist_ok=True)
    return LoadedApp(name, d / "project.yml", AppConfig.model_validate(doc))


# ----------------------------------------------------------------------------- logs


@pytest.mark.parametrize(("text", "level"), [
    ("ERROR: cannot bind", "error"),
    ("Traceback (most recent call last):", "error"),
    ('{"level":"warn","msg":"slow"}', "warn"),
    ("2026-11-29 WARNING disk low", "warn"),
    ("level=debug msg=tick", "debug"),
    ("GET /health 200", "info"),
    ("terror of the deep", "info"),  # a level word inside another word is not one
])
def test_level_is_guessed_from_the_text(text: str, level: str) -> None:
    assert guess_level(text, "stderr") == level


def test_the_ring_keeps_the_last_lines_and_says_truncated() -> None:
    sunk: list[LogLine] = []
    book = LogBook(3, sunk.append)
    for i in range(5):
        book.add("api", "stdout", f"line {i}\n")
    lines, truncated = book.read("api")
    assert [ln.text for ln in lines] == ["line 2", "line 3", "line 4"] and truncated
    assert len(sunk) == 5  # the sink sees every line
    # a cursor past what was dropped reads a complete window
    assert book.read("api", after=lines[0].seq) == (lines[1:], False)
    assert book.read("api", after=lines[0].seq - 2)[1] is True
    assert book.read("api", limit=2) == (lines[1:], True)


def test_filters_level_text_and_time_across_apps() -> None:
    book = LogBook(10)
    book.add("db", "stderr", "WARN slow query")
    book.add("api", "stdout", "ERROR Boom")
    book.add("api", "stdout", "all fine")
    at = book.read("api")[0][-1].at
    assert [ln.text for ln in book.read(level="warn")[0]] == ["WARN slow query", "ERROR Boom"]
    assert [ln.text for ln in book.read(level="error")[0]] == ["ERROR Boom"]
    assert [ln.text for ln in book.read(text="boom")[0]] == ["ERROR Boom"]
    assert [ln.text for ln in book.read("api", since=at)[0]][-1] == "all fine"
    assert book.read("nobody") == ([], False)
    with pytest.raises(ValueError, match="level must be one of"):
        book.read(level="loud")
    with pytest.raises(ValueError, match="limit"):
        book.read(limit=0)


def test_a_runaway_line_is_cut() -> None:
    book = LogBook(2)
    line = book.add("api", "stdout", "x" * (MAX_LINE + 5))
    assert line.text.endswith("[... 5 characters cut]") and len(line.text) < MAX_LINE + 40


# ----------------------------------------------------------------------------- plan


def test_order_by_scope_and_dependencies(tmp_path: Path) -> None:
    apps = [app("api", tmp_path, type="frontend", dev="x", dependsOn=["db"]),
            app("db", tmp_path, type="container", image="db", dev="x"),
            app("tool", tmp_path, type="frontend", scope="devOnly", dev="x"),
            app("edge", tmp_path, type="frontend", scope="cloudOnly", dev="x")]
    dev = [a.name for a in order(apps, "dev")]
    assert set(dev) == {"api", "db", "tool"} and dev.index("db") < dev.index("api")
    assert {a.name for a in order(apps, "cloud")} == {"api", "db", "edge"}
    cyc = [app("a", tmp_path, type="container", image="i", dev="x", dependsOn=["b"]),
           app("b", tmp_path, type="container", image="i", dev="x", dependsOn=["a"])]
    with pytest.raises(AppFailed, match="dependency cycle"):
        order(cyc, "dev")


def test_commands_per_dev_type(tmp_path: Path) -> None:
    shell = app_command(app("s", tmp_path, type="frontend", dev="npm start"), "dev", env={},
                        project_dir=tmp_path)
    assert shell.argv == ("sh", "-c", "npm start") and shell.env == {"PORT": "3000"}
    py = app("p", tmp_path, type="frontend", dev={"type": "python", "script": "srv.py"})
    assert app_command(py, "dev", env={}, project_dir=tmp_path).argv == (sys.executable,
                                                                         "srv.py")
    mod = app("m", tmp_path, type="frontend", dev={"type": "python", "script": "pkg.main"})
    venv = tmp_path / "m" / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    assert app_command(mod, "dev", env={}, project_dir=tmp_path).argv == (
        str(venv / "python"), "-m", "pkg.main")
    node = app("n", tmp_path, type="frontend", dev={"type": "node", "script": "dev"})
    with pytest.raises(AppFailed, match="neither a file"):
        app_command(node, "dev", env={}, project_dir=tmp_path)
    (tmp_path / "n" / "package.json").write_text('{"scripts": {"dev": "vite"}}')
    assert app_command(node, "dev", env={}, project_dir=tmp_path).argv == (
        "npm", "run", "--silent", "dev")
    js = app("j", tmp_path, type="frontend", dev={"type": "node", "script": "index.js"})
    assert app_command(js, "dev", env={}, project_dir=tmp_path).argv == ("node", "index.js")


def test_cloud_scope_runs_deploy_cmd_and_port_is_not_overridden(tmp_path: Path) -> None:
    a = app("a", tmp_path, type="backend", scope="devOnly", dev="dev-server",
            deploy={"cmd": "serve", "port": 9001, "healthcheck": "/hz"})
    cloud = app_command(a, "cloud", env={"PORT": "7"}, project_dir=tmp_path)
    assert cloud.argv == ("sh", "-c", "serve") and cloud.env["PORT"] == "7"
    assert app_command(a, "dev", env={}, project_dir=tmp_path).env["PORT"] == "9001"
    health = app_health(a.config)
    assert (health.kind, health.port, health.path) == ("http", 9001, "/hz")
    c = app("c", tmp_path, type="container", image="i", ports=["8080:80", 9], healthcheck="/r",
            dev="x")
    assert (app_health(c.config).port, app_health(c.config).path) == (8080, "/r")
    assert app_health(app("f", tmp_path, type="frontend", dev="x").config).kind == "none"


def test_a_container_without_dev_is_refused_clearly(tmp_path: Path) -> None:
    c = app("c", tmp_path, type="container", image="redis:7")
    with pytest.raises(AppFailed, match="Docker daemon") as caught:
        app_command(c, "dev", env={}, project_dir=tmp_path)
    assert caught.value.app == "c"
    none = app("x", tmp_path, type="frontend")
    with pytest.raises(AppFailed, match="no dev command"):
        app_command(none, "dev", env={}, project_dir=tmp_path)


def test_vault_keys_per_side(tmp_path: Path) -> None:
    a = app("a", tmp_path, type="frontend", env=[{"dev": {"vault": ["A", "B"]},
                                                  "cloud": "vault"}, {"X": 1}])
    assert vault_keys(a.config, "dev") == ["A", "B"]
    assert vault_keys(a.config, "cloud") == ["*"]
    assert vault_keys(app("b", tmp_path, type="frontend").config, "dev") is None


def test_a_failing_sink_is_dropped_and_lines_are_still_kept() -> None:
    def broken(_: LogLine) -> None:
        raise BrokenPipeError

    book = LogBook(10, broken)
    book.add("api", "stdout", "one")
    book.add("api", "stdout", "two")
    texts = [ln.text for ln in book.read("api")[0]]
    assert texts[0] == "one" and texts[-1] == "two"
    assert "the log sink failed (BrokenPipeError)" in texts[1]


def test_resolve_env_expands_project_dir(tmp_path: Path) -> None:
    from apps import resolve_env
    from project.rootconfig import load_project

    (tmp_path / "w").mkdir()
    (tmp_path / "project.yml").write_text("apps:\n  w: {path: w}\n")
    (tmp_path / "w" / "project.yml").write_text(
        "type: frontend\ndev: x\nenv: {DATA: '${PROJECT_DIR}/data', N: 2}\n")
    env = resolve_env(load_project(tmp_path / "project.yml"), "dev")
    assert env == {"w": {"DATA": f"{tmp_path}/data", "N": "2"}}
