"""Pure parts of the job runner and the backend health list: configuration, URLs, backoff,
body shapes, the health aggregate and the `backend_down` incident rule."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ipc.routebodies import BodyError, normalize_body
from jobs.policy import (
    backoff_secs,
    job_url,
    redact,
    retried,
    retry_after_secs,
    secrets_of,
)
from maintenance.backends import MASK, BackendListError, BackendMonitor, parse_backends, shown_url
from ssp.config import ConfigError, JobTable, SspConfig
from ssp.jobreports import ResultReporter

BASE_ENV = {"SVC_DB_URL": "ws://127.0.0.1:1/rpc", "SVC_DB_USER": "u", "SVC_DB_PASS": "p",
            "SVC_DB_NS": "n", "SVC_DB_NAME": "d"}


def cfg(**env: str) -> SspConfig:
    return SspConfig.from_env({**BASE_ENV, **env})


def test_job_config_is_read_with_defaults_and_the_token_is_not_in_repr() -> None:
    c = cfg(SVC_JOB_CONFIG=json.dumps({"job_tables": {"mail": {
        "name": "mail_job", "base_url": "http://b", "auth_token": "tok-secret"}}}))
    (t,) = c.job_tables
    assert (t.name, t.concurrency, t.timeout_secs, t.lease_secs) == ("mail_job", 1, 10.0, 30.0)
    assert "tok-secret" not in repr(c) and "tok-secret" not in repr(t)
    assert c.job_sweep_secs == 30 and c.backend_down_after_secs == 60


def test_invalid_job_config_json_is_a_clear_startup_error_without_the_value() -> None:
    with pytest.raises(ConfigError, match="SVC_JOB_CONFIG is not valid JSON") as e:
        cfg(SVC_JOB_CONFIG='{"job_tables": {"a": {"auth_token": "tok-secret"')
    assert "tok-secret" not in str(e.value)


@pytest.mark.parametrize("entry", [
    {"name": "j", "base_url": "http://b", "concurrency": 0},
    {"name": "j", "base_url": "http://b", "concurrency": 1.5},
    {"name": "j", "base_url": "http://b", "concurrency": True},
    {"name": "j; DELETE x", "base_url": "http://b"},
    {"name": "j"},
])
def test_bad_job_table_entries_are_refused(entry: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="SVC_JOB_CONFIG job_tables.k"):
        cfg(SVC_JOB_CONFIG=json.dumps({"job_tables": {"k": entry}}))


def test_job_url_joins_base_and_path_with_one_slash() -> None:
    assert job_url("http://b/api/", "/run") == "http://b/api/run"
    assert job_url("http://b/api", "run") == "http://b/api/run"
    assert job_url("http://b/api", None) == "http://b/api"


def test_backoff_doubles_per_attempt_and_is_capped() -> None:
    assert [backoff_secs(500, n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert backoff_secs(500, 20) == 30.0


def test_job_bodies_need_a_record_id_of_a_table() -> None:
    assert normalize_body("POST /job/kill", {"id": "job:1"}) == {"id": "job:1"}
    for bad in ({}, {"id": ""}, {"id": "nocolon"}, {"id": "1x:2"}, {"id": "job:"}, []):
        with pytest.raises(BodyError):
            normalize_body("POST /job/retry", bad)
    assert normalize_body("POST /job/recover", None) == {}
    with pytest.raises(BodyError):
        normalize_body("PUT /backends", {"name": "a"})


def test_backend_list_shape_is_checked_and_legacy_variable_read() -> None:
    assert [b.name for b in parse_backends([{"name": "a", "environment": {"K": "v"}}])] == ["a"]
    for bad in ([1], [{"name": ""}], [{"name": "a", "url": "ftp://h"}],
                [{"name": "a", "run_on": {"pool": 1}}], [{"name": "a", "what": 1}]):
        with pytest.raises(BackendListError):
            parse_backends(bad)
    c = cfg(SVC_SCHEDULER_BACKENDS='[{"name": "legacy"}]')
    assert [b["name"] for b in c.backends] == ["legacy"]
    with pytest.raises(ConfigError, match="SVC_BACKENDS"):
        cfg(SVC_BACKENDS='[{"name": "a", "env": {"K": 2}}]')


def test_a_backend_without_a_check_url_is_unchecked_and_not_in_the_aggregate() -> None:
    mon = BackendMonitor(parse_backends([{"name": "a", "url": "http://a/h"},
                                         {"name": "b", "env": {"K": "v"}}]))
    assert mon.summary()["status"] == "degraded"  # a: not checked yet
    mon.observe("a", True, None)
    s = mon.summary()
    assert s["status"] == "healthy"
    assert s["counts"] == {"healthy": 1, "unhealthy": 0, "unknown": 0, "unchecked": 1}
    assert [e["status"] for e in s["list"]] == ["healthy", "unchecked"]
    mon.observe("a", False, "down")
    assert mon.summary()["status"] == "unavailable"


def test_shown_url_drops_user_info() -> None:
    assert shown_url("http://user:pw@h:8080/health?x=1") == "http://h:8080/health?x=1"


def test_aggregate_and_backend_down_after_the_threshold(tmp_path: Path) -> None:
    now = [0]
    mon = BackendMonitor(parse_backends([{"name": "a", "url": "http://a/h", "env": {"K": "sv"}},
                                         {"name": "b", "url": "http://b/h"}]),
                         down_after_secs=60, incidents_dir=tmp_path, clock=lambda: now[0])
    assert mon.summary()["status"] == "degraded"  # nothing checked yet: unknown
    mon.observe("a", True, None)
    mon.observe("b", False, "health check answered HTTP 503")
    s = mon.summary()
    assert s["status"] == "degraded" and s["counts"] == {"healthy": 1, "unhealthy": 1,
                                                         "unknown": 0, "unchecked": 0}
    assert s["list"][0]["env"] == {"K": "***"}
    now[0] = 60_000
    mon.observe("b", False, "down")
    assert mon.incidents == []  # exactly one minute is not more than one minute
    now[0] = 60_001
    mon.observe("b", False, "down")
    assert [i["state"] for i in mon.incidents] == ["open"]
    mon.observe("a", False, "down")
    assert mon.summary()["status"] == "unavailable"
    now[0] = 70_000
    mon.observe("b", True, None)
    lines = [json.loads(x) for x in (tmp_path / "incidents.jsonl").read_text().splitlines()]
    assert [(x["kind"], x["component"], x["state"]) for x in lines] == [
        ("backend_down", "b", "open"), ("backend_down", "b", "recovered")]
    assert lines[0]["id"] == lines[1]["id"] and lines[1]["ended_at"] == 70_000
    assert "sv" not in (tmp_path / "incidents.jsonl").read_text()


def test_only_5xx_408_425_429_answers_are_retried() -> None:
    assert [code for code in (301, 307, 400, 401, 403, 404, 408, 409, 422, 425, 429, 500, 502,
                              503, 504) if retried(code)] == [408, 425, 429, 500, 502, 503, 504]


def test_retry_after_reads_seconds_and_http_dates_and_is_capped() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_secs("2") == 2.0
    assert retry_after_secs("Thu, 01 Jan 2026 12:00:30 GMT", now) == 30.0
    assert retry_after_secs("Thu, 01 Jan 2026 11:00:00 GMT", now) == 0.0  # in the past
    assert retry_after_secs("86400") == 300.0
    assert retry_after_secs(None) is None and retry_after_secs("soon") is None
    assert retry_after_secs("nan") is None


def test_error_texts_mask_the_token_and_a_base_url_password() -> None:
    spec = JobTable("k", "job", "http://svc:p%40ss@b:8080/api", "tok-9f8e")
    secrets = secrets_of(spec)
    text = redact("got Bearer tok-9f8e from http://svc:p%40ss@b:8080 (p@ss)", secrets)
    assert "tok-9f8e" not in text and "p%40ss" not in text and "p@ss" not in text
    assert text.count(MASK) == 3
    assert secrets_of(JobTable("k", "job", "http://b", "")) == ()


async def test_result_reporter_coalesces_per_job_and_keeps_each_jobs_order() -> None:
    got: list[dict[str, Any]] = []
    gate = asyncio.Event()

    async def result(request: web.Request) -> web.Response:
        body = await request.json()
        if body["job_id"] == "job:a" and body["status"] == "running":
            await gate.wait()  # job:a's first post is slow
        got.append({**body, "auth": request.headers.get("Authorization")})
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/job/result", result)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rep = ResultReporter(f"http://127.0.0.1:{port}/", "sec")
    async with aiohttp.ClientSession() as session:
        rep.start(session)
        rep.report("job:a", "running")
        await asyncio.sleep(0.1)  # job:a's post is in flight
        rep.report("job:a", "pending")  # replaced by the next one before it is sent
        rep.report("job:b", "running")
        rep.report("job:a", "completed", result=[1, 2])
        rep.report("job:b", "failed", error="backend answered 500: boom")
        await asyncio.sleep(0.2)
        assert [(g["job_id"], g["status"]) for g in got] == [("job:b", "failed")]
        gate.set()
        await rep.stop(session)
    await runner.cleanup()
    assert [(g["job_id"], g["status"]) for g in got] == [
        ("job:b", "failed"), ("job:a", "running"), ("job:a", "completed")]
    assert got[2]["result"] == {"value": [1, 2]}  # the scheduler takes objects only
    assert got[0]["error"] == "backend answered 500: boom"
    assert all(g["auth"] == "Bearer sec" for g in got)
    assert rep.stats == {"sent": 3, "failed": 0, "dropped": 0}
