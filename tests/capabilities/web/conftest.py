"""Fixtures of the web tests: `call`, which runs a web tool in-process exactly as the server
does (validation, the one result builder) and checks the result against the tool's output
schema; `pages_server` (tests/fixtures/pages.py) serves the pages. Only the internet is faked:
the pages are local.
"""

from __future__ import annotations

import anyio
import pytest

from capabilities.web.fetcher import PageFetcher
from capabilities.web.rendered import Renderer
from capabilities.web.search import SearchConfig
from capabilities.web.server import REGISTRY, call_tool
from capabilities.web.tooling import WebState
from tests.fixtures.contract import check_contract, error, ok  # noqa: F401 - the tests import them from here


def web_call(state: WebState):
    async def run_one(tool: str, arguments: dict):
        try:
            return await call_tool(state, tool, arguments)
        finally:
            if state.renderer is not None:
                await state.renderer.aclose()  # Playwright's driver belongs to this event loop

    def run(tool: str, **arguments):
        result = anyio.run(run_one, tool, arguments)
        check_contract(REGISTRY, tool, result)
        return result

    return run


@pytest.fixture
def call(monkeypatch, tmp_path):
    """Call a web tool in-process with no desktop session (the default egress policy)."""
    monkeypatch.setenv("CODEDESK_DATA", str(tmp_path))
    return web_call(WebState(fetcher=PageFetcher(), renderer=Renderer(), search=SearchConfig()))


