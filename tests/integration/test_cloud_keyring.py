"""Rotating the vault's key ring without losing a value: ``svc-cloud`` restarted with a new
primary key in front of the old one re-wraps every tenant data key under it (the values keep
decrypting throughout), after which the old key can leave the ring. (A ring that cannot open
a tenant's data key answers 503 ``keyring``: tests/unit/test_cloud_units.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cloud.crypto import KeyRing
from tests.support.cloud_stack import Cloud, digest, make_cloud
from tests.support.procs import DbHost

pytestmark = pytest.mark.slow

VALUE = "rotation-survivor-value"


def _reveal(c: Cloud, session: str) -> str:
    got = c.ok("GET", "/v1/projects/rotated/vault/DB_PASSWORD", session)
    return str(got["secret"]["value"]["value"])


def _data_keys(c: Cloud) -> dict[str, int]:
    return dict(c.ok("GET", "/v1/health")["keyring"]["data_keys_by_ring_key"])


def test_the_key_ring_rotates_without_downtime_for_values(host: DbHost, tmp_path: Path) -> None:
    k1, k2 = KeyRing.generate_entry("k1"), KeyRing.generate_entry("k2")
    c = make_cloud(host, tmp_path, "rotation", SVC_CLOUD_KEYRING=k1)
    env = c.env
    c.start()
    try:
        _, session, _ = c.user("rotate")
        c.ok("POST", "/v1/projects", session, {"slug": "rotated"})
        c.ok("PUT", "/v1/projects/rotated/vault/DB_PASSWORD", session, {"value": VALUE})
        assert _data_keys(c) == {"k1": 1}
    finally:
        c.stop()
    for ring, want in ((f"{k2},{k1}", {"k2": 1}), (k2, {"k2": 1})):
        env["SVC_CLOUD_KEYRING"] = ring
        c.start()
        try:
            assert digest(_reveal(c, session)) == digest(VALUE)
            deadline = time.monotonic() + 30
            while _data_keys(c) != want:  # the worker re-wraps at start
                assert time.monotonic() < deadline, _data_keys(c)
                time.sleep(0.2)
        finally:
            c.stop()
    assert c.log_text().count(VALUE) == 0
