"""`svc dev`: the local stack (what `ops/run` starts) and every app of the project whose scope
is `all` or `devOnly`, in the foreground, until Ctrl-C.

The project is validated first: a bad `project.yml` stops the command before anything starts,
with `svc project validate`'s messages (exit 2). The stack runs as `python -m stack ARGS` (the
launcher of `ops/run`, arguments after `--`), and the apps start once it has printed that it is
up; `--no-stack` runs the apps alone. Every line is printed prefixed with its process's name
(`[api] ...`, coloured on a terminal). Ctrl-C or SIGTERM stops the apps, dependents first, then
the stack, and exits 0; an app that cannot be brought up stops everything and exits 1 with the
reason and its last lines. An app that exits later is reported and the rest keep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from apps import (
    AppFailed,
    Command,
    HealthCheck,
    LogLine,
    Supervisor,
    order,
    resolve_env,
    vault_keys,
)
from project.rootconfig import check_project
from svccli.project import EXIT_INVALID, EXIT_OK, print_issues

EXIT_APP_FAILED = 1
#: what the stack's launcher prints once every process is healthy (stack.__main__)
STACK_UP = "service is up:"
#: the stack's first start builds nothing but may wait on a database host and SSPs
STACK_BUDGET_SECS = 180.0

_COLOURS = ("36", "33", "35", "32", "34", "91", "96", "93")


class Printer:
    """Writes log lines as `[name] text`, each process in a colour of its own on a tty."""

    def __init__(self, out: TextIO, names: Sequence[str]) -> None:
        self.out = out
        self.width = max((len(n) for n in names), default=0) + 2
        colour = out.isatty() and not os.environ.get("NO_COLOR")
        self.colours = {n: _COLOURS[i % len(_COLOURS)] for i, n in enumerate(names)} \
            if colour else {}

    def __call__(self, line: LogLine) -> None:
        tag = f"[{line.app}]".ljust(self.width)
        code = self.colours.get(line.app)
        if code:
            tag = f"\033[{code}m{tag}\033[0m"
        note = "-- " if line.stream == "supervisor" else ""
        self.out.write(f"{tag} {note}{line.text}\n")
        self.out.flush()


def stack_command(stack_args: Sequence[str], cwd: Path) -> Command:
    """The local stack as one supervised process: ready when the launcher says it is up."""
    budget = HealthCheck("log", pattern=STACK_UP, interval=1.0, retries=int(STACK_BUDGET_SECS))
    return Command("stack", (sys.executable, "-m", "stack", *stack_args), cwd,
                   dict(os.environ), budget)


def run(project_file: Path, *, stack: bool, stack_args: Sequence[str],
        out: TextIO = sys.stdout) -> int:
    project, issues = check_project(project_file)
    if project is None:
        print_issues(issues)
        return EXIT_INVALID
    for name, app in project.apps.items():
        keys = vault_keys(app.config, "dev")
        if keys is not None and app.config.scope != "cloudOnly":
            asked = "every vault secret" if keys == ["*"] else ", ".join(keys)
            print(f"svc dev: app {name} asks the vault for {asked}; the vault lives on the "
                  "platform, so locally they are unset (`svc cloud env pull` writes them to a "
                  "dotenv file the app's env can name)", file=sys.stderr)
    before = [stack_command(stack_args, Path.cwd())] if stack else []
    try:
        names = [c.name for c in before] + [a.name for a in order(project.apps.values(), "dev")]
        sup = Supervisor.for_project(project, "dev", env=resolve_env(project, "dev"),
                                     before=before, sink=Printer(out, names))
    except AppFailed as e:
        print(f"svc dev: {e.report()}", file=sys.stderr)
        return EXIT_APP_FAILED
    if len(names) == len(before):
        print("svc dev: no app with scope all or devOnly in the project", file=sys.stderr)
    return asyncio.run(_main(sup, out))


async def _main(sup: Supervisor, out: TextIO) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    starting = asyncio.create_task(sup.start())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()  # Ctrl-C during the start: start() stops what it started
            with contextlib.suppress(asyncio.CancelledError, AppFailed):
                await starting
            return EXIT_OK
        try:
            starting.result()
        except AppFailed as e:
            print(f"svc dev: {e.report()}", file=sys.stderr)
            return EXIT_APP_FAILED
        print(f"svc dev: {', '.join(sup.names)} running; Ctrl-C stops everything",
              file=out, flush=True)
        await stopping
        return EXIT_OK
    finally:
        stopping.cancel()
        await sup.stop()
