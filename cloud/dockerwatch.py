"""The lifeline of a process's containers: ``python -m cloud.dockerwatch svc.epoch=<id>``.

A container belongs to the Docker daemon, not to the process that started it, so a platform
or a ``svc dev`` container app killed with ``kill -9`` would leave its containers running.
Each :class:`cloud.docker_executor.DockerExecutor` therefore starts this watcher once, before
its first container: through ``ipc.lifeline`` (the kernel sends it SIGTERM the moment its
starter exits, however it exits) and in a session of its own (a signal to the starter's
process group, a Ctrl-C or a ``killpg``, does not reach it). It waits for that signal, then
removes every container carrying its label: the starter's ``svc.epoch``, a random id per
executor, so a platform restarted on the same address (whose containers carry another
epoch) loses nothing to its predecessor's watcher. When the starter stopped its containers
itself, nothing is left and the watcher only exits. The daemon is ``DOCKER_HOST`` (else the
SDK's default socket).
"""

from __future__ import annotations

import contextlib
import signal
import sys


def remove_labelled(label: str) -> int:
    import docker
    import docker.errors

    client = docker.from_env(timeout=30)
    found = client.api.containers(all=True, filters={"label": label})
    for entry in found:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(entry["Id"], force=True)
    return len(found)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or "=" not in args[0]:
        print("usage: python -m cloud.dockerwatch LABEL=VALUE", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ends = {signal.SIGTERM, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, ends)
    signal.sigwait(ends)
    try:
        n = remove_labelled(args[0])
    except Exception as e:  # noqa: BLE001 - nothing else can act on it: say so
        print(f"dockerwatch: containers with {args[0]} not removed: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        return 1
    if n:
        print(f"dockerwatch: removed {n} container(s) with {args[0]} (their starter died)",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
