"""The operations of `browser_execute`, as types.

One pydantic model per operation, keyed by its `type`; the same types validate a request
(`BrowserRequest`, validated whole by the contract's registry before any step runs) and
generate the JSON schema the model sees, so the two cannot drift. `describe_invalid` words a
failed validation naming every bad step (numbered from 1) and field. What each operation
returns is typed in `page_results`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import InvalidRequest

# Limits from the spec.
NAVIGATE_TIMEOUT_MS = 45_000
WAIT_DEFAULT_MS = 10_000
WAIT_MAX_MS = 30_000
CLICK_TIMEOUT_MS = 10_000
VIEWPORT_MIN = (320, 200)
VIEWPORT_MAX = (3840, 2160)
# Not in the spec: a bound so one `type` step cannot hold a tab for minutes.
TYPE_DELAY_MAX_MS = 1_000
DEFAULT_TAB = "default"


class _Params(BaseModel):
    # strict: "10" is not 10 and 1 is not true; the model should send the right JSON type.
    model_config = ConfigDict(extra="forbid", strict=True)


REF_PATTERN = r"^ref_[0-9]+$"
Ref = Annotated[
    str, Field(pattern=REF_PATTERN, description="An element ref from readPage or find, e.g. ref_12")
]
READ_PAGE_CAP = 400  # elements listed by one readPage
FIND_LIMIT = 20
TEXT_CAP = 50_000  # characters of getText


class _Target(_Params):
    """An element named by a Playwright selector or by a ref from readPage/find."""

    selector: Annotated[str | None, Field(min_length=1, description="Playwright selector (CSS, text=, role=...)")] = None
    ref: Ref | None = None

    @model_validator(mode="after")
    def _one_target(self) -> "_Target":
        if (self.selector is None) == (self.ref is None):
            raise ValueError("give selector or ref (from readPage or find), exactly one of them")
        return self


class NavigateParams(_Params):
    url: Annotated[str, Field(min_length=1, description="Absolute URL, e.g. https://example.com/")]
    waitUntil: Literal["load", "domcontentloaded", "networkidle", "commit"] = Field(
        "domcontentloaded", description="Load state to wait for (45 second timeout)"
    )

    @model_validator(mode="after")
    def _absolute(self) -> "NavigateParams":
        if ":" not in self.url:
            raise ValueError(f"url {self.url!r} has no scheme; give an absolute URL such as https://{self.url}")
        return self


class WaitParams(_Params):
    selector: Annotated[str | None, Field(min_length=1, description="Wait until this element is visible")] = None
    ref: Ref | None = None
    ms: Annotated[
        int | None,
        Field(ge=0, le=WAIT_MAX_MS, description="Milliseconds to sleep; with selector, the timeout (default 10000)"),
    ] = None

    @model_validator(mode="after")
    def _one_of(self) -> "WaitParams":
        if self.selector is not None and self.ref is not None:
            raise ValueError("give selector or ref, not both")
        if self.selector is None and self.ref is None and self.ms is None:
            raise ValueError("give ms (a fixed time) or selector (a visible element), or both")
        if (self.selector is not None or self.ref is not None) and self.ms == 0:
            # Playwright reads a 0 timeout as "wait forever".
            raise ValueError("with selector, ms is how long to wait for it: 1 to 30000")
        return self


class ClickParams(_Target):
    pass


class TypeParams(_Target):
    text: str
    delay: Annotated[int, Field(ge=0, le=TYPE_DELAY_MAX_MS, description="Milliseconds between keys")] = 0


class PressParams(_Params):
    key: Annotated[str, Field(min_length=1, description='Playwright key name, e.g. "Enter", "Control+A"')]


class SelectParams(_Target):
    values: Annotated[list[str], Field(description="Option values or labels to select")]


class EvaluateParams(_Params):
    script: Annotated[
        str,
        Field(min_length=1, description="A JavaScript expression or function source; a promise is awaited"),
    ]


class ScreenshotParams(_Params):
    fullPage: bool = Field(False, description="The whole scrollable page instead of the visible part")


class UrlParams(_Params):
    pass


class HistoryParams(_Params):
    waitUntil: Literal["load", "domcontentloaded", "networkidle", "commit"] = Field(
        "domcontentloaded", description="Load state to wait for (45 second timeout)"
    )


class SetViewportParams(_Params):
    width: Annotated[int, Field(ge=VIEWPORT_MIN[0], le=VIEWPORT_MAX[0])]
    height: Annotated[int, Field(ge=VIEWPORT_MIN[1], le=VIEWPORT_MAX[1])]


class SetContentParams(_Params):
    html: str


class ReadPageParams(_Params):
    filter: Literal["interactive", "all"] = Field(
        "interactive", description="interactive: links, buttons, fields; all: also headings, text, images, landmarks"
    )
    depth: Annotated[int | None, Field(ge=1, le=50, description="Levels of nesting to list")] = None
    ref: Ref | None = Field(None, description="List only inside this element")


class FindParams(_Params):
    query: Annotated[str, Field(min_length=1, description="Words of the role, label, placeholder or nearby text")]


class GetTextParams(_Params):
    format: Literal["text", "markdown", "html"] = "text"


class FormInputParams(_Target):
    value: Annotated[
        str | bool | list[str],
        Field(description="Text for a field, option value/label (or a list) for a <select>, true/false for a checkbox or radio"),
    ]


class TabsParams(_Params):
    pass


class DialogParams(_Params):
    action: Literal["accept", "dismiss"]
    promptText: str | None = Field(None, description="The answer typed into a prompt() when accepting")


class _NoParams(_Params):
    pass


Modifier = Literal["Alt", "Control", "Meta", "Shift"]


class PointSpec(_Params):
    """A place on the page: an element (selector or ref; its centre) or x, y in screenshot pixels."""

    selector: Annotated[str | None, Field(min_length=1)] = None
    ref: Ref | None = None
    x: Annotated[int | None, Field(ge=0, le=VIEWPORT_MAX[0] * 4)] = None
    y: Annotated[int | None, Field(ge=0, le=VIEWPORT_MAX[1] * 16)] = None

    @model_validator(mode="after")
    def _one_place(self) -> "PointSpec":
        given = [self.selector is not None, self.ref is not None, self.x is not None or self.y is not None]
        if sum(given) != 1 or (given[2] and (self.x is None or self.y is None)):
            raise ValueError("give selector, ref, or both x and y (screenshot pixels), exactly one of them")
        return self


class PointerParams(PointSpec):
    modifiers: list[Modifier] = Field(default_factory=list, description="Keys held during the click")


class DragParams(_Params):
    from_: PointSpec = Field(alias="from")
    to: PointSpec


class ScrollParams(_Params):
    direction: Literal["up", "down", "left", "right"]
    amount: Annotated[int, Field(ge=1, le=50, description="Wheel notches of 100 px")] = 3
    selector: Annotated[str | None, Field(min_length=1, description="Scroll with the pointer over this element")] = None
    ref: Ref | None = None
    x: Annotated[int | None, Field(ge=0)] = None
    y: Annotated[int | None, Field(ge=0)] = None

    @model_validator(mode="after")
    def _at_most_one_place(self) -> "ScrollParams":
        places = [self.selector is not None, self.ref is not None, self.x is not None or self.y is not None]
        if sum(places) > 1 or (places[2] and (self.x is None or self.y is None)):
            raise ValueError("give at most one of selector, ref, or x and y")
        return self


class KeyParams(_Params):
    text: Annotated[str, Field(min_length=1, description='Chords separated by spaces: "ctrl+a Delete", "shift+Tab"')]
    repeat: Annotated[int, Field(ge=1, le=100)] = 1


class HoldKeyParams(_Params):
    text: Annotated[str, Field(min_length=1, description='A key or chord, e.g. "Shift" or "ctrl+ArrowRight"')]
    duration: Annotated[int, Field(ge=1, le=10_000, description="Milliseconds to hold")]


class UploadParams(_Target):
    paths: Annotated[
        list[Annotated[str, Field(min_length=1)]],
        Field(min_length=1, description="Files in the session's data directory or the desktop user's home"),
    ]


class DownloadParams(_Target):
    pass


class ZoomParams(_Params):
    x0: Annotated[int, Field(ge=0)]
    y0: Annotated[int, Field(ge=0)]
    x1: Annotated[int, Field(ge=1)]
    y1: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _a_region(self) -> "ZoomParams":
        if self.x1 <= self.x0 or self.y1 <= self.y0:
            raise ValueError("the region needs x1 > x0 and y1 > y0 (screenshot pixels)")
        return self


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Navigate(_Op):
    """Go to a URL; waits for domcontentloaded by default (45 s timeout)."""

    type: Literal["navigate"]
    params: NavigateParams


class Wait(_Op):
    """Sleep ms, or wait until selector is visible (10 s unless ms is given); at most 30 s."""

    type: Literal["wait"]
    params: WaitParams


class Click(_Op):
    """Click an element, waiting up to 10 s for it."""

    type: Literal["click"]
    params: ClickParams


class Type(_Op):
    """Click an element, then type text (delay ms between keys)."""

    type: Literal["type"]
    params: TypeParams


class Press(_Op):
    """Press a key (or a chord such as Control+A) in the focused element."""

    type: Literal["press"]
    params: PressParams


class Select(_Op):
    """Select options of a <select> by value or label."""

    type: Literal["select"]
    params: SelectParams


class Evaluate(_Op):
    """Run JavaScript in the page and return its (JSON) result."""

    type: Literal["evaluate"]
    params: EvaluateParams


class Screenshot(_Op):
    """A PNG of the page, attached as an image; the step's result is {image_index, width, height}."""

    type: Literal["screenshot"]
    params: ScreenshotParams = ScreenshotParams()


class Url(_Op):
    """The current URL and title."""

    type: Literal["url"]
    params: UrlParams = UrlParams()


class Back(_Op):
    """Go back one page in the tab's history, as the browser's back button does."""

    type: Literal["back"]
    params: HistoryParams = HistoryParams()


class Forward(_Op):
    """Go forward one page in the tab's history."""

    type: Literal["forward"]
    params: HistoryParams = HistoryParams()


class Reload(_Op):
    """Load the current page again."""

    type: Literal["reload"]
    params: HistoryParams = HistoryParams()


class SetViewport(_Op):
    """Set the page's viewport, 320x200 up to 3840x2160."""

    type: Literal["setViewport"]
    params: SetViewportParams


class SetContent(_Op):
    """Replace the page's content with html."""

    type: Literal["setContent"]
    params: SetContentParams


class ReadPage(_Op):
    """The page as an accessibility-style outline, each element with a ref later steps accept."""

    type: Literal["readPage"]
    params: ReadPageParams = ReadPageParams()


class Find(_Op):
    """Up to 20 elements matching the words of a query, with refs."""

    type: Literal["find"]
    params: FindParams


class GetText(_Op):
    """The readable text of the page, main content first."""

    type: Literal["getText"]
    params: GetTextParams = GetTextParams()


class FormInput(_Op):
    """Set a field directly: text, a <select>'s options, or a checkbox/radio's state."""

    type: Literal["formInput"]
    params: FormInputParams


class Tabs(_Op):
    """The named tabs with their URL and title."""

    type: Literal["tabs"]
    params: TabsParams = TabsParams()


class Console(_Op):
    """The tab's console entries (and page errors) since the last read."""

    type: Literal["console"]
    params: _NoParams = _NoParams()


class Network(_Op):
    """The tab's requests (method, URL, status, type, ms) since the last read (requests in
    flight get a second to finish)."""

    type: Literal["network"]
    params: _NoParams = _NoParams()


class DialogOp(_Op):
    """How to answer the next alert/confirm/prompt/beforeunload (by default alerts and
    beforeunload are accepted, confirm and prompt dismissed)."""

    type: Literal["dialog"]
    params: DialogParams


class Hover(_Op):
    """Move the pointer over an element or a point."""

    type: Literal["hover"]
    params: PointerParams


class DoubleClick(_Op):
    """Double-click an element or a point."""

    type: Literal["doubleClick"]
    params: PointerParams


class TripleClick(_Op):
    """Triple-click (selects a paragraph or a field's text)."""

    type: Literal["tripleClick"]
    params: PointerParams


class RightClick(_Op):
    """Right-click (context menu)."""

    type: Literal["rightClick"]
    params: PointerParams


class MiddleClick(_Op):
    """Middle-click."""

    type: Literal["middleClick"]
    params: PointerParams


class Drag(_Op):
    """Press at from, move to to, release."""

    type: Literal["drag"]
    params: DragParams


class Scroll(_Op):
    """Turn the mouse wheel, over an element or a point (default: the middle of the page)."""

    type: Literal["scroll"]
    params: ScrollParams


class ScrollTo(_Op):
    """Scroll an element into view."""

    type: Literal["scrollTo"]
    params: ClickParams


class Key(_Op):
    """Press keys: chords separated by spaces, e.g. "ctrl+a Delete"."""

    type: Literal["key"]
    params: KeyParams


class HoldKey(_Op):
    """Hold a key or chord down for a while."""

    type: Literal["holdKey"]
    params: HoldKeyParams


class Zoom(_Op):
    """An enlarged PNG of a region (x0, y0)-(x1, y1) of the page, in screenshot pixels."""

    type: Literal["zoom"]
    params: ZoomParams


class Upload(_Op):
    """Attach files to a file input (from the session's data directory or the user's home)."""

    type: Literal["upload"]
    params: UploadParams


class Download(_Op):
    """Click what starts a download and wait for it; saved in <data>/chrome/Downloads."""

    type: Literal["download"]
    params: DownloadParams


_OPERATION_CLASSES = (
    # the spec's eleven, then page reading
    Navigate, Wait, Click, Type, Press, Select, Evaluate, Screenshot, Url, SetViewport, SetContent,
    ReadPage, Find, GetText, FormInput, Tabs, Console, Network, DialogOp,
    Hover, DoubleClick, TripleClick, RightClick, MiddleClick, Drag, Scroll, ScrollTo, Key, HoldKey, Zoom,
    Upload, Download, Back, Forward, Reload,
)
Operation = Annotated[Union[_OPERATION_CLASSES], Field(discriminator="type")]  # type: ignore[valid-type]
OPERATION_TYPES: dict[str, type[_Op]] = {
    cls.model_fields["type"].annotation.__args__[0]: cls  # type: ignore[union-attr]
    for cls in _OPERATION_CLASSES
}


class BrowserRequest(BaseModel):
    """A whole `browser_execute` call."""

    model_config = ConfigDict(extra="forbid")

    operations: Annotated[
        list[Operation], Field(min_length=1, description="Steps, each {type, params}, run in order")
    ]
    tab: Annotated[
        str,
        Field(
            min_length=1,
            max_length=100,
            strict=True,
            description='Name of the tab. Created on first use, reused by later calls. Default "default"',
        ),
    ] = DEFAULT_TAB
    close: Annotated[bool, Field(strict=True, description="Close the tab afterwards")] = False


def describe_invalid(exc: ValidationError, raw: dict[str, Any]) -> InvalidRequest:
    """A failed validation of a whole request: every bad step (numbered from 1) and field in
    the message; `step` and `field` (inside the step) are the first problem's."""
    message, step, field = _describe(exc, raw)
    return InvalidRequest(message, step=step, field=field,
                          hint="fix the steps named and call again; nothing ran")


def _describe(exc: ValidationError, raw: dict[str, Any]) -> tuple[str, int | None, str | None]:
    ops = raw.get("operations") if isinstance(raw, dict) else None
    problems: list[str] = []
    first: tuple[int | None, str | None] | None = None
    for err in exc.errors():
        loc = list(err["loc"])
        if loc and loc[0] == "operations" and len(loc) >= 2 and isinstance(loc[1], int):
            index = loc[1]
            step = ops[index] if isinstance(ops, list) and index < len(ops) else None
            sentence, field = _describe_step(index, step, err, loc[2:])
            problems.append(sentence)
            first = first or (index + 1, field)
        else:
            problems.append(_describe_top(err, loc))
            first = first or (None, ".".join(str(p) for p in loc) or None)
    # pydantic may report one mistake twice (e.g. a union); keep each once, in order.
    unique = list(dict.fromkeys(problems))
    step, field = first or (None, None)
    return "; ".join(unique), step, field


def _describe_top(err: dict, loc: list) -> str:
    name = ".".join(str(p) for p in loc) or "request"
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"unknown field {name!r}; browser_execute takes operations, tab and close"
    if kind == "missing":
        return f"missing field {name!r}: give a list of steps, each {{type, params}}"
    if name == "operations" and kind == "too_short":
        return "operations is empty: give at least one step"
    return f"{name}: {_msg(err)}"


def _describe_step(index: int, step: Any, err: dict, rest: list) -> tuple[str, str | None]:
    """One problem of one step: (the sentence, the field inside the step)."""
    kind = err["type"]
    op_type = step.get("type") if isinstance(step, dict) else None
    label = f"step {index + 1}" + (f" ({op_type})" if isinstance(op_type, str) and op_type in OPERATION_TYPES else "")
    if kind == "union_tag_invalid":
        return f"{label}: unknown operation type {op_type!r}; use one of {', '.join(OPERATION_TYPES)}", "type"
    if kind == "union_tag_not_found":
        return f"{label}: missing field 'type'; use one of {', '.join(OPERATION_TYPES)}", "type"
    if kind in ("model_attributes_type", "model_type", "dict_type") and not rest:
        return f"{label}: a step must be an object {{type, params}}, got {type(step).__name__}", None
    # rest starts with the union tag (the operation type) when the step got that far.
    if rest and rest[0] == op_type:
        rest = rest[1:]
    field = ".".join(str(p) if p != "from_" else "from" for p in rest)
    cls = OPERATION_TYPES.get(op_type) if isinstance(op_type, str) else None
    if kind == "extra_forbidden":
        if len(rest) == 1:
            return (f"{label}: unknown field {field!r}; a step has only type and params "
                    f"(put {field!r} inside params)"), field
        allowed = ", ".join(cls.model_fields["params"].annotation.model_fields) if cls else ""
        return f"{label}: unknown field {field!r}; {op_type} takes params: {allowed or 'none'}", field
    if kind == "missing":
        return f"{label}: missing field {field!r}", field
    return f"{label}: field {field or 'params'!r}: {_msg(err)}", field or "params"


def _msg(err: dict) -> str:
    msg = err["msg"]
    # "Value error, <ours>" -> "<ours>": our own validators already speak to the model.
    return msg.removeprefix("Value error, ")
