"""Fixtures for the exec capability: the real `python -m capabilities.exec` over stdio, driven by
the SDK's client (`stdio_client` + `ClientSession`) from a blocking portal so tests stay plain
functions and one server can serve many tests."""

from __future__ import annotations

import json

import jsonschema
import os
import pwd
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from anyio.from_thread import start_blocking_portal
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[3]
FINAL_WAIT = 30.0


class ExecServer:
    """One exec server process and an MCP client session to it."""

    def __init__(self, data: Path, env: dict[str, str] | None = None, user: pwd.struct_passwd | None = None) -> None:
        """`user`: run the server as this account (through setpriv, as the runtime does when root)."""
        self.data = data
        self.env = {**(env or {}), "CODEDESK_DATA": str(data)}
        self.user = user
        self._stack: ExitStack | None = None
        self._session: ClientSession | None = None
        self._portal = None
        self._schemas: dict[str, Any] | None = None

    @asynccontextmanager
    async def _connect(self):
        command, args = sys.executable, ["-m", "capabilities.exec"]
        if self.user is not None and os.getuid() == 0:
            command, args = shutil.which("setpriv"), [
                f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--init-groups",
                "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--", command, *args,
            ]
        params = StdioServerParameters(command=command, args=args, env=self.env, cwd=str(REPO))
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    yield session

    def start(self) -> "ExecServer":
        self._stack = ExitStack()
        self._portal = self._stack.enter_context(start_blocking_portal())
        self._session = self._stack.enter_context(self._portal.wrap_async_context_manager(self._connect()))
        return self

    def stop(self) -> None:
        """Close the client: the server sees stdin close and shuts down."""
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def __enter__(self) -> "ExecServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def process(self) -> psutil.Process:
        """The server process (our child running capabilities.exec on this data dir)."""
        for child in psutil.Process().children(recursive=True):
            try:
                if "capabilities.exec" in child.cmdline() and child.environ().get("CODEDESK_DATA") == str(self.data):
                    return child
            except psutil.Error:
                continue
        raise LookupError("exec server process not found")

    def call(self, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Call a tool; returns (is_error, its answer). Every answer is checked against the
        contract: structured content valid against the tool's output schema; on success the text
        is the same object as JSON (the spec's text); on failure the answer is the error object
        with its `message` also under "error"."""
        result = self._portal.call(self._session.call_tool, tool, args)
        if self._schemas is None:
            listed = self._portal.call(self._session.list_tools)
            self._schemas = {t.name: t.output_schema for t in listed.tools}
        jsonschema.validate(result.structured_content, self._schemas[tool])
        if result.is_error:
            error = result.structured_content["error"]
            assert result.content[0].text.startswith("Error: ")
            return True, {**error, "error": error["message"]}
        assert json.loads(result.content[0].text) == result.structured_content
        return False, result.structured_content

    def ok(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        is_error, payload = self.call(tool, args)
        assert not is_error, payload
        return payload

    def refused(self, tool: str, args: dict[str, Any]) -> str:
        is_error, payload = self.call(tool, args)
        assert is_error, payload
        return payload["error"]

    def run(self, bin: str, *args: str, timeout: int = 30, **extra: Any) -> str:
        """Start a program; returns its id."""
        started = self.ok("exec", {"bin": bin, "args": list(args), "timeout": timeout, **extra})
        assert started["status"] == "started"
        return started["id"]

    def follow(self, command_id: str, limit: float = FINAL_WAIT) -> tuple[str, str]:
        """Read the log to its end as the spec's example does; returns (final status, whole log)."""
        logs, offset, deadline = [], 0, time.monotonic() + limit
        while True:
            r = self.ok("stream_logs", {"id": command_id, "offset": offset})
            logs.append(r["logs"])
            offset = r["next_offset"]
            if r["status"] != "running" and not r["more"]:
                return r["status"], "".join(logs)
            if r["status"] == "running":
                assert time.monotonic() < deadline, f"{command_id} still running after {limit}s"
                time.sleep(0.05)

    def wait_for_output(self, command_id: str, text: str, limit: float = 15.0) -> str:
        """Poll the log until it contains `text`; returns the log so far."""
        deadline = time.monotonic() + limit
        while True:
            r = self.ok("stream_logs", {"id": command_id, "offset": 0})
            if text in r["logs"]:
                return r["logs"]
            assert r["status"] == "running", r
            assert time.monotonic() < deadline, f"{text!r} not in the log after {limit}s: {r['logs']!r}"
            time.sleep(0.05)


def _gone(pids: list[int], limit: float = 5.0) -> bool:
    """Whether every pid has died (zombies count as dead) within `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="session")
def exec_server(tmp_path_factory):
    """A shared exec server with a fresh data dir and no desktop session (runs as us)."""
    with ExecServer(tmp_path_factory.mktemp("exec-data")) as server:
        yield server


@pytest.fixture(scope="session")
def desktop_exec_server(desktop_session):
    """An exec server started with the desktop session's environment, as the runtime starts it:
    as the desktop user when we are root (the session's exec folder is that user's)."""
    user = pwd.getpwuid(desktop_session.info.uid)
    with ExecServer(desktop_session.data_dir, env=desktop_session.env, user=user) as server:
        yield server


def program_account() -> pwd.struct_passwd:
    """Whom a server without a desktop session runs programs as: never root (a root server uses
    the `desktop` user, else `nobody`), otherwise the server's own user."""
    if os.getuid() != 0:
        return pwd.getpwuid(os.getuid())
    try:
        return pwd.getpwnam("desktop")
    except KeyError:
        return pwd.getpwnam("nobody")


@pytest.fixture(scope="session")
def account() -> pwd.struct_passwd:
    """The passwd entry of the user programs run as (see `program_account`)."""
    return program_account()


@pytest.fixture
def workdir(account):
    """A fresh directory the programs' user owns (pytest's tmp_path is private to the test's user)."""
    path = Path(tempfile.mkdtemp(prefix="codedesk-exec-test-"))
    os.chown(path, account.pw_uid, account.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def gone():
    """`gone(pids, limit=5.0)`: whether every pid has died within `limit` seconds."""
    return _gone


@pytest.fixture
def start_exec_server():
    """`start_exec_server(data, env=None)`: start an own exec server; stopped at the test's end."""
    servers: list[ExecServer] = []

    def start(data: Path, env: dict[str, str] | None = None) -> ExecServer:
        server = ExecServer(data, env).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
