"""The values the supervisor takes and gives: what to run, how readiness is checked, what a
log line and an app's status are, and the one error a start fails with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["AppFailed", "AppStatus", "Command", "HealthCheck", "LogLine", "Scope", "State"]

#: which side of the project runs: `dev` (apps with scope all or devOnly, the `dev` side of
#: env splits) or `cloud` (scope all or cloudOnly, the `cloud` side)
Scope = Literal["dev", "cloud"]
State = Literal["pending", "starting", "ready", "exited", "failed", "stopping", "stopped"]
Stream = Literal["stdout", "stderr", "supervisor"]


@dataclass(frozen=True)
class HealthCheck:
    """When an app counts as ready, checked before its dependents start.

    `http`: GET `path` on 127.0.0.1:`port` answers 200 (the spec's `healthcheck`); `tcp`: the
    port accepts a connection; `command`: a shell command (in the app's directory and
    environment) exits 0; `log`: a line of its output contains `pattern`; `none`: ready once
    started (the spec: "without it a dependency is ready when its container runs").

    `interval` seconds between attempts, `timeout` seconds for one attempt, `retries`
    attempts before the start fails. The spec leaves these open: the defaults give an app
    about 30 s."""

    kind: Literal["http", "tcp", "command", "log", "none"] = "none"
    port: int | None = None
    path: str = "/"
    command: str | None = None
    pattern: str | None = None
    interval: float = 0.25
    timeout: float = 2.0
    retries: int = 120

    def describe(self) -> str:
        if self.kind == "http":
            return f"GET http://127.0.0.1:{self.port}{self.path}"
        if self.kind == "tcp":
            return f"TCP connect to 127.0.0.1:{self.port}"
        if self.kind == "command":
            # the command may carry a credential: its length only
            return f"health command ({len(self.command or '')} characters)"
        if self.kind == "log":
            return f"output line containing {self.pattern!r}"
        return "running"


@dataclass(frozen=True)
class Command:
    """One process as the supervisor runs it: `argv` in `cwd` with exactly `env`, in a
    process group of its own, ready when `health` says so, started after `depends_on`."""

    name: str
    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str] = field(repr=False)
    health: HealthCheck = HealthCheck()
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogLine:
    """One line of an app's output (or a supervisor note about it). `seq` increases across
    all apps of one supervisor: a cursor for the next page."""

    seq: int
    at: float  # epoch seconds
    app: str
    stream: Stream
    level: str  # error, warn, info, debug (a guess from the text, see apps.logs)
    text: str


@dataclass(frozen=True)
class AppStatus:
    name: str
    state: State
    pid: int | None
    started_at: float | None  # epoch seconds
    ready_at: float | None
    exit_code: int | None  # negative: killed by that signal
    reason: str | None  # why it failed or exited


class AppFailed(Exception):
    """An app could not be brought up (or could not even be planned): its name, why, and the
    last lines of its output. Raised by `Supervisor.start` after everything started is
    stopped again."""

    def __init__(self, app: str, reason: str, tail: list[LogLine] | None = None) -> None:
        self.app = app
        self.reason = reason
        self.tail = list(tail or [])
        super().__init__(f"app {app}: {reason}")

    def report(self) -> str:
        """The message with the last lines, as a terminal shows it."""
        lines = [str(self)]
        if self.tail:
            lines.append(f"last {len(self.tail)} lines of {self.app}:")
            lines += [f"  {line.stream}: {line.text}" for line in self.tail]
        return "\n".join(lines)
