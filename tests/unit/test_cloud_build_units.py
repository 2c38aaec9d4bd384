"""Apps built from a Containerfile and static sites, up to the executor: the plan (roles,
tags, refusals), the Containerfile's base images, and the static site server over real HTTP
in-process. The builds themselves run against a real daemon in
tests/integration/test_cloud_docker.py."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cloud.approles import AppPlanError, describe, needs_containers, plan_app_roles
from cloud.imagebuild import base_images, build_tag, inside
from cloud.secret import Secret
from cloud.staticsite import SiteHandler
from cloud.staticsite import main as site_main
from project.appconfig import AppConfig, app_rules
from project.rootconfig import load_project


def _project(tmp: Path, web: str, site: str = "") -> Any:
    apps = "apps:\n  web: {path: web}\n" + ("  site: {path: site}\n" if site else "")
    (tmp / "project.yml").write_text(apps)
    (tmp / "web").mkdir()
    (tmp / "web" / "project.yml").write_text(web)
    (tmp / "web" / "Containerfile").write_text("FROM base:1\n")
    if site:
        (tmp / "site").mkdir()
        (tmp / "site" / "project.yml").write_text(site)
    return load_project(tmp / "project.yml")


def _plan(loaded: Any, **kw: Any) -> list[Any]:
    return plan_app_roles(loaded, deployment="dep_x", base_env={"PATH": "/bin"},
                          platform={"": {"ALL": Secret("a", "fp-a")}},
                          vault={"TOKEN": Secret("t0k", "fp-t")},
                          fingerprint=lambda v: f"fp-{v}", slug="Shop", **kw)


def test_a_containerfile_app_is_an_image_role_with_its_build(tmp_path: Path) -> None:
    loaded = _project(tmp_path, "type: frontend\nscope: cloudOnly\n"
                      "deploy: {containerfile: Containerfile, context: web, port: 4000,"
                      " cmd: 'serve --fast', build_args: [{NOTE: n1}, {vault: [TOKEN]}]}\n")
    assert needs_containers(loaded)
    trees: list[Path] = []

    def tree_of(p: Path) -> str:
        trees.append(p)
        return "tree-1"
    [web] = _plan(loaded, tree_of=tree_of)
    assert trees == [(tmp_path / "web").resolve()]  # the context's content identifies it
    assert web.build is not None and web.image == web.build.tag
    assert web.build.tag.startswith("svc-build-shop-web:")
    assert web.build.containerfile == "Containerfile"
    assert web.build.build_args == {"NOTE": "n1", "TOKEN": "t0k"}
    # build arguments reach the build only; the platform's variables reach the app only
    assert "NOTE" not in web.env and "TOKEN" not in web.env and web.env["ALL"] == "a"
    assert "ALL" not in web.build.build_args
    assert "t0k" not in repr(web) and "t0k" not in repr(web.build)
    assert web.entrypoint == ("/bin/sh", "-c", "serve --fast") and web.argv == ()
    assert web.health_url is None and web.env["PORT"] != "4000"  # a port per deployment
    assert "PATH" not in web.env  # an image's variables are its own, as for container apps
    assert "image built from Containerfile" in describe([web])[0]
    # the same inputs give the same tag; another context tree or build argument another
    [again] = _plan(loaded, tree_of=lambda p: "tree-1")
    [other] = _plan(loaded, tree_of=lambda p: "tree-2")
    assert again.image == web.image != other.image


def test_a_build_argument_changes_the_tag_by_its_fingerprint_not_its_value() -> None:
    one = build_tag("p", "web", "t", "Containerfile", {"A": "fp1"})
    assert one == build_tag("p", "web", "t", "Containerfile", {"A": "fp1"})
    assert one != build_tag("p", "web", "t", "Containerfile", {"A": "fp2"})
    assert one != build_tag("p", "web", "t", "other/Containerfile", {"A": "fp1"})
    assert build_tag("My Proj", "Web_1", "t", "C", {}).startswith("svc-build-my-proj-web_1:")


@pytest.mark.parametrize("deploy, says", [
    ("{containerfile: Containerfile, context: ../..}", "deploy.context '../..' is not a "
     "directory inside the project"),
    ("{containerfile: ../Containerfile}", "deploy.containerfile '../Containerfile' is not a "
     "file of the build context"),
    ("{containerfile: Nope}", "deploy.containerfile 'Nope' is not a file"),
    ("{containerfile: Containerfile, build_args: {vault: [MISSING]}}", "MISSING"),
])
def test_a_containerfile_app_that_cannot_be_built_is_refused_at_plan(
        tmp_path: Path, deploy: str, says: str) -> None:
    loaded = _project(tmp_path, f"type: frontend\ndeploy: {deploy}\n")
    with pytest.raises(AppPlanError) as e:
        _plan(loaded, tree_of=lambda p: "t")
    assert e.value.app == "web" and says in e.value.message, e.value.message


def test_building_without_a_daemon_is_refused_at_plan(tmp_path: Path) -> None:
    loaded = _project(tmp_path, "type: frontend\ndeploy: {containerfile: Containerfile}\n")
    with pytest.raises(AppPlanError, match="building its image .deploy.containerfile. needs "
                       "a Docker daemon: no daemon here"):
        _plan(loaded, no_containers="no daemon here")


def test_a_static_app_is_a_build_step_then_the_platforms_server(tmp_path: Path) -> None:
    loaded = _project(tmp_path, "type: frontend\ndev: 'true'\n",
                      "type: frontend\nenv: {G: hi}\n"
                      "deploy: {static: {build: 'make site', dir: public}}\n")
    assert not needs_containers(loaded)
    roles = {r.name: r for r in _plan(loaded)}
    build, site = roles["app-site.build"], roles["app-site"]
    assert build.oneshot and build.argv == ("sh", "-c", "make site")
    assert build.cwd == str(tmp_path / "site") and build.env["G"] == "hi"
    assert site.argv[-3:] == ("-m", "cloud.staticsite", str((tmp_path / "site" / "public")
                                                            .resolve()))
    assert site.health_url == f"http://127.0.0.1:{site.env['PORT']}/"
    assert site.ready is not None and site.ready(404, b"") and not site.ready(500, b"")
    assert list(roles).index("app-site.build") < list(roles).index("app-site")
    # without a build command, only the server
    (tmp_path / "site" / "project.yml").write_text(
        "type: frontend\ndeploy: {static: {}}\n")
    plain = [r.name for r in _plan(load_project(tmp_path / "project.yml"))]
    assert "app-site.build" not in plain and "app-site" in plain


def test_a_static_dir_outside_the_app_is_refused(tmp_path: Path) -> None:
    loaded = _project(tmp_path, "type: frontend\ndev: 'true'\n",
                      "type: frontend\ndeploy: {static: {dir: ../web}}\n")
    with pytest.raises(AppPlanError, match="deploy.static.dir '../web' must be a directory "
                       "below the app's directory"):
        _plan(loaded)


def test_static_and_containerfile_together_are_invalid() -> None:
    cfg = AppConfig.model_validate({"type": "frontend", "deploy": {
        "containerfile": "Containerfile", "static": {"dir": "dist"}}})
    assert ("deploy.static", "static site hosting is instead of an image: not with "
            "deploy.containerfile") in app_rules(cfg)


def test_base_images_of_a_containerfile() -> None:
    text = ("# syntax\nFROM --platform=linux/amd64 svc-hostroot:1 AS base\n"
            "from base\nFROM scratch\nFROM ${BASE}\nFROM \\\n  reg.example/x:2 as two\n"
            "COPY --from=two / /\nFROM two\nFROM svc-hostroot:1\n")
    assert base_images(text) == ["svc-hostroot:1", "reg.example/x:2"]


def test_inside_keeps_paths_under_the_root(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "link").symlink_to("/etc")
    assert inside(tmp_path, "a") == (tmp_path / "a").resolve()
    assert inside(tmp_path, ".") == tmp_path.resolve()
    assert inside(tmp_path, "../x") is None and inside(tmp_path, "/etc") is None
    assert inside(tmp_path, "link") is None


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "dist"
    (root / "docs").mkdir(parents=True)
    (root / "index.html").write_text("<h1>home</h1>")
    (root / "docs" / "index.html").write_text("docs")
    (root / "empty").mkdir()
    (root / "app.js").write_text("let x = 1")
    (tmp_path / "secret.txt").write_text("not for you")
    (root / "leak").symlink_to(tmp_path / "secret.txt")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SiteHandler, directory=str(root)))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str, method: str = "GET") -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, data=b"x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), bytes(e.read())


def test_the_static_server_serves_files_and_nothing_else(site: tuple[str, Path]) -> None:
    url, _ = site
    assert _get(url + "/") == (200, b"<h1>home</h1>")
    assert _get(url + "/docs/") == (200, b"docs")
    assert _get(url + "/app.js") == (200, b"let x = 1")
    assert _get(url + "/empty/")[0] == 404  # no directory listing
    assert _get(url + "/leak")[0] == 404  # a link out of the directory serves nothing
    assert _get(url + "/../secret.txt")[0] == 404
    assert _get(url + "/%2e%2e/secret.txt")[0] == 404
    assert _get(url + "/missing")[0] == 404
    assert _get(url + "/", "POST")[0] == 405


def test_the_static_server_refuses_a_missing_directory(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert site_main([str(tmp_path / "dist"), "--port", "1"]) == 1
    assert "does not exist" in capsys.readouterr().err
