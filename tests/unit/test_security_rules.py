"""The pure rules behind the trust boundaries (SECURITY.md): derived credentials, the SSP
gateway's and the scheduler listener's bearer policies, job paths under the base path,
`lastActiveAt` bounds, credential params kept out of dumps, and the select permissions ANDed
into a view's query. The real-process side is tests/integration/test_security*.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from backup.schema import CREDENTIAL_PARAMS, SchemaPlan, without_credentials
from engine.parser import parse
from ipc import peerauth
from ipc.bearer import BearerAuth
from ipc.httperrors import HttpError
from jobs.policy import JobPathError, job_url
from scheduler.listenerauth import MASTER, OPEN, OPTIONAL, SSP, SSP_SELF, policy_of
from ssp.permissions import PermissionRefused, _rule_text, with_rules
from timetext.timestamps import ACTIVITY_SKEW_MS, activity_ms

SECRET = "unit-test-shared-secret"


def test_each_credential_names_its_kind_and_peer_and_nothing_else() -> None:
    keys = peerauth.PeerKeys(SECRET)
    ssp = peerauth.ssp_credential(SECRET, "ssp-1")
    sched = peerauth.scheduler_credential(SECRET, "ssp-1")
    ingest = peerauth.ingest_credential(SECRET)
    assert SECRET not in ssp + sched + ingest
    assert keys.peer_of(ssp, peerauth.SSP) == "ssp-1"
    assert keys.peer_of(sched, peerauth.SCHEDULER) == "ssp-1"
    assert keys.peer_of(ingest, peerauth.INGEST) == ""
    # the same peer under another kind, another secret, or a tampered peer: nothing
    assert keys.peer_of(ssp, peerauth.SCHEDULER) is None
    assert keys.peer_of(sched, peerauth.SSP) is None
    assert peerauth.PeerKeys(SECRET + "x").peer_of(ssp, peerauth.SSP) is None
    head, kind, _, mac = ssp.split(".")
    forged = ".".join([head, kind, peerauth.ssp_credential(SECRET, "ssp-2").split(".")[2], mac])
    assert keys.peer_of(forged, peerauth.SSP) is None
    for junk in ("", "svc1", "svc1.ssp..", "svc1.ssp.!!.x", "a.b.c.d.e", SECRET):
        assert keys.peer_of(junk, peerauth.SSP) is None


def test_the_ssp_gateway_takes_its_own_scheduler_credential_and_the_ingest_one_by_route() -> None:
    auth = BearerAuth(SECRET, own_id="ssp-1")

    def ok(token: str, kinds: tuple[str, ...]) -> bool:
        try:
            auth.check(f"Bearer {token}", kinds)
        except HttpError:
            return False
        return True

    default = (peerauth.SCHEDULER,)
    ingest_route = (peerauth.SCHEDULER, peerauth.INGEST)
    assert ok(SECRET, ()) and ok(SECRET, default)
    assert ok(peerauth.scheduler_credential(SECRET, "ssp-1"), default)
    assert not ok(peerauth.scheduler_credential(SECRET, "ssp-2"), default)  # another SSP's
    assert not ok(peerauth.scheduler_credential(SECRET, "ssp-1"), ())  # master-only route
    assert not ok(peerauth.ingest_credential(SECRET), default)
    assert ok(peerauth.ingest_credential(SECRET), ingest_route)
    assert not ok(peerauth.ssp_credential(SECRET, "ssp-1"), ingest_route)
    # development: any bearer, but a bearer
    dev = BearerAuth(None)
    dev.check("Bearer anything")
    with pytest.raises(HttpError):
        dev.check(None)


def test_the_scheduler_listener_policy_per_route() -> None:
    assert policy_of("/proxy/query") == SSP and policy_of("/job/result") == SSP
    assert policy_of("/ssp/register") == SSP_SELF and policy_of("/ssp/heartbeat") == SSP_SELF
    assert policy_of("/ssp/catchup") == SSP_SELF  # a warm start's WAL events: its own only
    assert policy_of("/ssp/bootstrap-progress") == OPTIONAL
    for master in ("/admin/resync", "/backends", "/backup/restore"):
        assert policy_of(master) == MASTER, master
    for open_route in ("/ingest", "/view/register", "/view/unregister", "/health",
                       "/health/snapshot", "/metrics", "/info", None):
        assert policy_of(open_route) == OPEN, open_route


@pytest.mark.parametrize("path", [
    "../admin", "/../admin", "a/../../b", "%2e%2e/admin", "%2E%2E/x", "a/%2e%2e/%2e%2e/b",
    "%252e%252e/x", "..%2fadmin", "..\\admin", "a/./b", "a//b", "a\nb",
])
def test_a_job_path_may_not_leave_the_backends_base_path(path: str) -> None:
    with pytest.raises(JobPathError):
        job_url("http://backend/api", path)


def test_ordinary_job_paths_still_join() -> None:
    assert job_url("http://b/api/", "/run") == "http://b/api/run"
    assert job_url("http://b/api", "send/1?x=../y") == "http://b/api/send/1?x=../y"
    assert job_url("http://b/api", "a.b/c..d") == "http://b/api/a.b/c..d"
    # leading slashes are the join's: never a new authority
    assert job_url("http://b/api", "//evil.example/x") == "http://b/api/evil.example/x"


def test_last_active_at_in_the_far_future_or_unreadable_counts_as_absent() -> None:
    now = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert activity_ms(datetime(2999, 1, 1, tzinfo=UTC), now) is None
    assert activity_ms("2999-01-01T00:00:00Z", now) is None
    assert activity_ms("whenever", now) is None
    assert activity_ms(now + ACTIVITY_SKEW_MS // 2, now) is None  # not a date at all
    soon = datetime.fromtimestamp((now + ACTIVITY_SKEW_MS // 2) / 1000, tz=UTC)
    assert activity_ms(soon, now) == now + ACTIVITY_SKEW_MS // 2  # clock skew is fine


def test_credential_params_are_never_dumped_and_a_restore_keeps_the_databases_own() -> None:
    info = {"params": {"_00_ingest_token": "DEFINE PARAM $_00_ingest_token VALUE 'svc1.x'",
                       "_00_ingest_secret": "DEFINE PARAM $_00_ingest_secret VALUE 'old'",
                       "_00_ingest_url": "DEFINE PARAM $_00_ingest_url VALUE 'http://x'",
                       "app": "DEFINE PARAM $app VALUE 1"}, "tables": {}}
    dumped = without_credentials(info)
    assert set(dumped["params"]) == {"_00_ingest_url", "app"}
    assert set(info["params"]) >= CREDENTIAL_PARAMS  # the input is left as it was
    plan = SchemaPlan(info, {}, info)  # a dump of an older release that still had them
    statements = plan.wipe() + plan.database_level()
    assert not any("_00_ingest_token" in s or "_00_ingest_secret" in s for s in statements)
    assert any("$app" in s for s in statements)


RULE = "owner = $auth OR $auth.role INSIDE ['admin']"


def test_select_rules_are_anded_into_every_query_on_their_table() -> None:
    rules = {"post": _rule_text(RULE), "comment": "visible = true"}
    text = ("SELECT *, (SELECT * FROM comment WHERE post = $parent.id ORDER BY at LIMIT 3) "
            "AS c FROM post WHERE n > 1 AND limit = 2 ORDER BY n DESC LIMIT 5")
    out = with_rules(text, rules)
    q = parse(out)
    assert q.where == ("and", parse(f"SELECT * FROM t WHERE {text.split(' WHERE ', 2)[2]}"
                                    .split(" ORDER")[0]).where,
                       parse("SELECT * FROM t WHERE owner = $auth.id OR $auth.role "
                             "INSIDE ['admin']").where)
    assert q.items[1].sub is not None and q.items[1].sub.where[0] == "and"
    assert q.order == parse(text).order and q.limit == parse(text).limit
    # no WHERE: one is added; a table without a rule is left alone
    assert parse(with_rules("SELECT * FROM post", rules)).where is not None
    assert with_rules("SELECT * FROM other WHERE x = 1", rules) == \
        "SELECT * FROM other WHERE x = 1"


def test_rules_the_engine_cannot_evaluate_are_refused() -> None:
    for rule in ("$token.sub = owner", "$session.ip = '1'"):
        with pytest.raises(PermissionRefused):
            _rule_text(rule)
