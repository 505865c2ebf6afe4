"""The `browser_execute` tool: a batch of operations in one named tab of the desktop's Chromium.

The request is validated whole (`page_ops.BrowserRequest`, through the contract's registry)
before the tab is touched; steps run in order (`page_steps`) and stop at the first failure, with
a screenshot of that moment; one builder (`page_result`) turns what happened into the tool
result. The connection and the named tabs live in the server state's `TabRegistry`.
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp_types import CallToolResult
from playwright.async_api import Error as PlaywrightError

from capabilities import input_lease
from capabilities.contract import ToolError, ToolSpec

from .errors import BrowserError, Unavailable
from .page_egress import refuse_egress
from .page_files import refuse_uploads
from .page_ops import DEFAULT_TAB, BrowserRequest, describe_invalid
from .page_result import BatchReport, StepReport, build_result
from .page_results import BrowserOutput
from .page_steps import Images, StepContext, failure_screenshot, run_step
from .tabs import TabRegistry

if TYPE_CHECKING:
    from .state import BrowserState

DESCRIPTION = """\
Runs a list of operations in one tab of the desktop's Chromium (a real window people watch).

operations: steps, each {type, params}, run in order; the whole list is checked before anything runs.
  navigate {url, waitUntil?}      waits for domcontentloaded by default; 45 s timeout; link-local and cloud
                                  metadata addresses (169.254.0.0/16, fe80::/10, fd00:ec2::254) are refused
  wait {ms} | {selector, ms?}     a fixed time, or until the element is visible (10 s unless ms); at most 30000 ms
  click {selector}                waits up to 10 s for the element
  type {selector, text, delay?}   clicks the element, then types (delay ms between keys)
  press {key}                     Playwright key names: Enter, Tab, Escape, ArrowDown, Control+A ...
  select {selector, values}       options of a <select>, by value or label
  evaluate {script}               JavaScript expression or function source run in the page; a promise is awaited; returns the result
  screenshot {fullPage?}          a PNG of the page
  url {}                          current URL and title
  back {waitUntil?} / forward {waitUntil?} / reload {waitUntil?}
                                  through the tab's history as a person would; an error when there is no page
                                  that way
  setViewport {width, height}     320x200 up to 3840x2160
  setContent {html}               replaces the page
Reading a page without screenshots:
  readPage {filter?, depth?, ref?}  outline of the page, one element a line: role "name" [ref_12] ...;
                                  filter "interactive" (default: links, buttons, fields) or "all"; capped at 400 elements
  find {query}                    up to 20 elements matching words of role, label, placeholder or nearby text
  getText {format?}               readable text, main content first: "text" (default), "markdown" or "html"
  formInput {selector|ref, value} set a field: text, option value/label (or a list) of a <select>, true/false for a checkbox
  tabs {}                         the named tabs with URL and title
  console {} / network {}         the tab's console entries / requests (method, url, status, type, ms) since the last read
  dialog {action, promptText?}    how to answer the next alert/confirm/prompt ("accept" or "dismiss"); dialogs never
                                  block: by default alerts are accepted, confirm/prompt dismissed; a step's result lists
                                  the dialogs it raised
Pointer and keys (a place is {selector} | {ref} | {x, y} in screenshot pixels):
  hover, doubleClick, tripleClick, rightClick, middleClick {place..., modifiers?: ["Shift", "Control", "Alt", "Meta"]}
  drag {from: place, to: place}    scroll {direction, amount? (notches of 100 px), place?}
  scrollTo {selector|ref}         scroll it into view; its result's screenBox is where it is on the screen (screen
                                  pixels, for desktop_execute: the browser's own dialogs, the file chooser, extensions)
  key {text, repeat?}             chords separated by spaces: "ctrl+a Delete", "shift+Tab"
  holdKey {text, duration}        hold a key or chord for duration ms (at most 10000)
  zoom {x0, y0, x1, y1}           an enlarged PNG of a region, attached like a screenshot
Files:
  upload {selector|ref, paths}    attach files to a file input (only files under the session's data directory or home)
  download {selector|ref}         click it and wait for the download; saved in <data>/chrome/Downloads (path, size, name)
click, type, select, wait and formInput take a ref from readPage/find instead of a selector; a ref lasts until
the page navigates or the element is removed (then read the page again).
Selectors are Playwright's: CSS, text=..., role=button[name="OK"], xpath=...
tab: name of the tab (default "default"); created on first use, reused by later calls; calls on one tab run one at a time.
close: close the tab afterwards.

Result: the text is a summary line followed by the steps' results as JSON {tab, url, results: [{step,
operation, success, result}]} (steps numbered from 1), the same object as the structured content, where each
result is typed by its operation. Screenshots are PNG images after the text; a screenshot's result is
{image_index, width, height}. Steps stop at the first failure, and a screenshot of that moment is attached:
the call is then an error {error: {kind, message, step, field?, hint?}, tab, url, results}, the failed step's
entry having success false, error and screenshot. A request that is wrong is refused whole before anything
runs (kind invalid_arguments, with the step and the field inside it).
"""



async def _run(state: BrowserState, request: BrowserRequest) -> CallToolResult:
    return build_result(await execute(state.tabs, request))


async def _failed(state: BrowserState, error: ToolError, arguments: dict[str, Any]) -> CallToolResult:
    """A call refused before it ran (or failed unexpectedly), in the tool's own text."""
    tab = arguments.get("tab")
    operations = arguments.get("operations")
    return build_result(BatchReport(tab=tab if isinstance(tab, str) and tab else DEFAULT_TAB,
                                    total=len(operations) if isinstance(operations, list) else 0, error=error))


TOOL: ToolSpec[BrowserState] = ToolSpec(
    name="browser_execute",
    description=DESCRIPTION,
    args=BrowserRequest,
    output=BrowserOutput,
    run=_run,
    invalid=lambda exc, raw: describe_invalid(exc, raw).to_tool_error(),
    failed=_failed,
    annotations={"read_only_hint": False, "destructive_hint": True, "open_world_hint": True},
)


PAGE_INPUT = frozenset({"click", "doubleClick", "tripleClick", "rightClick", "middleClick", "hover", "drag",
                        "type", "press", "key", "holdKey", "select", "formInput", "scroll", "upload"})
"""Steps that act as a person's hands on the page: they wait while a person holds the screen
from the viewer (the input lease, `capabilities/input_lease.py`), as desktop_execute's do."""


async def _wait_for_the_screen(data: Path) -> tuple[dict[str, Any], ToolError | None]:
    wait = input_lease.wait_seconds()
    started = time.monotonic()
    while (verdict := input_lease.verdict(data, time.monotonic() - started, wait, longer=None)) is None:
        await anyio.sleep(0.1)
    return verdict


async def execute(registry: TabRegistry, request: BrowserRequest) -> BatchReport:
    """Run a validated request in its tab; stop at the first failing step."""
    lease = None
    if any(op.type in PAGE_INPUT for op in request.operations):
        lease, refused = await _wait_for_the_screen(registry.session.data_dir)
        if refused is not None:
            return BatchReport(tab=request.tab, total=len(request.operations), error=refused, lease=lease)
    report = await _run_steps(registry, request)
    return dataclasses.replace(report, lease=lease) if lease is not None else report


async def _run_steps(registry: TabRegistry, request: BrowserRequest) -> BatchReport:
    images = Images()
    steps: list[StepReport] = []
    url: str | None = None
    closed = False
    total = len(request.operations)
    failed: BrowserError | None = None
    try:
        refusal = refuse_uploads(request.operations, registry.session) or await refuse_egress(
            request.operations, registry.session)
        if refusal is not None:
            raise refusal
        try:
            async with registry.use(request.tab) as tab:
                page = tab.page
                assert page is not None
                ctx = StepContext(
                    page=page, images=images, shoot=partial(registry.screenshot, tab), list_tabs=registry.describe,
                    events=tab.events, downloads=registry.downloads,
                )
                tab.events.take_dialogs()  # raised between calls: nobody to report them to
                for number, op in enumerate(request.operations, start=1):
                    try:
                        result = await run_step(ctx, op)
                    except BrowserError as exc:
                        failed = exc.at_step(number)
                        shot = await failure_screenshot(ctx)
                        steps.append(StepReport(step=number, operation=op.type, error=failed, screenshot=shot,
                                                dialogs=tab.events.take_dialogs()))
                        break
                    steps.append(StepReport(step=number, operation=op.type, result=result,
                                            dialogs=tab.events.take_dialogs()))
                url = page.url
                if request.close:
                    await registry.close(tab)
                    closed = True
        except PlaywrightError as exc:  # opening, fronting or closing the tab (steps translate their own)
            raise Unavailable(f"could not open the tab: {exc.message}",
                              hint="call again; if it fails again, check the desktop session "
                                   "(`codedesk desktop status`)") from exc
    except BrowserError as exc:
        return BatchReport(tab=request.tab, total=total, steps=steps, url=url, error=exc.to_tool_error(),
                           images=images.items)
    return BatchReport(tab=request.tab, total=total, steps=steps, url=url, closed=closed, images=images.items,
                       error=failed.to_tool_error() if failed is not None else None)
