"""`search`: web search through the provider the operator configures, or a clear refusal.

The provider is `$CODEDESK_WEB_SEARCH`, a JSON object of one of two shapes:

    {"url": "https://api.search.example/v1?q={query}&n={limit}", "headers": {"X-Key": "..."},
     "results": "web.results"}
        an HTTP API answering JSON: `{query}` and `{limit}` are filled in (URL-encoded);
        `results` is the dotted path to the list of hits (found by itself for the common shapes:
        results, web.results, items, organic, organic_results, hits, data);
    {"mcp": {"command": "...", "args": [...], "env": {...}} | {"url": "...", "headers": {...}},
     "tool": "web_search", "argument": "query", "arguments": {...}}
        an MCP server's tool, called with `{argument: query, **arguments}`.

The runtime sets it for this server from its config file's `webSearch` entry (where `"server":
"<name>"` names one of its `mcpServers` instead of `mcp`), so an operator configures search in
one place; run alone, set the variable. Each hit is read as `{title, url, snippet}` from the
usual field names; a provider whose answer has no list of hits is returned as `text`.

The HTTP provider's requests go through `PageFetcher` like any page (egress policy, caps).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import mcp_types as types

from capabilities import contract
from capabilities.contract import OutputModel

from .errors import FetchFailed, NoSearchProvider, Unreachable
from .fetcher import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, PageFetcher
from .tooling import Args, WebState, web_tool

SEARCH_ENV = "CODEDESK_WEB_SEARCH"
MCP_CALL_TIMEOUT_S = 60.0

HOW_TO_CONFIGURE = (
    'the operator names one in the runtime\'s config file (--config / $CODEDESK_CONFIG): '
    '{"webSearch": {"server": "<an mcpServers entry>", "tool": "<its search tool>"}} for an MCP search '
    'server, or {"webSearch": {"url": "https://api.example/search?q={query}", "headers": {...}}} for an '
    f'HTTP API answering JSON (or sets ${SEARCH_ENV} to the same object); meanwhile, fetch a search '
    'engine\'s result page with fetch or fetch_rendered'
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HttpProvider(_Strict):
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    results: str | None = None


class StdioTarget(_Strict):
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class HttpTarget(_Strict):
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)


class McpProvider(_Strict):
    mcp: StdioTarget | HttpTarget
    tool: str = Field(min_length=1)
    argument: str = "query"
    arguments: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class SearchConfig:
    """The configured provider, or why there is none usable."""

    provider: HttpProvider | McpProvider | None = None
    problem: str | None = None

    @classmethod
    def from_environment(cls) -> SearchConfig:
        raw = os.environ.get(SEARCH_ENV, "").strip()
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
            kind = McpProvider if isinstance(data, dict) and "mcp" in data else HttpProvider
            return cls(provider=kind.model_validate(data))
        except (ValueError, ValidationError) as exc:
            detail = exc.errors()[0] if isinstance(exc, ValidationError) else None
            where = ".".join(str(p) for p in detail["loc"]) + ": " + detail["msg"] if detail else str(exc)
            return cls(problem=f"the configured search provider (${SEARCH_ENV}) is malformed ({where})")

    def describe(self) -> str:
        if isinstance(self.provider, HttpProvider):
            return self.provider.url.split("?", 1)[0]
        if isinstance(self.provider, McpProvider):
            target = self.provider.mcp
            where = target.command if isinstance(target, StdioTarget) else target.url
            return f"mcp:{where}#{self.provider.tool}"
        return "none"


class Hit(BaseModel):
    title: str = ""
    url: str = ""
    snippet: str = ""


async def run_search(config: SearchConfig, fetcher: PageFetcher, query: str, limit: int,
                     timeout: float) -> tuple[list[Hit], str | None]:
    """The hits for `query` (at most `limit`), and the provider's text when it gave no list.

    Raises:
        NoSearchProvider: none is configured (or it is malformed); Unreachable, FetchFailed.
    """
    if config.provider is None:
        raise NoSearchProvider(f"web search is not available: {config.problem or 'no search provider is configured'}",
                               hint=HOW_TO_CONFIGURE)
    if isinstance(config.provider, HttpProvider):
        return await _http_search(config.provider, fetcher, query, limit, timeout)
    return await _mcp_search(config.provider, query, limit, timeout)


async def _http_search(provider: HttpProvider, fetcher: PageFetcher, query: str, limit: int,
                       timeout: float) -> tuple[list[Hit], str | None]:
    url = provider.url.replace("{query}", quote_plus(query)).replace("{limit}", str(limit))
    fetched = await fetcher.get(url, timeout=timeout, accept="application/json", headers=provider.headers)
    if fetched.status >= 400:
        raise FetchFailed(f"the search provider answered HTTP {fetched.status}: {fetched.text()[:300]}",
                          hint="the operator checks the provider's URL and key", field="query")
    try:
        data = json.loads(fetched.text())
    except ValueError as exc:
        raise FetchFailed(f"the search provider's answer is not JSON ({fetched.media_type})", field="query") from exc
    return _hits(data, provider.results, limit)


async def _mcp_search(provider: McpProvider, query: str, limit: int, timeout: float) -> tuple[list[Hit], str | None]:
    from mcp import ClientSession

    arguments = {**provider.arguments, provider.argument: query}
    try:
        with anyio.fail_after(min(timeout, MCP_CALL_TIMEOUT_S)):
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(_transport(provider.mcp))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                result = await session.call_tool(provider.tool, arguments)
    except TimeoutError as exc:
        raise Unreachable(f"the search server did not answer within {min(timeout, MCP_CALL_TIMEOUT_S):g} s",
                          field="query") from exc
    except Exception as exc:  # the provider's process or connection failed
        raise Unreachable(f"the search server could not be used ({type(exc).__name__}: {exc})",
                          hint="the operator checks the webSearch entry of the config", field="query") from exc
    text = "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")
    if result.is_error:
        raise FetchFailed(f"the search server answered an error: {text[:500]}", field="query")
    data = result.structured_content
    if data is None:
        try:
            data = json.loads(text)
        except ValueError:
            return [], text
    hits, rest = _hits(data, None, limit)
    return hits, (text if not hits else rest)


def _transport(target: StdioTarget | HttpTarget) -> Any:
    if isinstance(target, StdioTarget):
        from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client

        return stdio_client(StdioServerParameters(command=target.command, args=target.args, cwd=target.cwd,
                                                  env={**get_default_environment(), **target.env}))
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    @asynccontextmanager
    async def connected() -> AsyncIterator[tuple[Any, Any]]:
        async with httpx2.AsyncClient(headers=target.headers, timeout=httpx2.Timeout(30.0)) as client:
            async with streamable_http_client(target.url, http_client=client) as streams:
                yield streams[0], streams[1]

    return connected()


_LIST_KEYS = ("results", "web.results", "items", "organic", "organic_results", "hits", "data")
_TITLE = ("title", "name", "heading")
_URL = ("url", "link", "href", "uri")
_SNIPPET = ("snippet", "description", "content", "text", "body", "summary")


def _hits(data: Any, path: str | None, limit: int) -> tuple[list[Hit], str | None]:
    found = _at(data, path) if path else next(
        (value for key in _LIST_KEYS if isinstance(value := _at(data, key), list)), None)
    if found is None and isinstance(data, list):
        found = data
    if not isinstance(found, list):
        return [], json.dumps(data, ensure_ascii=False)[:20_000]
    hits = [Hit(title=_first(item, _TITLE), url=_first(item, _URL), snippet=_first(item, _SNIPPET))
            for item in found if isinstance(item, dict)]
    return hits[:limit], None


def _at(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _first(item: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((str(item[key]) for key in keys if isinstance(item.get(key), (str, int, float))), "")


class SearchArgs(Args):
    query: str = Field(min_length=1, max_length=2000, description="What to search for.")
    limit: int = Field(10, ge=1, le=50, description="At most this many hits.")
    timeout: float = Field(DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S, description="Seconds for the search.")


class SearchOutput(OutputModel):
    provider: str = Field(description="Which provider answered.")
    query: str
    results: list[Hit] = Field(description="The hits, best first: title, url, snippet.")
    text: str | None = Field(None, description="The provider's answer as it came, when it gave no list of hits.")


async def search(state: WebState, args: SearchArgs) -> types.CallToolResult:
    hits, text = await run_search(state.search, state.fetcher, args.query, args.limit,
                                  args.timeout)
    output = SearchOutput(provider=state.search.describe(), query=args.query, results=hits, text=text)
    return contract.success(output.model_dump(mode="json"), f"{len(hits)} results for {args.query!r}"
                            + (f" from {output.provider}" if hits else ""))


TOOLS = [
    web_tool(
        name="search",
        description=(
            "Web search through the operator's provider: hits {title, url, snippet}, best first."
            "\n\nSearches through the provider the session's operator configured (an MCP search server or "
            "an HTTP search API): hits as {title, url, snippet}, best first. Without a configured provider "
            "it answers an error saying how to configure one; then fetch a search engine's page instead."
        ),
        args=SearchArgs, output=SearchOutput, run=search,
    ),
]
