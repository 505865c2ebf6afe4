"""Every tool of every built-in server, called by a plain MCP client that reads only the text.

The MCP specification says a tool that returns structured content should also return it
serialized in a text block; many clients show their model nothing else. Each built-in server is
started on its own over stdio (as the runtime starts it: as the desktop user), every tool it
lists is called with a valid, cheap request, and the text block must carry the structured
result whole: its last line is the same object as JSON. A tool added without a case here fails
the test.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from runtime.config import builtin_servers
from tests.capabilities.documents import builders
from tests.capabilities.documents.test_documents_contract import GOOD as DOCUMENTS

pytestmark = [pytest.mark.desktop, pytest.mark.anyio]

REPO = Path(__file__).resolve().parents[2]
Case = Callable[[dict], dict]

# One good call per tool: given what earlier calls answered (`seen`, by tool), its arguments.
CALLS: dict[str, dict[str, Case]] = {
    "browser": {
        "browser_execute": lambda seen: {"tab": "plain-client", "close": True, "operations": [
            {"type": "setContent", "params": {"html": "<title>plain</title><h1>hello</h1>"}}, {"type": "url"}]},
        "desktop_execute": lambda seen: {"operations": [{"type": "screen.width"}, {"type": "mouse.getPosition"}]},
    },
    "exec": {
        "exec": lambda seen: {"bin": "echo", "args": ["plain client"], "timeout": 30},
        "stream_logs": lambda seen: {"id": seen["exec"]["id"], "offset": 0},
        "search_logs": lambda seen: {"id": seen["exec"]["id"], "pattern": "plain"},
        "kill": lambda seen: {"id": seen["exec"]["id"]},
    },
    "documents": {},  # filled per test from the documents contract's own cases (`GOOD`)
    "files": {
        "write": lambda seen: {"path": "~/plain-client/a.txt", "content": "one\ntwo\nthree\n"},
        "read": lambda seen: {"path": "~/plain-client/a.txt", "limit": 2},
        "stat": lambda seen: {"path": "~/plain-client/a.txt"},
        "edit": lambda seen: {"path": "~/plain-client/a.txt", "old": "two", "new": "TWO"},
        "patch": lambda seen: {"path": "~/plain-client/a.txt", "diff": "@@ -1,2 +1,2 @@\n-one\n+ONE\n TWO\n"},
        "list": lambda seen: {"path": "~/plain-client"},
        "glob": lambda seen: {"pattern": "*.txt", "root": "~/plain-client"},
        "search": lambda seen: {"pattern": "TWO", "root": "~/plain-client", "context": 1},
        "copy": lambda seen: {"source": "~/plain-client/a.txt", "destination": "~/plain-client/b.txt"},
        "move": lambda seen: {"source": "~/plain-client/b.txt", "destination": "~/plain-client/c.txt"},
        "delete": lambda seen: {"path": "~/plain-client/c.txt"},
        "restore": lambda seen: {"trash_id": seen["delete"]["trash_id"]},
    },
    "web": {},  # filled per test: the pages server's address is known then
    "memory": {
        "remember": lambda seen: {"key": "plain-client", "text": "a plain client reads the text block", "tags": ["t"]},
        "recall": lambda seen: {"query": "plain client"},
        "get": lambda seen: {"key": "plain-client"},
        "list": lambda seen: {"tags": ["t"]},
        "forget": lambda seen: {"key": "plain-client"},
        "skills_list": lambda seen: {},
        "skills_read": lambda seen: {"name": "plain-skill"},
    },
}


def _web_cases(pages) -> dict[str, Case]:
    return {
        "fetch": lambda seen: {"url": pages.url("/web_article.html")},
        "fetch_rendered": lambda seen: {"url": pages.url("/web_article.html")},
        "fetch_image": lambda seen: {"url": pages.url("/web_image.png")},
        "search": lambda seen: {"query": "fruit report"},
    }


@pytest.fixture(scope="module")
def skills_root(desktop_session) -> Path:
    """A skills folder (on $CODEDESK_SKILLS_PATH) with one skill, the desktop user's."""
    user = pwd.getpwnam(desktop_session.info.user)
    root = desktop_session.info.home / "plain-client-skills"
    (root / "plain-skill").mkdir(parents=True, exist_ok=True)
    (root / "plain-skill" / "SKILL.md").write_text(
        "---\nname: plain-skill\ndescription: A skill a plain client reads.\n---\nDo it plainly.\n")
    for path in [root, *root.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def documents_root(desktop_session) -> Path:
    """The documents the documents cases read, in a folder the desktop user owns."""
    user = pwd.getpwnam(desktop_session.info.user)
    folder = desktop_session.info.home / "plain-client-documents"
    folder.mkdir(exist_ok=True)
    builders.one_of_each(folder)
    for path in [folder, *folder.iterdir()]:
        os.chown(path, user.pw_uid, user.pw_gid)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(desktop_session.info.home / "plain-client", ignore_errors=True)


def _params(name: str, session, extra_env: dict[str, str]) -> StdioServerParameters:
    """The server as the runtime starts it: as the desktop user (through setpriv when root)."""
    config = builtin_servers()[name]
    command, args = config.command, list(config.args)
    if os.geteuid() == 0:
        info = session.info
        command, args = shutil.which("setpriv"), [
            f"--reuid={info.uid}", f"--regid={info.gid}", "--init-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all", "--", command, *args]
    env = {**session.env, "HOME": str(session.info.home), **extra_env}
    return StdioServerParameters(command=command, args=args, env=env, cwd=str(REPO))


# `session` reads the runtime's own timeline and is served in the runtime's process, never as the
# desktop user: tests/e2e/test_timeline.py calls it there.
@pytest.mark.parametrize("server", sorted(set(builtin_servers()) - {"session"}))
async def test_every_tool_answers_its_whole_result_in_the_text(server, desktop_session, documents_root,
                                                               skills_root, pages_server):
    """A client that ignores structuredContent must still read everything the tool returned."""
    cases = dict(CALLS[server])
    extra: dict[str, str] = {}
    if server == "documents":
        cases = {tool: (lambda seen, make=make: make(documents_root)) for tool, make in DOCUMENTS.items()}
        extra["CODEDESK_DOCUMENT_ROOTS"] = str(documents_root)
    elif server == "web":
        cases = _web_cases(pages_server)
        extra["CODEDESK_WEB_SEARCH"] = json.dumps({"url": pages_server.url("/web_search.json?q={query}")})
    elif server == "memory":
        extra["CODEDESK_SKILLS_PATH"] = str(skills_root)
    with open(os.devnull, "w") as quiet:
        async with stdio_client(_params(server, desktop_session, extra), errlog=quiet) as (read, write), \
                ClientSession(read, write) as client:
            await client.initialize()
            listed = [tool.name for tool in (await client.list_tools()).tools]
            assert sorted(listed) == sorted(cases), f"{server}: a tool without a case here, or a case without a tool"
            seen: dict[str, dict] = {}
            for tool in cases:
                result = await client.call_tool(tool, cases[tool](seen))
                text = result.content[0]
                assert text.type == "text", f"{server}.{tool}: the first block is not text"
                assert not result.is_error, f"{server}.{tool}: {text.text[:500]}"
                whole = json.loads(text.text.split("\n")[-1])
                assert whole == result.structured_content, f"{server}.{tool}: the text does not hold the result"
                assert all(block.type == "image" for block in result.content[1:])
                seen[tool] = result.structured_content
