"""The one result builder of `browser_execute`: a text block (a summary line, then the steps'
results as JSON) followed by the PNG images the steps point at. `isError` is set here only."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from mcp.types import CallToolResult, ImageContent, TextContent

from .page_steps import Image


@dataclass(frozen=True, kw_only=True)
class StepReport:
    """What one step did: its result, or why it failed (and the screenshot of that moment)."""

    step: int  # numbered from 1, as in the messages
    operation: str
    result: Any = None
    error: str | None = None
    screenshot: dict[str, int] | None = None
    dialogs: list[dict[str, Any]] = field(default_factory=list)  # page dialogs the step raised

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step, "operation": self.operation, "success": self.error is None}
        if self.error is None:
            out["result"] = self.result
        else:
            out["error"] = self.error
            out["screenshot"] = self.screenshot
        if self.dialogs:
            out["dialogs"] = self.dialogs
        return out


@dataclass(frozen=True, kw_only=True)
class BatchReport:
    """Everything one `browser_execute` call has to say."""

    tab: str
    total: int
    steps: list[StepReport] = field(default_factory=list)
    url: str | None = None
    refused: str | None = None  # the request was invalid: nothing ran
    unavailable: str | None = None  # the tab could not be opened: nothing ran
    closed: bool = False
    images: list[Image] = field(default_factory=list)

    @property
    def failed(self) -> StepReport | None:
        return next((s for s in self.steps if s.error is not None), None)

    @property
    def is_error(self) -> bool:
        return self.refused is not None or self.unavailable is not None or self.failed is not None

    def summary(self) -> str:
        where = f'tab "{self.tab}"' + (f", url {self.url}" if self.url else "")
        if self.refused is not None:
            return f"refused, nothing ran ({where}): {self.refused}"
        if self.unavailable is not None:
            return f"nothing ran ({where}): {self.unavailable}"
        failed = self.failed
        closed = "; tab closed" if self.closed else ""
        if failed is None:
            return f"ok: {len(self.steps)} of {self.total} steps succeeded ({where}){closed}"
        return (
            f"failed at step {failed.step} of {self.total} ({failed.operation}) after "
            f"{failed.step - 1} succeeded ({where}){closed}: {failed.error}"
        )


def build_result(report: BatchReport) -> CallToolResult:
    """The tool result for a report: text first, then the images in image_index order."""
    body: dict[str, Any] = {"tab": report.tab, "url": report.url, "results": [s.to_json() for s in report.steps]}
    if report.refused is not None or report.unavailable is not None:
        body["error"] = report.refused or report.unavailable
    summary = " ".join(report.summary().split())  # one line whatever the reasons contain
    content: list[TextContent | ImageContent] = [
        TextContent(type="text", text=summary + "\n" + json.dumps(body, ensure_ascii=False))
    ]
    for image in report.images:
        content.append(
            ImageContent(type="image", data=base64.b64encode(image.png).decode("ascii"), mime_type="image/png")
        )
    return CallToolResult(content=content, is_error=report.is_error)
