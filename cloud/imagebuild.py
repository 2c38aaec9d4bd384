"""Images built from an app's Containerfile (``project.yml`` ``deploy.containerfile``) on the
Docker Engine, for the platform's ``building`` phase.

Choices (cloud/README.md, "Apps"):

- **No network.** Nothing is pulled: every base image a ``FROM`` names must already be on the
  daemon (the tests import theirs from a local tarball), and a missing one is refused before
  the build starts, naming it. The build's own steps run with ``network_mode=none``, so a
  ``RUN`` that needs the network fails, and the build's error says which command.
- **Same inputs, same image.** The tag is a hash of what the build reads (the git tree of the
  context, the Containerfile's path, the build arguments' fingerprints, never their values):
  a deployment whose inputs were built before reuses the image; an env change or a commit
  that touches another app does not rebuild it.
- **Logs.** The daemon's build stream goes line by line to the deploy log; a failed build
  fails the deployment with the build's error and its last lines.
- **Old images go.** Once a deployment runs, the images built for the project that neither
  it nor the deployment it superseded (the one a rollback goes back to first) runs are
  removed (:func:`prune_builds`): by the labels this platform put on them, so another
  platform's or a person's images on the same daemon are never touched. An older rollback
  builds its image again from its commit.
- **Stopping a build** (a deployment cancelled while ``building``): :class:`BuildStop` shuts
  down the build request's connection. The daemon ends a build whose client went away (as
  when ``docker build`` is interrupted): it kills and removes the step's container, and
  the tag is never written.

The SDK is blocking: :func:`build_image` runs in a thread (the executor's ``build``).
"""

from __future__ import annotations

import hashlib
import re
import socket
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BuildCancelled", "BuildFailed", "BuildStop", "ImageBuild", "base_images",
           "build_image", "build_tag", "inside", "prune_builds"]

#: seconds the daemon may stay silent during a build before it counts as stuck
BUILD_READ_TIMEOUT = 900
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NAME_BAD = re.compile(r"[^a-z0-9_.-]+")


class BuildFailed(Exception):
    """A build that could not run or did not succeed: ``message`` is the reason (the build's
    own error when it ran), ``tail`` its last lines."""

    def __init__(self, message: str, tail: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.tail = tail or []


class BuildCancelled(BuildFailed):
    """The build was stopped through its :class:`BuildStop` before it made the image."""


def _socket_of(response: Any) -> socket.socket | None:
    """The socket under a streamed ``requests`` response of the docker SDK (its urllib3
    response keeps the connection while the body is read)."""
    raw = getattr(response, "raw", None)
    conn = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
    sock = getattr(conn, "sock", None)
    if sock is None:  # an older urllib3: http.client's response reads a socket file
        fp = getattr(getattr(raw, "_fp", None), "fp", None)
        sock = getattr(getattr(fp, "raw", None), "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


class BuildStop:
    """Stops one build from another thread (see the module docstring). Its :meth:`hook` is
    a ``requests`` response hook on the client the build uses (a client of its own: the
    hook sees every response of that client), catching the build request's connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.stopped = False

    def hook(self, response: Any, *args: Any, **kwargs: Any) -> Any:
        if "/build" in str(getattr(response, "url", "")):
            with self._lock:
                self._sock = _socket_of(response)
                if self.stopped:
                    self._shut()
        return response

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            try:
                # wakes the thread blocked reading the stream, and the daemon sees EOF
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed: the build ended anyway


@dataclass(frozen=True)
class ImageBuild:
    """One image to build: ``context`` is a directory, ``containerfile`` a path inside it
    (relative, as the daemon reads it from the context's archive)."""

    app: str
    context: str
    containerfile: str
    tag: str
    build_args: dict[str, str] = field(default_factory=dict, repr=False)
    labels: dict[str, str] = field(default_factory=dict)


def inside(root: Path, rel: str) -> Path | None:
    """``root / rel`` resolved, or None when it leaves ``root`` (``..``, an absolute path, a
    symbolic link pointing out)."""
    base = root.resolve()
    target = (base / rel).resolve()
    return target if target == base or base in target.parents else None


def build_tag(project: str, app: str, tree: str, containerfile: str,
              arg_fingerprints: Mapping[str, str]) -> str:
    """``svc-build-<project>-<app>:<hash>``: the hash of the build's inputs (see the module
    docstring)."""
    h = hashlib.sha256()
    for part in (tree, containerfile, *(f"{k}={v}" for k, v in
                                         sorted(arg_fingerprints.items()))):
        h.update(part.encode())
        h.update(b"\0")
    repo = _NAME_BAD.sub("-", f"svc-build-{project}-{app}".lower()).strip("-.")
    return f"{repo}:{h.hexdigest()[:24]}"


def base_images(text: str) -> list[str]:
    """The images a Containerfile's ``FROM`` lines start from, leaving out ``scratch``,
    earlier stages (``AS name``) and references made of build arguments (``$BASE``: only
    the build can resolve those)."""
    stages: set[str] = set()
    out: list[str] = []
    joined = re.sub(r"\\\r?\n", " ", text)
    for raw in joined.splitlines():
        words = raw.strip().split()
        if not words or words[0].upper() != "FROM":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if not args:
            continue
        ref = args[0]
        if len(args) >= 3 and args[1].upper() == "AS":
            stages.add(args[2].lower())
        if ref.lower() == "scratch" or ref.lower() in stages or "$" in ref:
            continue
        if ref not in out:
            out.append(ref)
    return out


def _have(client: Any, ref: str) -> bool:
    import docker.errors

    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_image(client: Any, spec: ImageBuild, emit: Callable[[str], None],
                stop: BuildStop | None = None) -> bool:
    """Build ``spec`` unless its tag is already on the daemon; True when it was built.
    BuildFailed with the reason otherwise; BuildCancelled once ``stop`` was used (``client``
    must then be this build's own: ``stop`` hooks every response of it)."""
    if stop is not None:
        client.api.hooks["response"].append(stop.hook)
    try:
        built = _build(client, spec, emit, stop)
    except Exception as e:
        # whatever the cut connection surfaced as (the SDK reads the raw stream itself)
        if stop is not None and stop.stopped:
            raise BuildCancelled("the build was stopped",
                                 e.tail if isinstance(e, BuildFailed) else None) from None
        raise
    if stop is not None and stop.stopped and built:
        raise BuildCancelled("the build was stopped")  # the image came first: it is kept
    return built


def _build(client: Any, spec: ImageBuild, emit: Callable[[str], None],
           stop: BuildStop | None) -> bool:
    import docker.errors

    if _have(client, spec.tag):
        emit(f"image {spec.tag} is already built from the same inputs: not rebuilt")
        return False
    context = Path(spec.context)
    cf = inside(context, spec.containerfile)
    if cf is None or not cf.is_file():
        raise BuildFailed(f"Containerfile {spec.containerfile} is not a file in the build "
                          "context")
    try:
        text = cf.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise BuildFailed(f"Containerfile {spec.containerfile} cannot be read: "
                          f"{e.strerror}") from None
    missing = [ref for ref in base_images(text) if not _have(client, ref)]
    if missing:
        raise BuildFailed(f"base image {', '.join(missing)} is not on the Docker daemon, and "
                          "the platform pulls nothing (builds have no network): load or "
                          "import it there first")
    emit(f"building image {spec.tag} from {spec.containerfile} (no network)")
    tail: list[str] = []
    partial = ""
    try:
        stream = client.api.build(
            path=str(context), dockerfile=spec.containerfile, tag=spec.tag, rm=True,
            forcerm=True, pull=False, network_mode="none", buildargs=spec.build_args or None,
            labels=spec.labels or None, decode=True, timeout=BUILD_READ_TIMEOUT)
        for chunk in stream:
            if stop is not None and stop.stopped:
                raise BuildFailed("the build was stopped", tail)
            if "error" in chunk:
                detail = chunk.get("errorDetail") or {}
                why = str(detail.get("message") or chunk["error"]).strip()
                if "returned a non-zero code" in why:
                    # the likeliest cause here, and the one a reader cannot see in the step
                    why += " (build steps run without network: nothing is downloaded)"
                raise BuildFailed(why, tail)
            text = _ANSI.sub("", str(chunk.get("stream") or ""))
            if not text:
                continue
            partial += text
            *lines, partial = partial.split("\n")
            for line in lines:
                if line.strip():
                    emit(line.rstrip())
                    tail = [*tail[-19:], line.rstrip()]
    except docker.errors.APIError as e:
        raise BuildFailed(str(getattr(e, "explanation", None) or e), tail) from None
    except (docker.errors.DockerException, OSError) as e:
        raise BuildFailed(f"the daemon did not finish the build: {type(e).__name__}",
                          tail) from None
    if partial.strip():
        emit(partial.rstrip())
    if not _have(client, spec.tag):
        raise BuildFailed("the build ended without an image", tail)
    return True


def prune_builds(client: Any, labels: Mapping[str, str], keep: Collection[str]
                 ) -> tuple[list[str], list[str]]:
    """Remove the tags of built images (``svc-build-...``) carrying all of ``labels`` that are
    not in ``keep``; the daemon deletes an image with its last tag (and its build layers no
    other image uses). Returns (removed, refused: ``tag: reason``); an image a container
    still uses is refused by the daemon and stays."""
    import docker.errors

    found = client.api.images(filters={"label": [f"{k}={v}" for k, v in labels.items()]})
    removed: list[str] = []
    refused: list[str] = []
    for entry in found:
        for tag in entry.get("RepoTags") or []:
            if not tag.startswith("svc-build-") or tag in keep:
                continue
            try:
                client.api.remove_image(tag)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as e:
                refused.append(f"{tag}: {getattr(e, 'explanation', None) or e}")
                continue
            removed.append(tag)
    return removed, refused
