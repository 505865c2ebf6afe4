"""The one result builder of `browser_execute`: structured content by the tool's output schema
(`page_results.BrowserOutput`, or the contract's error object plus the steps that ran), the text
the spec prescribes (a summary line, then the same object as JSON), then the PNG images the
steps point at. Built with the contract's `success` / `failure`, so `isError` is decided there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp_types import CallToolResult

from capabilities.contract import Image as ImageBlock
from capabilities.contract import ToolError, failure, success

from .errors import BrowserError
from .page_results import ImageRef, dump
from .page_steps import Image


@dataclass(frozen=True, kw_only=True)
class StepReport:
    """What one step did: its result, or why it failed (and the screenshot of that moment)."""

    step: int  # numbered from 1, as in the messages
    operation: str
    result: Any = None
    error: BrowserError | None = None
    screenshot: ImageRef | None = None
    dialogs: list[dict[str, Any]] = field(default_factory=list)  # page dialogs the step raised

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step, "operation": self.operation, "success": self.error is None}
        if self.error is None:
            out["result"] = dump(self.result)
        else:
            out["error"] = self.error.message
            if self.screenshot is not None:
                out["screenshot"] = dump(self.screenshot)
        if self.dialogs:
            out["dialogs"] = self.dialogs
        return out


@dataclass(frozen=True, kw_only=True)
class BatchReport:
    """Everything one `browser_execute` call has to say. `error` is why the call failed: a
    step's failure (its `step` set), or what stopped the batch before or between steps."""

    tab: str
    total: int
    steps: list[StepReport] = field(default_factory=list)
    url: str | None = None
    error: ToolError | None = None
    closed: bool = False
    images: list[Image] = field(default_factory=list)
    lease: dict[str, Any] | None = None  # with input steps: who held the screen, how long they waited

    @property
    def failed(self) -> StepReport | None:
        return next((s for s in self.steps if s.error is not None), None)

    @property
    def is_error(self) -> bool:
        return self.error is not None

    def summary(self) -> str:
        where = f'tab "{self.tab}"' + (f", url {self.url}" if self.url else "")
        closed = "; tab closed" if self.closed else ""
        failed = self.failed
        if self.error is None:
            return f"ok: {len(self.steps)} of {self.total} steps succeeded ({where}){closed}"
        why = self.error.message + (f" ({self.error.hint})" if self.error.hint else "")
        if failed is not None:
            return (f"failed at step {failed.step} of {self.total} ({failed.operation}) after "
                    f"{failed.step - 1} succeeded ({where}){closed}: {why}")
        if not self.steps and self.error.kind in ("invalid_arguments", "refused"):
            return f"refused, nothing ran ({where}): {why}"
        if not self.steps:
            return f"nothing ran ({where}): {why}"
        return f"stopped after {len(self.steps)} of {self.total} steps ({where}): {why}"


def build_result(report: BatchReport) -> CallToolResult:
    """The tool result for a report: structured content, the text, then the images in
    image_index order."""
    body: dict[str, Any] = {"tab": report.tab, "url": report.url, "results": [s.to_json() for s in report.steps]}
    if report.lease is not None:
        body["lease"] = report.lease
    summary = " ".join(report.summary().split())  # one line whatever the messages contain
    images = [ImageBlock(image.png) for image in report.images]
    if report.error is None:
        return success(body, summary, images)
    return failure(report.error, summary=summary, extra=body, images=images)
