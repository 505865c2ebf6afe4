"""What the web tool families share: the server's state, the argument base model, and
`web_tool`, which makes a contract `ToolSpec` of an async tool body.

Each family module (`page_tools`, `rendered`, `search`) exports `TOOLS`; `server.py` combines
them in one `ToolRegistry`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import mcp_types as types
from pydantic import BaseModel, ConfigDict

from capabilities.contract import ToolSpec

from .errors import WebError

if TYPE_CHECKING:
    from .fetcher import PageFetcher
    from .rendered import Renderer
    from .search import SearchConfig


class Args(BaseModel):
    """Base of every tool's arguments: unknown fields are refused by name."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


@dataclass
class WebState:
    """The server's long-lived state, made by its lifespan, which closes it at shutdown."""

    fetcher: PageFetcher
    renderer: Renderer
    search: SearchConfig

    async def aclose(self) -> None:
        try:
            await self.fetcher.aclose()
        finally:
            await self.renderer.aclose()


A = TypeVar("A", bound=BaseModel)

# Pages come from the open web: nothing on the desktop changes, but the world is open.
READS_THE_WEB = {"read_only_hint": True, "open_world_hint": True}


def web_tool(*, name: str, description: str, args: type[A], output: type[BaseModel] | dict[str, Any],
             run: Callable[[WebState, A], Awaitable[types.CallToolResult]]) -> ToolSpec[WebState]:
    """The contract `ToolSpec` of a tool body; the one place a `WebError` becomes a `ToolError`."""

    async def run_translated(state: WebState, arguments: A) -> types.CallToolResult:
        try:
            return await run(state, arguments)
        except WebError as exc:
            raise exc.to_tool_error() from exc

    return ToolSpec(name=name, description=description, args=args, output=output, run=run_translated,
                    annotations=dict(READS_THE_WEB))
