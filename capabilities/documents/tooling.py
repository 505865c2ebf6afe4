"""What every tool module shares: the argument base model, the tool spec, the workspace.

Each tool family module exports `TOOLS: list[ToolSpec]`; `server.py` combines them. A tool's
input schema is generated from its `Args` model, and the same model validates its input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .paths import Roots
from .results import ToolOutput

if TYPE_CHECKING:
    from .convert import OfficeConverter


class Args(BaseModel):
    """Base of every tool's arguments: unknown fields are refused by name."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Workspace:
    """The server's long-lived state, created by its lifespan.

    `roots` are read afresh on every call unless fixed, so a desktop session that starts after
    the server is found.
    """

    office: OfficeConverter
    fixed_roots: Roots | None = None

    @property
    def roots(self) -> Roots:
        return self.fixed_roots if self.fixed_roots is not None else Roots.from_environment()


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, the description the model reads, its argument model and its body.

    `run` is synchronous (pymupdf, Pillow and LibreOffice block); the server calls it in a
    worker thread.
    """

    name: str
    description: str
    args: type[Args]
    run: Callable[[Workspace, Any], ToolOutput]

    def input_schema(self) -> dict[str, Any]:
        schema = self.args.model_json_schema()
        schema["title"] = f"{self.name}Arguments"
        return schema
