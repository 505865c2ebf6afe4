"""Fixtures for the `browser` capability server (browser_execute and desktop_execute).

Shared by both tool families; keep fixtures small and additive.

- `browser_desktop` (session): the desktop session the server acts on, `desktop_session`
  (`.data_dir`, `.info` SessionInfo, `.env` = os.environ plus CODEDESK_DATA).
- `browser_server` (session): `python -m capabilities.browser` spawned over stdio with the
  SDK client against that session. Tests are synchronous: `.call(tool, args)` returns the
  `CallToolResult`; `.call_many([(tool, args), ...])` runs calls concurrently;
  `.call_cancelled(tool, args, after)` gives up on a call as a client does; `.list_tools()`. Use `BrowserServer(env)` as a context manager for a server of your own
  (e.g. to restart it).
- `run_page(operations, tab=..., close=...)` / `run_pages([arguments, ...])` (session): one
  browser_execute call / several at once, read into `PageRun` (.summary, .body, .results,
  .result(step), .images as PNG bytes, .is_error).
- `session_exec` (session): the exec server (`python -m capabilities.exec`) of the same session,
  started as the runtime starts it (as the desktop user when we are root), to check what a
  desktop step did through another capability: `.read_file(path)` cats a file through exec.
- `browser_kit` (session): helpers for tests, since conftest modules cannot be imported:
  `.BrowserServer`, `.read` (a CallToolResult into a PageRun) and `.chromium_pid(info)`, the
  session's Chromium browser process (found by its profile dir), for tests that kill it.
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import anyio
import anyio.from_thread
import psutil
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from capabilities.session import SessionInfo

REPO = Path(__file__).resolve().parents[3]
CALL_TIMEOUT_S = 240.0


class BrowserServer:
    """A real `python -m capabilities.browser` over stdio with a synchronous face."""

    def __init__(self, env: dict[str, str], log_path: Path | None = None,
                 module: str = "capabilities.browser", run_as: int | None = None) -> None:
        """`module`: the capability server to start; `run_as`: a uid to start it as (through
        setpriv, as the runtime does when it is root)."""
        self.env = env
        self.module = module
        self.run_as = run_as
        self._own_log = log_path is None  # a temporary log, removed at exit
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="browser-server-", suffix=".log")
            os.close(fd)
            log_path = Path(name)
        self._log_path = log_path

    def __enter__(self) -> "BrowserServer":
        self._log = open(self._log_path, "a")
        self._portal_cm = anyio.from_thread.start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        try:
            # One task holds the stdio transport from start to end, as anyio requires.
            self._session_cm = self._portal.wrap_async_context_manager(self._connected())
            self.session: ClientSession = self._session_cm.__enter__()
        except BaseException:
            self._portal_cm.__exit__(*sys.exc_info())
            self._log.close()
            raise
        return self

    @asynccontextmanager
    async def _connected(self):
        command, args = sys.executable, ["-m", self.module]
        if self.run_as is not None and os.getuid() == 0 and self.run_as != 0:
            user = pwd.getpwuid(self.run_as)
            command, args = shutil.which("setpriv"), [
                f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--no-new-privs",
                "--inh-caps=-all", "--bounding-set=-all", "--", command, *args]
        params = StdioServerParameters(command=command, args=args, env=self.env, cwd=str(REPO))
        async with stdio_client(params, errlog=self._log) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session

    def __exit__(self, *exc) -> None:
        try:
            self._session_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)
            self._log.close()
            if self._own_log:
                self._log_path.unlink(missing_ok=True)

    def call(self, tool: str, args: dict):
        """Call a tool; returns its CallToolResult. A call unanswered after CALL_TIMEOUT_S fails
        the test that made it, rather than hang the whole run."""

        async def run():
            with anyio.fail_after(CALL_TIMEOUT_S):
                return await self.session.call_tool(tool, args)

        try:
            return self._portal.call(run)
        except TimeoutError:
            raise AssertionError(f"{tool} got no answer in {CALL_TIMEOUT_S:.0f} s: {args}") from None

    def call_many(self, calls: list[tuple[str, dict]]) -> list:
        """Call several tools at once (concurrently); results in the order given."""

        async def run() -> list:
            results: list = [None] * len(calls)

            async def one(i: int, tool: str, args: dict) -> None:
                results[i] = await self.session.call_tool(tool, args)

            async with anyio.create_task_group() as tg:
                for i, (tool, args) in enumerate(calls):
                    tg.start_soon(one, i, tool, args)
            return results

        return self._portal.call(run)

    def call_cancelled(self, tool: str, args: dict, after: float) -> bool:
        """Call a tool and stop waiting after `after` seconds, as a client giving up does (the
        SDK then sends notifications/cancelled); True if the call was still running then."""

        async def run() -> bool:
            with anyio.move_on_after(after) as scope:
                await self.session.call_tool(tool, args)
            return scope.cancelled_caught

        return self._portal.call(run)

    def list_tools(self):
        return self._portal.call(self.session.list_tools).tools

    def server_log(self) -> str:
        return self._log_path.read_text()


@pytest.fixture(scope="session")
def browser_desktop(desktop_session):
    """The desktop session the browser server acts on."""
    return desktop_session


@pytest.fixture(scope="session")
def browser_server(browser_desktop):
    """The browser capability server over stdio against the session (session-scoped)."""
    with BrowserServer(browser_desktop.env) as server:
        yield server


class SessionExec:
    """The session's exec server, used to read back what desktop steps changed."""

    def __init__(self, server: BrowserServer) -> None:
        self.server = server

    def read_file(self, path: Path, timeout: float = 30.0) -> str:
        """The file's text as a program the desktop user runs (cat) prints it."""
        started = self.server.call("exec", {"bin": "cat", "args": [str(path)], "timeout": 30})
        assert not started.is_error, started.content[0].text
        command = started.structured_content["id"]
        logs, offset, deadline = [], 0, time.monotonic() + timeout
        while True:
            read = self.server.call("stream_logs", {"id": command, "offset": offset})
            assert not read.is_error, read.content[0].text
            body = read.structured_content
            logs.append(body["logs"])
            offset = body["next_offset"]
            if body["status"] != "running" and not body["more"]:
                assert body["status"] == "completed:0", (body["status"], "".join(logs))
                return "".join(logs)
            assert time.monotonic() < deadline, f"cat {path} still running after {timeout} s"
            time.sleep(0.05)


@pytest.fixture(scope="session")
def session_exec(browser_desktop):
    """The exec server of the desktop session (as the desktop user when we are root)."""
    with BrowserServer(browser_desktop.env, module="capabilities.exec", run_as=browser_desktop.info.uid) as server:
        yield SessionExec(server)


def session_chromium_pid(info: SessionInfo) -> int | None:
    """The session's Chromium browser process (not its helpers), by its profile dir."""
    profile = Path(info.chrome_profile).resolve()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(arg.startswith("--type=") for arg in cmdline):
            continue
        for arg in cmdline:
            if arg.startswith("--user-data-dir=") and Path(arg.split("=", 1)[1]).resolve() == profile:
                return proc.info["pid"]
    return None


@dataclass
class PageRun:
    """A browser_execute result, read: the summary line, the JSON body (the same object as the
    structured content: {tab, url, results}, plus {error: {kind, message, step?, field?, hint?}}
    on failure), the PNGs."""

    raw: object
    summary: str
    body: dict
    images: list[bytes]

    @property
    def is_error(self) -> bool:
        return bool(self.raw.is_error)

    @property
    def results(self) -> list[dict]:
        return self.body["results"]

    def result(self, step: int):
        """The result of step N (numbered from 1)."""
        return self.results[step - 1]["result"]


def read_page_run(raw) -> PageRun:
    text = raw.content[0].text
    summary, _, body = text.partition("\n")
    images = [base64.b64decode(c.data) for c in raw.content[1:] if c.type == "image"]
    return PageRun(raw=raw, summary=summary, body=json.loads(body), images=images)


@pytest.fixture(scope="session")
def run_page(browser_server):
    """`run_page(operations, tab=..., close=...)`: one browser_execute call, read."""

    def run(operations: list[dict], **extra) -> PageRun:
        return read_page_run(browser_server.call("browser_execute", {"operations": operations, **extra}))

    return run


@pytest.fixture(scope="session")
def run_pages(browser_server):
    """`run_pages([arguments, ...])`: several browser_execute calls at once, read, in order."""

    def run(calls: list[dict]) -> list[PageRun]:
        results = browser_server.call_many([("browser_execute", args) for args in calls])
        return [read_page_run(r) for r in results]

    return run


@pytest.fixture(scope="session")
def browser_kit():
    """The helpers above for tests (conftest modules cannot be imported): `.BrowserServer`,
    `.read` (read_page_run), `.chromium_pid` (session_chromium_pid)."""
    return SimpleNamespace(BrowserServer=BrowserServer, read=read_page_run, chromium_pid=session_chromium_pid)


@pytest.fixture(scope="session")
def resize_screen(browser_desktop):
    """`resize_screen(width, height)`: the session's screen size set with xrandr, the way a
    viewer's resize does."""
    import subprocess

    info = browser_desktop.info
    env = {**os.environ, **info.env, "DISPLAY": info.display}

    def resize(width: int, height: int) -> None:
        name = f"codedesk-test-{width}x{height}"
        out = subprocess.run(["xrandr"], env=env, capture_output=True, text=True, check=True).stdout
        output = next(line.split()[0] for line in out.splitlines() if " connected" in line)
        if name not in out:
            subprocess.run(["xrandr", "--newmode", name, "60", str(width), str(width + 1), str(width + 2),
                            str(width + 3), str(height), str(height + 1), str(height + 2),
                            str(height + 3)], env=env, check=True)
            subprocess.run(["xrandr", "--addmode", output, name], env=env, check=True)
        subprocess.run(["xrandr", "--output", output, "--mode", name], env=env, check=True)

    return resize


@pytest.fixture(scope="module")
def no_session_restore_prompt(browser_desktop):
    """Mousepad asks to restore "a previous session" after windows closed under it; tests close
    windows all the time, so that prompt is turned off (as the desktop user would)."""
    import subprocess

    from capabilities.browser.desktop_env import desktop_env

    info = browser_desktop.info
    subprocess.run(["gsettings", "set", "org.xfce.mousepad.preferences.file", "session-restore", "never"],
                   env=desktop_env(info), user=info.uid, group=info.gid, extra_groups=[], cwd=info.home,
                   check=True, timeout=30)


@pytest.fixture(scope="module")
def wm(browser_desktop):
    """The window manager's view of the session (desktop_windows), closed after the module."""
    from capabilities.browser.desktop_windows import WindowManager

    manager = WindowManager(browser_desktop.info)
    yield manager
    manager.close()
