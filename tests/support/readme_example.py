"""clients/README.md's top-10 example, run from the README's own text: its three `sh` blocks
(set-up and the Python example, a write from another process, the TypeScript example), each
line through bash at the repository root, with the README's addresses and root password
replaced by those of the test's `ops/run` stack. `npm ci` is a no-op here: ops/test ran it
from the same lock file, and reinstalling node_modules would break other tests using it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from contextlib import AsyncExitStack

from tests.support.procs import ROOT, base_env
from tests.support.tsbuild import dist_lock

README = ROOT / "clients" / "README.md"
SECTION = "## Example: a live top-10 list"
NO_NPM_CI = 'npm() { if [ "$1" = ci ]; then return 0; fi; command npm "$@"; }'


def blocks() -> list[list[str]]:
    """The section's `sh` blocks, each as its command lines (comments and blanks dropped)."""
    text = README.read_text()
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    return [[ln for ln in b.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            for b in re.findall(r"```sh\n(.*?)```", section, re.S)]


class Terminal:
    """A README line running in the background, as in a terminal of its own."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    async def until(self, pred: str, timeout: float = 120) -> str:
        """Reads output lines until one contains `pred`; returns it."""
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                raw = await self.proc.stdout.readline()
                assert raw, f"exited ({await self.proc.wait()}) before {pred!r}:\n" + \
                    "\n".join(self.lines)
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                if pred in self.lines[-1]:
                    return self.lines[-1]

    async def stop(self) -> None:
        if self.proc.returncode is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()


async def run_readme_example(db_port: int, service_url: str, password: str) -> None:
    setup, write, ts = blocks()
    export = setup[0]
    assert export.startswith("export ") and "SVC_DB_URL=ws://127.0.0.1:8000" in export, export
    export = (export.replace("127.0.0.1:8000", f"127.0.0.1:{db_port}")
              .replace("SVC_DB_PASS=root ", f"SVC_DB_PASS={password} "))
    env = base_env(SVC_SERVICE_URL=service_url)  # the README's default is ops/run's :9667

    async def bash(line: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            "bash", "-c", f"{NO_NPM_CI}\n{export}\nexec 2>&1\n{line}", cwd=str(ROOT), env=env,
            stdout=asyncio.subprocess.PIPE, start_new_session=True)

    async def run(line: str) -> None:
        proc = await bash(line)
        out, _ = await proc.communicate()
        assert proc.returncode == 0, f"{line}\n{out.decode(errors='replace')}"

    for line in setup[1:-1]:
        await run(line)
    async with AsyncExitStack() as stack:
        py = Terminal(await bash(setup[-1]))
        stack.push_async_callback(py.stop)
        with dist_lock():  # the README's line builds dist/ and loads it
            (line,) = ts
            node = Terminal(await bash(line))
            stack.push_async_callback(node.stop)
            await node.until("[ready]")
        await py.until("[ready]")
        assert py.lines[-1] == node.lines[-1] == "[ready] ", (py.lines, node.lines)
        # The README's set-up hooked the table: neither example asks for `svc schema apply`.
        assert not any("not hooked" in ln for ln in py.lines + node.lines), (py.lines, node.lines)
        (line,) = write
        await run(line)
        m = re.search(r"title = '(\w+)', score = (\d+)", line)
        assert m, line
        shown = f"[ready] {m[1]} ({m[2]})"
        assert await py.until(shown) == shown and await node.until(shown) == shown
