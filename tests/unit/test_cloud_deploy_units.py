"""Pieces of the platform's deployments that need no process: the spec hash, log levels,
argument checks, the log writer's bound, and the roles a deployment starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cloud.deployments import check_db_url, check_ssps, level_of, spec_hash
from cloud.errors import BadRequest
from cloud.reconcile import LogWriter, plan_roles


def test_the_spec_hash_follows_the_spec_and_the_env_fingerprints_only() -> None:
    spec = {"ssps": 1, "database_url": None, "commit": None}
    h = spec_hash(spec, {"env::A": "fp_1"})
    assert h == spec_hash(dict(reversed(list(spec.items()))), {"env::A": "fp_1"})
    assert h != spec_hash({**spec, "ssps": 2}, {"env::A": "fp_1"})
    assert h != spec_hash(spec, {"env::A": "fp_2"})
    assert h != spec_hash(spec, {"env::A": "fp_1", "vault:B": "fp_3"})


@pytest.mark.parametrize(("text", "stream", "level"), [
    ("2026-01-01 INFO dbhost: listening", "stderr", "info"),
    ("ERROR something broke", "stdout", "error"),
    ("WARNING: slow", "stdout", "warning"),
    ("Traceback (most recent call last):", "stderr", "warning"),
    ("plain output", "stdout", "info"),
    ("CRITICAL down", "stdout", "error"),
])
def test_a_line_has_the_level_it_says(text: str, stream: str, level: str) -> None:
    assert level_of(text, stream) == level


def test_arguments_are_checked() -> None:
    assert check_ssps(3) == 3
    for bad in (0, 9, True, "2", None):
        with pytest.raises(BadRequest):
            check_ssps(bad)
    assert check_db_url(None) is None and check_db_url("") is None
    assert check_db_url("ws://db.internal:8000/rpc") == "ws://db.internal:8000/rpc"
    for bad in ("file:///etc/passwd", "ws://a b", 42):
        with pytest.raises(BadRequest):
            check_db_url(bad)


class FakeStore:
    def __init__(self) -> None:
        self.batches: list[list[tuple[str, dict[str, Any]]]] = []

    async def tx(self, stmts: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        self.batches.append(stmts)
        return []


async def test_the_log_writer_keeps_the_newest_lines_per_instance() -> None:
    store = FakeStore()
    w = LogWriter(store, per_instance=5)  # type: ignore[arg-type]
    for i in range(8):
        w.add("dep_a", "ins_x", "ssp-1", "stdout", f"line {i}")
    w.add("dep_a", "ins_y", "scheduler", "stderr", "ERROR once")
    await w.flush()
    (batch,) = store.batches
    inserted = batch[0][1]["rows"]
    assert [r["text"] for r in inserted if r["instance"] == "ins_x"] == [f"line {i}"
                                                                        for i in range(8)]
    seqs = [r["seq"] for r in inserted]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    deletes = [s for s in batch if s[0].startswith("DELETE")]
    assert len(deletes) == 1 and deletes[0][1]["i"] == "ins_x"
    # the cut is the third line's seq: lines 0..2 go, the newest five stay
    assert deletes[0][1]["s"] == inserted[2]["seq"]
    dropped = [s for s in batch if "lines_dropped" in s[0]]
    assert dropped and dropped[0][1]["n"] == 3
    assert list(w.tails["ins_y"]) == ["ERROR once"]
    assert [r["level"] for r in inserted if r["instance"] == "ins_y"] == ["error"]
    await w.flush()
    assert len(store.batches) == 1  # nothing new: nothing written


def test_a_deployment_runs_the_same_roles_as_ops_run(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin", "SVC_AUTH_SECRET": "s" * 32}
    roles = plan_roles({"ssps": 2}, env, tmp_path, None)
    assert [r.name for r in roles] == ["db", "schema", "scheduler", "ssp-1", "ssp-2"]
    assert roles[1].oneshot and not roles[2].oneshot
    ssp_ports = [int(str(r.url).rsplit(":", 1)[1]) for r in roles[3:]]
    assert ssp_ports[1] == ssp_ports[0] + 1
    assert all(r.env["SVC_AUTH_SECRET"] == "s" * 32 for r in roles)
    kept = plan_roles({"ssps": 1}, env, tmp_path, "127.0.0.1:4444")
    assert kept[0].name == "db" and kept[0].argv == () and kept[0].url == "http://127.0.0.1:4444"
    assert all(r.env.get("SVC_DB_URL") == "ws://127.0.0.1:4444/rpc" for r in kept[1:])
    assert [r.name for r in kept] == ["db", "schema", "scheduler", "ssp-1"]


def _project(tmp: Path, web_env: str) -> Any:
    from project.rootconfig import load_project

    (tmp / "project.yml").write_text("apps:\n  web: {path: web}\n  sh: {path: sh}\n"
                                     "  local: {path: local}\n")
    for d in ("web", "sh", "local"):
        (tmp / d).mkdir()
    (tmp / "web" / "project.yml").write_text(
        "type: frontend\ndependsOn: [sh]\ndev: {type: python, script: web.py}\n"
        f"deploy: {{port: 3000}}\nenv:\n{web_env}")
    (tmp / "sh" / "project.yml").write_text(
        "type: container\nimage: x/sh:1\nports: [8000]\nhealthcheck: /ready\n"
        "dev: \"exec true\"\n")
    (tmp / "local" / "project.yml").write_text("type: frontend\nscope: devOnly\ndev: \"x\"\n")
    return load_project(tmp / "project.yml")


def test_apps_become_roles_on_ports_of_their_own_with_the_platform_env(tmp_path: Path
                                                                        ) -> None:
    from cloud.approles import plan_app_roles
    from cloud.secret import Secret

    loaded = _project(tmp_path, "  - {vault: [TOKEN]}\n"
                      "  - {dev: {MODE: dev-side}, cloud: {MODE: cloud-side}}\n")
    roles = plan_app_roles(
        loaded, deployment="dep_x", base_env={"PATH": "/bin"},
        platform={"": {"ALL": Secret("a", "fp")}, "web": {"OWN": Secret("o", "fp")}},
        vault={"TOKEN": Secret("t0k", "fp"), "OTHER": Secret("no", "fp")},
        fingerprint=lambda v: "fp")
    assert [r.name for r in roles] == ["app-sh", "app-web"]  # dependsOn order, no devOnly
    sh, web = roles
    assert sh.health_url is not None and sh.health_url.endswith("/ready")
    assert sh.health_url == f"http://127.0.0.1:{sh.env['PORT']}/ready"
    assert sh.env["PORT"] != "8000" and web.env["PORT"] != "3000"  # a port per deployment
    assert web.health_url is None and web.url == f"http://127.0.0.1:{web.env['PORT']}"
    assert {k: web.env[k] for k in ("ALL", "OWN", "TOKEN", "MODE", "SVC_APPS_RUN")} == {
        "ALL": "a", "OWN": "o", "TOKEN": "t0k", "MODE": "cloud-side", "SVC_APPS_RUN": "dep_x"}
    assert "OTHER" not in web.env and "OWN" not in sh.env
    assert "t0k" not in repr(web)


def test_an_app_that_cannot_run_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from cloud.approles import AppPlanError, plan_app_roles

    loaded = _project(tmp_path, "  - {vault: [MISSING]}\n")
    with pytest.raises(AppPlanError) as e:
        plan_app_roles(loaded, deployment="d", base_env={}, platform={}, vault={},
                       fingerprint=lambda v: "fp")
    assert e.value.app == "web" and "MISSING" in e.value.message


def _image_app(tmp: Path) -> Any:
    from project.rootconfig import load_project

    (tmp / "project.yml").write_text("apps:\n  box: {path: box}\n")
    (tmp / "box").mkdir()
    (tmp / "box" / "data").mkdir()
    (tmp / "box" / "project.yml").write_text(
        "type: container\nimage: x/box:2\nports: [8000]\nhealthcheck: /up\n"
        "volumes: ['./data:/data:ro']\nargs: [serve, --fast]\nworkdir: /srv\n"
        "deploy: {resources: {memory: 256, vcpus: 2}}\n")
    return load_project(tmp / "project.yml")


def test_a_container_app_is_a_role_with_its_image(tmp_path: Path) -> None:
    from cloud.approles import needs_containers, plan_app_roles
    from cloud.secret import Secret

    loaded = _image_app(tmp_path)
    assert needs_containers(loaded)
    (box,) = plan_app_roles(
        loaded, deployment="dep_y", base_env={"PATH": "/bin", "PYTHONPATH": "/code"},
        platform={"box": {"OWN": Secret("o", "fp")}}, vault={}, fingerprint=lambda v: "fp")
    assert box.image == "x/box:2" and box.argv == ("serve", "--fast") and box.cwd == "/srv"
    assert box.volumes == (f"{(tmp_path / 'box' / 'data').resolve()}:/data:ro",)
    assert (box.memory_mb, box.cpus) == (256, 2.0)
    assert box.health_url == f"http://127.0.0.1:{box.env['PORT']}/up"
    # the app's variables, never the host's own (they would break the image's)
    assert box.env["OWN"] == "o" and box.env["SVC_APPS_RUN"] == "dep_y"
    assert "PATH" not in box.env and "PYTHONPATH" not in box.env


def test_a_container_app_without_a_daemon_is_refused_naming_why(tmp_path: Path) -> None:
    from cloud.approles import AppPlanError, plan_app_roles

    with pytest.raises(AppPlanError) as e:
        plan_app_roles(_image_app(tmp_path), deployment="d", base_env={}, platform={},
                       vault={}, fingerprint=lambda v: "fp", no_containers="none answers")
    assert e.value.app == "box"
    assert e.value.message == ("app box: a container app (image x/box:2) needs a Docker "
                               "daemon: none answers")


def test_the_backup_schedule_gives_the_next_time_after_the_last() -> None:
    from datetime import UTC, datetime

    from cloud.backupsched import next_due

    last = datetime(2026, 3, 1, 2, 59, 30, tzinfo=UTC)
    assert next_due("0 3 * * *", last) == datetime(2026, 3, 1, 3, 0, tzinfo=UTC)
    assert next_due("0 3 * * *", datetime(2026, 3, 1, 3, 0, tzinfo=UTC)) == \
        datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
    assert next_due("not cron", last) is None
