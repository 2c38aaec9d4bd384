"""The control plane's pure parts: envelope encryption and its bindings, the key ring, the
secret type and its one rendering point, cursors, scopes, the tool table (names, scopes,
confirm, the size of tools/list), input checks and the configuration."""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import re
from pathlib import Path

import mcp_types as types
import pytest

from cloud.api import validate
from cloud.config import CloudConfig, ConfigError
from cloud.crypto import DecryptError, KeyRing, KeyRingError, decrypt, encrypt, value_aad
from cloud.domains import check_hostname
from cloud.errors import BadRequest
from cloud.mcp import INSTRUCTIONS, tool_of
from cloud.ops import OPS, op_named
from cloud.paging import Cursors
from cloud.repolinks import check_branch, check_url
from cloud.scopes import DEFAULT_SCOPES, READ_SCOPES, REVEAL, SCOPES, WRITE_SCOPES, expand
from cloud.secret import Fingerprinter, dumps, render, revealed_keys

SENTINEL = "unit-sentinel-9d1c"
#: an agent reads tools/list on every session: the budget for an mcp:full token (6,000 for
#: part 1's 48 tools; part 2's five backup tools, forwarded to the deployed scheduler, take
#: about 520 more)
TOOLS_LIST_TOKEN_BUDGET = 6500


def estimated_tokens(text: str) -> int:
    """A conservative token estimate for JSON text: one token per 3 bytes (BPE tokenizers of
    current models average 3.5 to 4 bytes per token on JSON schemas; no tokenizer model can
    be loaded offline here)."""
    return -(-len(text.encode()) // 3)


# ---------------------------------------------------------------------- crypto
def _aad(**kw: object) -> bytes:
    base = {"tenant": "ten_a", "project": "prj_a", "kind": "vault", "environment": "production",
            "app": "", "key": "K", "version": 1}
    base.update(kw)
    return value_aad(**base)  # type: ignore[arg-type]


def test_a_value_decrypts_only_in_the_place_it_was_written_for() -> None:
    ring = KeyRing.parse(KeyRing.generate_entry("k1"))
    dek, _ = ring.new_data_key("ten_a")
    blob = encrypt(dek, _aad(), SENTINEL)
    assert decrypt(dek, _aad(), blob) == SENTINEL
    for moved in ({"tenant": "ten_b"}, {"project": "prj_b"}, {"kind": "env"},
                  {"environment": "staging"}, {"app": "web"}, {"key": "K2"}, {"version": 2}):
        with pytest.raises(DecryptError):
            decrypt(dek, _aad(**moved), blob)
    other, _ = ring.new_data_key("ten_a")
    with pytest.raises(DecryptError):
        decrypt(other, _aad(), blob)
    assert SENTINEL.encode() not in base64.b64decode(blob)


def test_associated_data_is_unambiguous() -> None:
    assert value_aad("a", "b|c", "env", "e", "", "k", 1) != value_aad("a|b", "c", "env", "e",
                                                                      "", "k", 1)


def test_data_keys_unwrap_after_the_ring_rotates() -> None:
    old = KeyRing.generate_entry("k1")
    ring1 = KeyRing.parse(old)
    dek, wrapped = ring1.new_data_key("ten_a")
    ring2 = KeyRing.parse(KeyRing.generate_entry("k2") + "," + old)
    assert ring2.primary == "k2"
    assert ring2.unwrap("ten_a", wrapped) == dek
    rewrapped = ring2.wrap("ten_a", dek)
    assert rewrapped.kid == "k2"
    ring3 = KeyRing.parse(KeyRing.generate_entry("k2"))
    with pytest.raises(DecryptError):  # a ring without k1 cannot unwrap the old wrapping
        ring3.unwrap("ten_a", wrapped)
    with pytest.raises(DecryptError):  # a wrapped key copied to another tenant
        ring2.unwrap("ten_b", rewrapped)


@pytest.mark.parametrize("text", ["", "k1", "k1:notbase64!", "k1:" + base64.b64encode(
    b"short").decode(), "bad id:" + base64.b64encode(bytes(range(32))).decode()],
    ids=["empty", "no-key", "not-base64", "short", "bad-id"])
def test_a_malformed_key_ring_is_refused_without_echoing_material(text: str) -> None:
    with pytest.raises(KeyRingError) as e:
        KeyRing.parse(text)
    material = text.partition(":")[2]
    if material:
        assert material not in str(e.value)


# ---------------------------------------------------------------------- secret
def test_a_secret_never_prints_its_value(caplog: pytest.LogCaptureFixture) -> None:
    s = Fingerprinter(b"k" * 32).secret("ten_a", SENTINEL)
    shown = [repr(s), str(s), f"{s}", f"{s!r}", f"{s:>10}", str([s]), str({"v": s})]
    assert all(SENTINEL not in x for x in shown)
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("value %s %r", s, s)
    assert SENTINEL not in caplog.text
    with pytest.raises(TypeError):
        pickle.dumps(s)
    with pytest.raises(TypeError):
        json.dumps({"v": s})


def test_render_is_the_one_place_a_secret_turns_into_output() -> None:
    fp = Fingerprinter(b"k" * 32)
    doc = {"items": [{"key": "A", "value": fp.secret("t", SENTINEL)}],
           "nested": {"any_field_name": fp.secret("t", SENTINEL)}}
    hidden = dumps(doc, reveal=False)
    assert SENTINEL not in hidden
    assert render(doc, False)["nested"]["any_field_name"] == {
        "redacted": True, "fingerprint": fp.of("t", SENTINEL)}
    shown = render(doc, True)
    assert shown["items"][0]["value"]["value"] == SENTINEL
    assert revealed_keys(doc) == ["A"]
    assert revealed_keys({"items": []}) is None


def test_fingerprints_are_keyed_and_per_tenant() -> None:
    a, b = Fingerprinter(b"a" * 32), Fingerprinter(b"b" * 32)
    assert a.of("t", "v") == a.of("t", "v")
    assert a.of("t", "v") != b.of("t", "v")
    assert a.of("t1", "v") != a.of("t2", "v")


# ---------------------------------------------------------------------- cursors
def test_a_cursor_round_trips_only_in_its_own_list() -> None:
    c = Cursors(b"x" * 32)
    cur = c.encode("env_list|ten_a|{}", "KEY_19")
    assert c.decode("env_list|ten_a|{}", cur) == "KEY_19"
    for bad_list, bad in (("env_list|ten_b|{}", cur), ("env_list|ten_a|{}", cur + "x"),
                          ("env_list|ten_a|{}", "x.y"), ("env_list|ten_a|{}", 7)):
        with pytest.raises(BadRequest):
            c.decode(bad_list, bad)
    forged = Cursors(b"y" * 32).encode("env_list|ten_a|{}", "KEY_00")
    with pytest.raises(BadRequest):
        c.decode("env_list|ten_a|{}", forged)


# ---------------------------------------------------------------------- scopes and tools
def test_scopes_expand_as_the_spec_says() -> None:
    assert expand(["mcp:read"]) == READ_SCOPES
    assert expand(["mcp:full"]) == READ_SCOPES | WRITE_SCOPES
    assert REVEAL not in expand(["mcp:full"])
    assert expand(DEFAULT_SCOPES) == READ_SCOPES  # the default is read-only
    assert {"logs:read", "deployments:write", "backups:write"} <= SCOPES


def test_every_tool_has_a_valid_name_one_scope_and_a_route() -> None:
    routes = set()
    for o in OPS:
        assert re.fullmatch(r"[A-Za-z0-9._-]{1,128}", o.name), o.name
        assert re.fullmatch(r"[a-z]+_[a-z_]+", o.name), o.name
        assert o.scope in READ_SCOPES | WRITE_SCOPES, o.name
        assert (o.scope in READ_SCOPES) is o.read_only, o.name
        assert (o.method, o.path) not in routes, o.name
        routes.add((o.method, o.path))
        schema = o.input_schema()
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        if o.kind == "destructive":
            assert "confirm" in schema["required"], o.name
        for name in re.findall(r"{(\w+)}", o.path):
            assert name in schema["properties"], (o.name, name)


def test_tools_list_for_an_mcp_full_token_is_small() -> None:
    granted = expand(["mcp:full"])
    tools = [tool_of(o) for o in OPS if o.scope in granted]
    doc = types.ListToolsResult(tools=tools).model_dump(mode="json", by_alias=True,
                                                        exclude_none=True)
    text = json.dumps(doc, separators=(",", ":")) + INSTRUCTIONS
    tokens = estimated_tokens(text)
    print(f"tools/list for mcp:full: {len(tools)} tools, {len(text)} bytes, "
          f"~{tokens} tokens (bytes/3)")
    assert tokens <= TOOLS_LIST_TOKEN_BUDGET


def test_argument_errors_name_the_rule_never_the_value() -> None:
    op = op_named("vault_set")
    assert op is not None
    with pytest.raises(BadRequest) as e:
        validate(op, {"project": "p", "key": "K", "value": SENTINEL * 2000, "confirm": 1})
    assert SENTINEL not in e.value.message
    with pytest.raises(BadRequest) as e:
        validate(op, {"project": "p", "key": "K", "value": 5})
    assert e.value.message == "value: must be of type string"
    with pytest.raises(BadRequest) as e:
        validate(op, {"project": "p", "key": "K", "value": "v", SENTINEL: 1})
    assert "unknown argument" in e.value.message
    env = op_named("env_set")
    assert env is not None
    with pytest.raises(BadRequest) as e:
        validate(env, {"project": "p", "vars": {"K": 7}})
    assert str(7) not in e.value.message.split(":")[0]


# ---------------------------------------------------------------------- input checks
@pytest.mark.parametrize("host,want", [("App.Example.COM.", "app.example.com"),
                                       ("bücher.example", "xn--bcher-kva.example")])
def test_hostnames_are_normalised(host: str, want: str) -> None:
    assert check_hostname(host) == want


@pytest.mark.parametrize("host", ["localhost", "10.0.0.1", "-a.example", "a..example",
                                  "a" * 64 + ".example", "x.example/path", 5])
def test_bad_hostnames_are_refused(host: object) -> None:
    with pytest.raises(BadRequest):
        check_hostname(host)


def test_repository_urls_and_branches() -> None:
    assert check_url("https://git.example/r.git", False)
    assert check_url("git@git.example:org/r.git", False)
    assert check_url("/srv/r.git", True) and check_url("file:///srv/r.git", True)
    for bad in ("/srv/r.git", "file:///srv/r.git", "ext::sh -c x", "-u x",
                "https://u:p@h/r.git", "https://tok@h/r.git", "http://h/r.git", ""):
        with pytest.raises(BadRequest):
            check_url(bad, False)
    assert check_branch(None) == "main" and check_branch("release/1.2") == "release/1.2"
    for bad in ("a..b", "-x", "a b", "x.lock", "/a", "a//b"):
        with pytest.raises(BadRequest):
            check_branch(bad)


# ---------------------------------------------------------------------- config
def _env(**kw: str) -> dict[str, str]:
    env = {"SVC_CLOUD_DB_URL": "ws://127.0.0.1:1", "SVC_CLOUD_KEYRING":
           KeyRing.generate_entry("k1"),
           "SVC_CLOUD_FINGERPRINT_KEY": base64.b64encode(os.urandom(32)).decode()}
    env.update(kw)
    return env


def test_the_vault_needs_its_own_key_ring() -> None:
    with pytest.raises(ConfigError, match="SVC_CLOUD_KEYRING"):
        CloudConfig.from_env(_env(SVC_CLOUD_KEYRING="", SVC_AUTH_SECRET="x" * 40))
    with pytest.raises(ConfigError, match="FINGERPRINT"):
        CloudConfig.from_env(_env(SVC_CLOUD_FINGERPRINT_KEY=""))
    cfg = CloudConfig.from_env(_env(SVC_CLOUD_BIND="0.0.0.0:7000", SVC_CLOUD_LIMITS=
                                    '{"projects": 3}', SVC_CLOUD_PRICES=
                                    '{"currency": "EUR", "api_requests": 0.5}'))
    assert cfg.port == 7000 and cfg.limits["projects"] == 3 and cfg.prices is not None
    assert cfg.db.namespace == "svc_cloud" and cfg.db.database == "control"
    assert "KEYRING" not in repr(cfg) and cfg.keyring.primary in ("k1",)


@pytest.mark.parametrize("name,value", [("SVC_CLOUD_LIMITS", '{"nope": 1}'),
                                        ("SVC_CLOUD_LIMITS", '{"projects": -1}'),
                                        ("SVC_CLOUD_PRICES", '{"api_requests": 1}'),
                                        ("SVC_CLOUD_PRICES", '{"currency": "X", "z": 1}'),
                                        ("SVC_CLOUD_SIGNUP", "maybe"),
                                        ("SVC_CLOUD_BIND", "nohostport:x"),
                                        ("SVC_CLOUD_REPO_POLL_SECS", "-1")])
def test_bad_settings_are_refused(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        CloudConfig.from_env(_env(**{name: value}))


def test_every_setting_is_documented() -> None:
    import cloud.config

    source = Path(cloud.config.__file__).read_text()
    doc = cloud.config.__doc__ or ""
    body = source[source.index('"""', 10) + 3:]  # after the module docstring
    read = set(re.findall(r'"(SVC_CLOUD_\w+)"', body))
    table = set(re.findall(r"``(SVC_CLOUD_\w+)``", doc))
    assert read and read <= table | {"SVC_CLOUD_DB_PASS"}, read - table
    readme = (Path(cloud.config.__file__).parent / "README.md").read_text()
    assert "SVC_CLOUD_KEYRING" in readme and "SVC_CLOUD_FINGERPRINT_KEY" in readme


class _OneRowStore:
    """The store port of ``DataKeys``: one stored ``tenant_key`` row."""

    def __init__(self, row: dict[str, object]) -> None:
        self.row = row

    async def get(self, table: str, key: str) -> dict[str, object]:
        return self.row


async def test_a_ring_without_the_tenants_key_answers_503_keyring() -> None:
    from cloud.errors import Unavailable
    from cloud.keys import DataKeys

    old = KeyRing.parse(KeyRing.generate_entry("k1"))
    _, wrapped = old.new_data_key("ten_a")
    other = KeyRing.parse(KeyRing.generate_entry("k3"))
    keys = DataKeys(_OneRowStore({"kid": wrapped.kid, "blob": wrapped.blob}), other)  # type: ignore[arg-type]
    with pytest.raises(Unavailable) as e:
        await keys.get("ten_a")
    assert e.value.status == 503 and e.value.code == "keyring"
    good = DataKeys(_OneRowStore({"kid": wrapped.kid, "blob": wrapped.blob}), old)  # type: ignore[arg-type]
    assert len(await good.get("ten_a")) == 32
