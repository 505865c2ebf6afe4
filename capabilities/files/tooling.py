"""What every files tool shares: the argument base model, the server's state (`FilesState`), and
`files_tool`, which makes a contract `ToolSpec` of a synchronous tool body.

Each family module (`reading`, `writing`, `moving`, `searching`) exports `TOOLS`; `server.py`
combines them in one `ToolRegistry`. A tool's input schema is its `Args` model (the model that
validates its input, refusing unknown fields by name) and its output schema its output model.
"""

from __future__ import annotations

import errno
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types as types
from pydantic import BaseModel, ConfigDict

from capabilities.contract import OutputModel, ToolError, ToolSpec, success

from .account import Account, resolve
from .errors import FilesError

PATH_DOC = "Absolute, '~/...' (the desktop user's home) or relative to the home."


class Args(BaseModel):
    """Base of every tool's arguments: unknown fields are refused by name."""

    model_config = ConfigDict(extra="forbid")


Output = OutputModel


@dataclass(frozen=True)
class FilesState:
    """The server's state: who it acts as (its home is where `~` and relative paths start), or
    why it cannot act (`problem`: every call answers it)."""

    account: Account | None
    problem: FilesError | None = None

    def path(self, raw: str, field: str = "path") -> Path:
        """`raw` as the desktop user means it (`account.resolve`)."""
        if self.account is None:
            assert self.problem is not None
            raise self.problem
        return resolve(raw, self.account.home, field)

    @property
    def home(self) -> Path:
        if self.account is None:
            assert self.problem is not None
            raise self.problem
        return self.account.home


@dataclass(frozen=True)
class Answer:
    """A tool body's answer: its output model and a one-line summary."""

    data: BaseModel
    summary: str


A = TypeVar("A", bound=Args)

READ_ONLY = {"read_only_hint": True, "open_world_hint": False}
WRITES = {"read_only_hint": False, "destructive_hint": False, "open_world_hint": False}
REPLACES = {"read_only_hint": False, "destructive_hint": True, "open_world_hint": False}


def files_tool(*, name: str, description: str, args: type[A], output: type[BaseModel],
               run: Callable[[FilesState, A], Answer], annotations: dict[str, Any]) -> ToolSpec[FilesState]:
    """The contract `ToolSpec` of a blocking tool body, run in a worker thread (it stops early
    through the call's `current_cancellation()`). The one place a `FilesError`, or a file-system
    error the body did not foresee, becomes the contract's `ToolError`."""

    async def run_in_thread(state: FilesState, arguments: A) -> types.CallToolResult:
        try:
            answer = await anyio.to_thread.run_sync(run, state, arguments)
        except FilesError as exc:
            raise exc.to_tool_error() from exc
        except OSError as exc:
            raise os_error(name, exc) from exc
        return success(answer.data.model_dump(mode="json"), f"{name}: {answer.summary}")

    return ToolSpec(name=name, description=inspect.cleandoc(description), args=args, output=output, run=run_in_thread,
                    annotations=dict(annotations))


_OS_ERRORS: dict[int, tuple[str, str, str]] = {
    errno.EACCES: ("refused", "permission denied", "the desktop user may not do this; pick a path it owns, "
                   "e.g. under ~"),
    errno.EPERM: ("refused", "operation not permitted", "the desktop user may not do this; pick a path it owns, "
                  "e.g. under ~"),
    errno.EROFS: ("refused", "read-only file system", "write somewhere else, e.g. under ~"),
    errno.ENOENT: ("not_found", "no such file or folder", "check the path with list or glob"),
    errno.ENOTDIR: ("not_found", "a part of the path is not a folder", "check the path with list"),
    errno.EISDIR: ("invalid_arguments", "it is a folder", "give a file's path (list shows a folder)"),
    errno.ENOTEMPTY: ("refused", "the folder is not empty", "delete it instead (it goes to the trash)"),
    errno.EEXIST: ("refused", "it already exists", "pick another name, or pass overwrite: true"),
    errno.ENOSPC: ("failed", "no space left on the device", "free some space (empty the trash) and try again"),
    errno.ELOOP: ("refused", "too many levels of symbolic links", "the path goes round a symlink loop"),
    errno.ENAMETOOLONG: ("invalid_arguments", "the name is too long", "use a shorter name"),
}


def os_error(tool: str, exc: OSError) -> ToolError:
    """A file-system error as the model reads it: what, on which path, and what to do next."""
    where = f" {exc.filename!r}" if exc.filename else ""
    kind, what, hint = _OS_ERRORS.get(exc.errno or 0, ("failed", exc.strerror or str(exc), "check the path and try again"))
    return ToolError(kind, f"{tool}:{where}: {what}", hint=hint)  # type: ignore[arg-type]
