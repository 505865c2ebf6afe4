"""What the memory tool families share: the server's state, the argument base model, and
`memory_tool`, which makes a contract `ToolSpec` of a synchronous tool body (SQLite and file
reads block: the body runs in a worker thread).

Each family module (`memory_tools`, `skill_tools`) exports `TOOLS`; `server.py` combines them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types as types
from pydantic import BaseModel, ConfigDict

from capabilities import contract
from capabilities.contract import ToolSpec

from .errors import MemoryFailure, StoreUnavailable
from .store import MemoryStore


class Args(BaseModel):
    """Base of every tool's arguments: unknown fields are refused by name."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class MemoryState:
    """The server's long-lived state, made by its lifespan, which closes the store at shutdown.

    `store` is None when the database cannot be opened (`store_problem` says why): the server
    serves anyway, skills work, and every memory call answers with what to do.
    `sessions` are the connected clients, told when the installed skills change.
    """

    store: MemoryStore | None
    roots: list[Path]
    store_problem: str | None = None
    sessions: list[Any] = field(default_factory=list)

    def require_store(self) -> MemoryStore:
        if self.store is None:
            raise StoreUnavailable(self.store_problem or "the memory store is not open")
        return self.store

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


A = TypeVar("A", bound=BaseModel)

READ_ONLY = {"read_only_hint": True, "open_world_hint": False}
WRITES = {"read_only_hint": False, "destructive_hint": False, "open_world_hint": False}


def memory_tool(*, name: str, description: str, args: type[A], output: type[BaseModel] | dict[str, Any],
                run: Callable[[MemoryState, A], tuple[BaseModel, str]],
                annotations: dict[str, Any] | None = None) -> ToolSpec[MemoryState]:
    """The contract `ToolSpec` of a body returning (its output model, a summary line); the one
    place a `MemoryFailure` becomes a `ToolError`."""

    async def run_in_thread(state: MemoryState, arguments: A) -> types.CallToolResult:
        try:
            output, summary = await anyio.to_thread.run_sync(run, state, arguments)
        except MemoryFailure as exc:
            raise exc.to_tool_error() from exc
        except sqlite3.Error as exc:  # the disk is full, the file read-only or damaged
            failure = StoreUnavailable(f"{name}: the memory database failed ({exc})",
                                       hint="check the session's disk; the call had no effect")
            raise failure.to_tool_error() from exc
        return contract.success(output.model_dump(mode="json"), summary)

    return ToolSpec(name=name, description=description, args=args, output=output, run=run_in_thread,
                    annotations=dict(READ_ONLY if annotations is None else annotations))
