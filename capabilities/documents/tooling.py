"""What every tool family module shares: the argument and output base models, the server's
state (`Workspace`), and `document_tool`, which makes a contract `ToolSpec` of a tool body.

Each family module exports `TOOLS: list[ToolSpec[Workspace]]`; `server.py` combines them in
one `ToolRegistry`. A tool's input schema is generated from its `Args` model (the same model
validates its input) and its output schema from its output model (the same model it returns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import mcp_types as types
from pydantic import BaseModel, ConfigDict

from capabilities.contract import OutputModel, ToolError, ToolSpec

from .errors import DocumentError
from .libreoffice import OfficeConverter
from .paths import Roots
from .results import ToolOutput


class Args(BaseModel):
    """Base of every tool's arguments: unknown fields are refused by name."""

    model_config = ConfigDict(extra="forbid")


Output = OutputModel
"""Base of every tool's output model (the contract's): exactly the fields listed, optional ones
left out when unset."""


@dataclass(frozen=True)
class Workspace:
    """The server's long-lived state, created by its lifespan, which closes `office` at shutdown.

    `roots` are read afresh on every call unless fixed, so a desktop session that starts after
    the server is found.
    """

    office: OfficeConverter
    fixed_roots: Roots | None = None

    @property
    def roots(self) -> Roots:
        return self.fixed_roots if self.fixed_roots is not None else Roots.from_environment()


A = TypeVar("A", bound=Args)

PATH_DOC = (
    "Path of the file: absolute, '~/...' (the desktop user's home), or relative to the first "
    "document root. Must be inside the document roots."
)

READ_ONLY = {"read_only_hint": True, "open_world_hint": False}
# Writers never replace a file unless asked (output_path named, overwrite=true), but then they do.
WRITES_FILES = {"read_only_hint": False, "destructive_hint": True, "open_world_hint": False}


def document_tool(*, name: str, description: str, args: type[A], output: type[BaseModel] | dict[str, Any],
                  run: Callable[[Workspace, A], ToolOutput],
                  annotations: dict[str, Any] | None = None) -> ToolSpec[Workspace]:
    """The contract `ToolSpec` of a synchronous tool body.

    pymupdf, Pillow and LibreOffice block, so `run` runs in a worker thread, which the call
    waits for even when it is cancelled: the body stops early through the call's
    `current_cancellation()` (LibreOffice and Tesseract are killed). This is the one place a
    `DocumentError` becomes the contract's `ToolError`, and a file-system error the body did not
    foresee (a file unreadable for this server's user) becomes one too.
    """

    async def run_in_thread(workspace: Workspace, arguments: A) -> types.CallToolResult:
        try:
            produced = await anyio.to_thread.run_sync(run, workspace, arguments)
        except DocumentError as exc:
            raise exc.to_tool_error() from exc
        except OSError as exc:
            raise _os_error(name, exc) from exc
        return produced.result()

    return ToolSpec(name=name, description=description, args=args, output=output, run=run_in_thread,
                    annotations=dict(READ_ONLY if annotations is None else annotations))


def _os_error(tool: str, exc: OSError) -> ToolError:
    where = f" {exc.filename!r}" if exc.filename else ""
    reason = exc.strerror or str(exc)
    if isinstance(exc, PermissionError):
        return ToolError("refused", f"{tool}: permission denied for{where} ({reason})",
                         hint="the documents server runs as the desktop user: make the file readable "
                              "(and its folder writable, for outputs) by that user")
    if isinstance(exc, FileNotFoundError):
        return ToolError("not_found", f"{tool}: no such file or folder{where}",
                         hint="check the path; it may have been removed meanwhile")
    return ToolError("failed", f"{tool}: cannot access{where} ({reason})", hint="check the file and try again")
