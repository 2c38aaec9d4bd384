"""`project.workflows`: the `workflows:` / `schedules:` sections are validated at load; a cycle or
an unknown dependency is `bad_dag`, a schedule without a target `no_target_table`; the CLI
refuses them with those codes before touching any database."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from project.workflows import (
    DefinitionError,
    load_schedule,
    load_section,
    load_workflow,
    parse_duration,
    topological_order,
)
from tests.support.procs import ROOT, base_env


def steps(**deps: list[str]) -> dict[str, dict[str, object]]:
    return {n: {"table": "job", "depends_on": d} for n, d in deps.items()}


def codes(doc: dict[str, object]) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as e:
        load_section(doc)
    return [(i.code, i.path) for i in e.value.issues]


def test_a_valid_file_loads_and_other_root_keys_are_ignored() -> None:
    sec = load_section({
        "apps": {"api": {"path": "api"}}, "sync": {"transport": "http"},
        "workflows": {"w": {"deadline": "1h30m", "steps": steps(a=[], b=["a"], c=["a"],
                                                                 d=["b", "c"])}},
        "schedules": {"s": {"cron": "*/10 * * * * *", "workflow": "w", "timezone":
                            "Europe/Berlin", "concurrency": "queue", "catch_up": 3},
                      "t": {"cron": "0 3 * * *", "table": "job", "path": "/x",
                            "payload": {"k": 1}, "retries": 0, "timeout": "90s"}}})
    w = sec.workflows["w"]
    assert w.deadline == 5400.0 and topological_order(w.steps) == ["a", "b", "c", "d"]
    assert sec.schedules["t"].timeout == 90.0 and sec.schedules["t"].retries == 0
    assert sec.schedules["s"].concurrency == "queue" and sec.schedules["s"].catch_up == 3
    assert load_section(None).workflows == {} and load_section({}).schedules == {}


def test_cycles_self_dependencies_and_unknown_steps_are_bad_dag() -> None:
    assert codes({"workflows": {"w": {"steps": steps(a=["c"], b=["a"], c=["b"])}}}) == [
        ("bad_dag", "workflows.w")]
    assert codes({"workflows": {"w": {"steps": steps(a=["a"])}}}) == [("bad_dag", "workflows.w")]
    assert codes({"workflows": {"w": {"steps": steps(a=["zz"])}}}) == [("bad_dag", "workflows.w")]
    with pytest.raises(DefinitionError) as e:
        load_section({"workflows": {"w": {"steps": steps(a=["b"], b=["a"])}}})
    assert "a -> b -> a" in str(e.value) or "b -> a -> b" in str(e.value)


def test_a_schedule_without_a_target_is_no_target_table() -> None:
    assert codes({"schedules": {"s": {"cron": "* * * * *"}}}) == [
        ("no_target_table", "schedules.s")]
    assert codes({"schedules": {"s": {"cron": "* * * * *", "workflow": "nope"}}}) == [
        ("no_target_table", "schedules.s.workflow")]
    assert codes({"schedules": {"s": {"cron": "* * * * *", "workflow": "w", "table": "job"}},
                  "workflows": {"w": {"steps": steps(a=[])}}}) == [("invalid", "schedules.s")]


@pytest.mark.parametrize(("spec", "path"), [
    ({"cron": "61 * * * *", "table": "job"}, "schedules.s.cron"),
    ({"cron": "* * *", "table": "job"}, "schedules.s.cron"),
    ({"cron": "* * * * *", "table": "job", "timezone": "Mars/Base"}, "schedules.s.timezone"),
    ({"cron": "* * * * *", "table": "_00_query"}, "schedules.s.table"),
    ({"cron": "* * * * *", "table": "job; DROP"}, "schedules.s.table"),
    ({"cron": "* * * * *", "table": "job", "concurrency": "sometimes"},
     "schedules.s.concurrency"),
    ({"cron": "* * * * *", "table": "job", "catch_up": -1}, "schedules.s.catch_up"),
    ({"cron": "* * * * *", "table": "job", "timeout": "soon"}, "schedules.s.timeout"),
    ({"cron": "* * * * *", "table": "job", "unknown": 1}, "schedules.s.unknown"),
])
def test_malformed_schedules_are_invalid_with_their_key_path(spec: dict[str, object],
                                                             path: str) -> None:
    assert codes({"schedules": {"s": spec}}) == [("invalid", path)]


def test_durations_and_stored_definitions() -> None:
    assert parse_duration("250ms") == 0.25 and parse_duration(30) == 30.0
    assert parse_duration("1d2h") == 93600.0
    for bad in ("", "5 minutes", 0, -1, True, "400d"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    wf = load_workflow("w", {"steps": steps(a=[], b=["a"])})
    assert list(wf.steps) == ["a", "b"]
    with pytest.raises(DefinitionError) as e:
        load_workflow("w", {"steps": steps(a=["b"], b=["a"])})
    assert e.value.codes == {"bad_dag"} and e.value.issues[0].path == "workflows.w"
    with pytest.raises(DefinitionError) as e:
        load_schedule("s", {"cron": "* * * * *"})
    assert e.value.codes == {"no_target_table"}


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # no database: --check and refused files never connect
    return subprocess.run([sys.executable, "-m", "svccli", *args], cwd=str(cwd),
                          env=base_env(PYTHONPATH=str(ROOT), SVC_DB_URL="ws://127.0.0.1:9/rpc"),
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_cli_refuses_bad_definitions_with_their_codes(tmp_path: Path) -> None:
    (tmp_path / "project.yml").write_text(yaml.safe_dump({
        "workflows": {"w": {"steps": steps(a=["b"], b=["a"])}},
        "schedules": {"s": {"cron": "* * * * *"}}}))
    r = run_cli(["workflows", "apply"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert "bad_dag at workflows.w" in r.stderr
    assert "no_target_table at schedules.s" in r.stderr
    r = run_cli(["schema", "apply", "--transport", "changefeed"], tmp_path)
    assert r.returncode == 2 and "bad_dag" in r.stderr  # refused before the schema is written
    (tmp_path / "project.yml").write_text(yaml.safe_dump({
        "workflows": {"w": {"steps": steps(a=[], b=["a"])}},
        "schedules": {"s": {"cron": "0 * * * *", "workflow": "w"}}}))
    r = run_cli(["workflows", "apply", "--check"], tmp_path)
    assert r.returncode == 0 and "1 workflow(s), 1 schedule(s): valid" in r.stdout
    r = run_cli(["workflows", "apply", "--project", str(tmp_path / "none.yml")], tmp_path)
    assert r.returncode == 2 and "does not exist" in r.stderr
