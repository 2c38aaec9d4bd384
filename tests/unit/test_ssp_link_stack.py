"""ops/run cluster mode settings: `--ssps N` and `--scheduler-bind`, and the children built."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stack.__main__ import build_children
from stack.config import parse

ENV = {"SVC_DB_USER": "root", "SVC_DB_PASS": "unit-pass"}


def test_default_is_standalone() -> None:
    cfg = parse([], ENV)
    assert cfg.ssps == 0 and not cfg.cluster and cfg.ssp_binds() == ["127.0.0.1:8667"]
    names = [c.name for c in build_children(parse(["--memory"], ENV), dict(ENV))]
    assert names == ["svc-db", "svc schema apply", "svc-ssp"]


def test_cluster_mode_children_ports_and_config(tmp_path: Path) -> None:
    cfg = parse(["--data", str(tmp_path), "--ssps", "3", "--scheduler-bind", "127.0.0.1:9700"],
                ENV)
    assert cfg.ssp_binds() == ["127.0.0.1:8667", "127.0.0.1:8668", "127.0.0.1:8669"]
    kids = build_children(cfg, dict(ENV))
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
        assert c.relaunch_on == frozenset({2, 3, 4, 5, 6})


@pytest.mark.parametrize("argv", [["--ssps", "-1"], ["--ssps", "2", "--no-ssp"],
                                  ["--scheduler-bind", "nowhere"], ["--ssp-bind", "h:99999"]])
def test_bad_cluster_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse(argv, ENV)
    assert e.value.code == 2
