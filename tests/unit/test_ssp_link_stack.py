"""ops/run cluster mode settings: `--ssps N` and `--scheduler-bind`, and the children built
(which are relaunched, where their temporary state lives)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stack.__main__ import build_children
from stack.config import parse

ENV = {"SVC_DB_USER": "root", "SVC_DB_PASS": "unit-pass"}


def test_default_is_a_cluster_of_one_with_the_admin_plane(tmp_path: Path) -> None:
    cfg = parse([], ENV)
    assert cfg.ssps == 1 and cfg.cluster and cfg.ssp_binds() == ["127.0.0.1:8667"]
    kids = build_children(parse(["--memory"], ENV), dict(ENV), tmp_path)
    assert [c.name for c in kids] == ["svc-db", "svc schema apply", "svc-scheduler",
                                      "svc-ssp 1"]
    sched = kids[2]
    assert sched.env["SVC_ADMIN_HOST"] == "127.0.0.1" and sched.env["SVC_ADMIN_PORT"] == "9668"
    assert sched.relaunch_codes == frozenset({4})  # a restart asked through the admin API


def test_without_an_admin_password_each_run_generates_its_own() -> None:
    a, b = parse([], ENV), parse([], ENV)
    assert a.admin_password_generated and len(a.admin_password) >= 20
    assert a.admin_password != b.admin_password  # never a fixed default
    given = parse([], {**ENV, "SVC_ADMIN_PASSWORD": "chosen-one"})
    assert given.admin_password == "chosen-one" and not given.admin_password_generated
    assert "chosen-one" not in repr(given)


def test_standalone_is_one_ssp_without_scheduler(tmp_path: Path) -> None:
    cfg = parse(["--standalone"], ENV)
    assert cfg.ssps == 0 and not cfg.cluster and cfg.ssp_binds() == ["127.0.0.1:8667"]
    kids = build_children(parse(["--memory", "--standalone"], ENV), dict(ENV), tmp_path)
    assert [c.name for c in kids] == ["svc-db", "svc schema apply", "svc-ssp"]
    assert kids[2].env["SVC_SSP_RUN_DIR"] == str(tmp_path / "ssp")
    assert kids[2].relaunch and kids[2].relaunch_codes == frozenset({2, 3, 4, 5, 6})


def test_a_memory_database_host_is_not_relaunched_a_stored_one_is(tmp_path: Path) -> None:
    memory = build_children(parse(["--memory"], ENV), dict(ENV), tmp_path)[0]
    assert memory.name == "svc-db" and not memory.relaunch
    assert "--memory" in memory.fatal_note and "gone" in memory.fatal_note
    stored = build_children(parse(["--data", str(tmp_path / "d")], ENV), dict(ENV), tmp_path)[0]
    assert stored.relaunch


def test_memory_cluster_keeps_the_scheduler_files_in_the_stack_directory(tmp_path: Path) -> None:
    kids = build_children(parse(["--memory", "--ssps", "2"], ENV), dict(ENV), tmp_path)
    sched = kids[2]
    assert sched.name == "svc-scheduler" and sched.relaunch
    doc = yaml.safe_load((tmp_path / "scheduler" / "scheduler.yml").read_text())
    assert doc["wal_path"] == str(tmp_path / "scheduler" / "wal")
    assert [c.env["SVC_SSP_RUN_DIR"] for c in kids[3:]] == [
        str(tmp_path / "ssp-8667"), str(tmp_path / "ssp-8668")]


def test_cluster_mode_children_ports_and_config(tmp_path: Path) -> None:
    cfg = parse(["--data", str(tmp_path), "--ssps", "3", "--scheduler-bind", "127.0.0.1:9700"],
                ENV)
    assert cfg.ssp_binds() == ["127.0.0.1:8667", "127.0.0.1:8668", "127.0.0.1:8669"]
    kids = build_children(cfg, dict(ENV), tmp_path / "run")
    assert [c.name for c in kids] == ["svc-db", "svc schema apply", "svc-scheduler",
                                      "svc-ssp 1", "svc-ssp 2", "svc-ssp 3"]
    sched = kids[2]
    doc = yaml.safe_load((tmp_path / "scheduler" / "scheduler.yml").read_text())
    assert doc["ingest_host"] == "127.0.0.1" and doc["ingest_port"] == 9700
    assert "unit-pass" not in (tmp_path / "scheduler" / "scheduler.yml").read_text()
    assert sched.ready is not None
    assert sched.ready(503, b'{"scheduler": {"state": "ready"}}')
    assert not sched.ready(503, b'{"scheduler": {"state": "cloning"}}')
    assert not sched.ready(200, b"not json")
    for i, c in enumerate(kids[3:]):
        assert c.env["SVC_SCHEDULER_URL"] == "http://127.0.0.1:9700"
        assert c.env["SVC_SSP_LISTEN_ADDR"] == f"127.0.0.1:{8667 + i}"
        assert c.env["SVC_SSP_ID"] == f"ssp-{8667 + i}"
        assert c.relaunch_codes == frozenset({2, 3, 4, 5, 6})


@pytest.mark.parametrize("argv", [["--ssps", "-1"], ["--ssps", "0"], ["--ssps", "2", "--no-ssp"],
                                  ["--standalone", "--ssps", "2"], ["--standalone", "--no-ssp"],
                                  ["--scheduler-bind", "nowhere"], ["--ssp-bind", "h:99999"],
                                  ["--admin-bind", "h:0"]])
def test_bad_cluster_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse(argv, ENV)
    assert e.value.code == 2
