"""ipc.publiccors: the public routes readable from any origin, nothing else."""

from __future__ import annotations

import falcon
import falcon.asgi
import falcon.testing

from ipc.publiccors import PublicCors


class _Refuse:
    """Stands for the listeners' bearer check: every request without a token is refused."""

    async def process_request(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        if req.path != "/health" and not req.get_header("Authorization"):
            raise falcon.HTTPUnauthorized()


class _Ok:
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = {"ok": True}


def _client() -> falcon.testing.TestClient:
    app = falcon.asgi.App(middleware=[PublicCors(["/health"]), _Refuse()])
    app.add_route("/health", _Ok())
    app.add_route("/metrics", _Ok())
    return falcon.testing.TestClient(app)


def test_health_is_readable_from_any_origin_without_credentials() -> None:
    r = _client().simulate_get("/health", headers={"Origin": "http://app.example"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers


def test_the_preflight_is_answered_before_authentication() -> None:
    r = _client().simulate_options("/health", headers={
        "Origin": "http://app.example", "Access-Control-Request-Method": "GET"})
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["access-control-allow-methods"] == "GET, HEAD, OPTIONS"


def test_other_routes_get_no_cors_header_and_stay_behind_the_check() -> None:
    c = _client()
    r = c.simulate_get("/metrics", headers={"Origin": "http://app.example"})
    assert r.status_code == 401 and "access-control-allow-origin" not in r.headers
    r = c.simulate_options("/metrics", headers={"Origin": "http://app.example"})
    assert r.status_code == 401 and "access-control-allow-origin" not in r.headers
    r = c.simulate_get("/metrics", headers={"Authorization": "Bearer x"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
