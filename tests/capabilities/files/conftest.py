"""Fixtures of the files tests: the real `python -m capabilities.files` over stdio, driven by the
SDK's client from a blocking portal, started as root as a careless host would (it must drop to
the desktop user itself), over a folder that user owns.

`FilesServer.call` checks every answer against the contract: structured content valid against
the tool's output schema, and the text's last line the same object as JSON (a client that reads
only text loses nothing)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
import tempfile
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from anyio.from_thread import start_blocking_portal
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[3]
DESKTOP_USER = "desktop"


def desktop_account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(DESKTOP_USER)
    except KeyError:
        pytest.skip("no desktop user here (make install creates it)")


def give_to_desktop(path: Path) -> None:
    """`path` and everything under it owned by the desktop user (the tests run as root)."""
    if os.geteuid() != 0:
        return
    user = desktop_account()
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(folder, name), user.pw_uid, user.pw_gid, follow_symlinks=False)


class FilesServer:
    """One files server process and an MCP client session to it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self._stack: ExitStack | None = None
        self._portal: Any = None
        self._session: ClientSession | None = None
        self.tools: dict[str, Any] = {}

    @asynccontextmanager
    async def _connect(self):
        params = StdioServerParameters(command=sys.executable, args=["-m", "capabilities.files"], env=self.env,
                                       cwd=str(REPO))
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                yield session

    def start(self) -> FilesServer:
        self._stack = ExitStack()
        self._portal = self._stack.enter_context(start_blocking_portal())
        self._session = self._stack.enter_context(self._portal.wrap_async_context_manager(self._connect()))
        self.tools = {tool.name: tool for tool in self._portal.call(self._session.list_tools).tools}
        return self

    def stop(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def call(self, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """(is_error, structured content), the contract checked."""
        result = self._portal.call(self._session.call_tool, tool, args)
        jsonschema.validate(result.structured_content, self.tools[tool].output_schema)
        assert result.content[0].type == "text"
        assert json.loads(result.content[0].text.split("\n")[-1]) == result.structured_content
        return bool(result.is_error), result.structured_content

    def ok(self, tool: str, **args: Any) -> dict[str, Any]:
        is_error, data = self.call(tool, args)
        assert not is_error, data
        return data

    def refused(self, tool: str, **args: Any) -> dict[str, Any]:
        """The error object of a call that must fail."""
        is_error, data = self.call(tool, args)
        assert is_error, data
        return data["error"]


@pytest.fixture(scope="session")
def files_base() -> Path:
    """A folder the desktop user owns, outside root's private /tmp/pytest-of-root."""
    desktop_account()
    base = Path(tempfile.mkdtemp(prefix="codedesk-files-tests-", dir="/tmp"))
    give_to_desktop(base)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def files_server(files_base: Path):
    """The server, started as root (it drops to the desktop user), its trash under the base."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CODEDESK_DATA": str(files_base / "data"),
           "XDG_DATA_HOME": str(files_base / "share")}
    server = FilesServer(env).start()
    yield server
    server.stop()


@pytest.fixture
def folder(files_base: Path, request: pytest.FixtureRequest) -> Path:
    """A fresh folder for one test, owned by the desktop user."""
    path = files_base / request.node.name.replace("[", "-").replace("]", "")
    path.mkdir()
    give_to_desktop(path)
    return path
