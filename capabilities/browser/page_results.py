"""What each `browser_execute` operation returns, as types.

One model (or type) per operation's result, keyed by the operation's `type` in `RESULTS`; the
step handlers return these, and the tool's output schema (`BrowserOutput`) is generated from
them: each entry of `results` is typed by its `operation`. Pixels are CSS pixels of the page's
viewport, which are the pixels of its screenshots.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, create_model

from capabilities.contract import OutputModel
from capabilities.input_lease import LeaseReport

Selector = Annotated[str, Field(description="The selector or ref the step named")]


class PagePoint(OutputModel):
    """A point of the page's viewport, in CSS pixels (the pixels of a screenshot)."""

    x: int = Field(description="CSS pixels from the viewport's left edge")
    y: int = Field(description="CSS pixels from the viewport's top edge")


class ImageRef(OutputModel):
    """A PNG attached to the result as an image block."""

    image_index: int = Field(description="Index of the PNG among the result's images (0 = the first image "
                                         "block after the text)")
    width: int = Field(description="Width of the PNG in pixels")
    height: int = Field(description="Height of the PNG in pixels")


class NavigateResult(OutputModel):
    url: str = Field(description="Where the page landed, after redirects")
    title: str = Field(description="The page's title")
    status: int | None = Field(description="HTTP status of the main document; null when there was no response "
                                           "(about:, data:, same-document navigation)")


class SleptResult(OutputModel):
    waited_ms: int = Field(description="Milliseconds slept")


class VisibleResult(OutputModel):
    selector: Selector
    visible: Literal[True] = Field(description="The element became visible")


class ClickResult(OutputModel):
    clicked: Selector


class TypeResult(OutputModel):
    typed: int = Field(description="Characters typed")
    selector: Selector


class PressResult(OutputModel):
    pressed: str = Field(description="The key pressed, as Playwright names it")


class SelectResult(OutputModel):
    selected: list[str] = Field(description="Values of the options now selected")


class UrlResult(OutputModel):
    url: str = Field(description="The page's URL")
    title: str = Field(description="The page's title")


class ViewportResult(OutputModel):
    width: int = Field(description="Viewport width in CSS pixels")
    height: int = Field(description="Viewport height in CSS pixels")


class ContentResult(OutputModel):
    url: str = Field(description="The page's URL (unchanged by setContent)")


class ReadPageResult(OutputModel):
    title: str = Field(description="The page's title")
    url: str = Field(description="The page's URL")
    elements: int = Field(description="Elements listed in tree")
    truncated: bool = Field(description="The listing stopped at its cap of 400 elements")
    tree: str = Field(description='One element a line, indented by nesting: role "name" [ref_N] and its state; '
                                  "a ref names the element in later steps until the page navigates")
    note: str | None = Field(None, description="How to narrow a truncated listing")


class FindResult(OutputModel):
    matches: int = Field(description="Elements that matched, in all")
    shown: int = Field(description="Elements listed (the best 20 at most)")
    elements: str = Field(description='One element a line, best match first: role "name" [ref_N] ...')


class TextResult(OutputModel):
    title: str = Field(description="The page's title")
    url: str = Field(description="The page's URL")
    text: str = Field(description="What a person reads on the page, main content first (after it, the rest "
                                  "of the page following a --- line); no script or style source, hidden "
                                  "elements left out; at most 50,000 characters")
    truncated: bool | None = Field(None, description="The text was cut at 50,000 characters")
    note: str | None = Field(None, description="How to read the rest of a truncated text")


class FilledResult(OutputModel):
    element: Selector
    value: str | bool | list[str] = Field(description="The text filled in, or the checked state set")


class SelectedResult(OutputModel):
    element: Selector
    selected: list[str] = Field(description="Values of the <select>'s options now selected")


class TabInfo(OutputModel):
    name: str = Field(description="The tab's name, as given to browser_execute's tab")
    url: str = Field(description="Its page's URL (its last one when it is not open now)")
    title: str = Field(description='Its page\'s title ("" when it is not open now)')


class TabsResult(OutputModel):
    tabs: list[TabInfo]


class ConsoleEntry(OutputModel):
    type: str = Field(description='"log", "info", "warning", "error", "debug" ... or "pageerror" (an uncaught '
                                  "exception)")
    text: str
    source: str = Field(description='"url:line" of the code that logged, "" when unknown')


class ConsoleResult(OutputModel):
    entries: list[ConsoleEntry] = Field(description="Entries since the last console step, oldest first")
    dropped: int | None = Field(None, description="Older entries dropped (500 are kept between reads)")


class NetworkEntry(OutputModel):
    method: str
    url: str
    status: int | None = Field(description="HTTP status; null when the request got no response")
    type: str = Field(description='Resource type: "document", "script", "fetch", "xhr", "image" ...')
    ms: float | None = Field(None, description="Milliseconds from the request's start to the response's end, "
                                               "when known")
    failure: str | None = Field(None, description="Why the request failed, when it did")


class NetworkResult(OutputModel):
    entries: list[NetworkEntry] = Field(description="Requests finished since the last network step, oldest first")
    dropped: int | None = Field(None, description="Older entries dropped (500 are kept between reads)")


class DialogResult(OutputModel):
    next_dialog: Literal["accept", "dismiss"] = Field(description="How the next dialog will be answered")


class DragResult(OutputModel):
    from_: PagePoint = Field(alias="from", description="Where the button went down")
    to: PagePoint = Field(description="Where it was released")


class ScrollResult(OutputModel):
    scrollX: float = Field(description="The page's horizontal scroll offset afterwards, CSS pixels")
    scrollY: float = Field(description="The page's vertical scroll offset afterwards, CSS pixels")


class ScrolledToResult(OutputModel):
    visible: Selector
    screenBox: dict[str, int] = Field(
        description="{x, y, width, height} of the element on the screen, in screen pixels: where "
                    "desktop_execute clicks it (the tab is in front during the call)")


class KeyResult(OutputModel):
    pressed: list[str] = Field(description="The chords pressed, as Playwright names them")
    repeat: int


class HoldKeyResult(OutputModel):
    held: str = Field(description="The key or chord held, as Playwright names it")
    ms: int = Field(description="Milliseconds held")


class Region(OutputModel):
    x: int = Field(description="Left edge, CSS pixels of the viewport")
    y: int = Field(description="Top edge, CSS pixels of the viewport")
    width: int
    height: int


class ZoomResult(ImageRef):
    """The region's PNG, enlarged (at most 4x) to about 1280 pixels wide."""

    region: Region = Field(description="The region of the page shown")


class UploadResult(OutputModel):
    uploaded: list[str] = Field(description="Names of the files attached")


class DownloadResult(OutputModel):
    path: str = Field(description="Where the file was saved (in <data>/chrome/Downloads)")
    size: int = Field(description="Its size in bytes")
    suggested_name: str = Field(description="The name the site suggested")
    url: str = Field(description="Where it was downloaded from")


def _pointer_result(kind: str) -> type[OutputModel]:
    return create_model(
        kind[:1].upper() + kind[1:] + "Result", __base__=OutputModel,
        **{kind: (Union[str, PagePoint], Field(description="The selector or ref, or the point, acted on"))},
    )


#: Operation type -> the type of its result.
RESULTS: dict[str, Any] = {
    "navigate": NavigateResult,
    "wait": Union[SleptResult, VisibleResult],
    "click": ClickResult,
    "type": TypeResult,
    "press": PressResult,
    "select": SelectResult,
    "evaluate": Annotated[Any, Field(description="The script's value as JSON (a promise is awaited; dates as ISO "
                                                 "strings, NaN and Infinity as strings, undefined as null)")],
    "screenshot": ImageRef,
    "url": UrlResult,
    "setViewport": ViewportResult,
    "setContent": ContentResult,
    "readPage": ReadPageResult,
    "find": FindResult,
    "getText": TextResult,
    "formInput": Union[FilledResult, SelectedResult],
    "tabs": TabsResult,
    "console": ConsoleResult,
    "network": NetworkResult,
    "dialog": DialogResult,
    **{kind: _pointer_result(kind) for kind in ("hover", "doubleClick", "tripleClick", "rightClick", "middleClick")},
    "drag": DragResult,
    "scroll": ScrollResult,
    "scrollTo": ScrolledToResult,
    "key": KeyResult,
    "holdKey": HoldKeyResult,
    "zoom": ZoomResult,
    "upload": UploadResult,
    "download": DownloadResult,
    "back": NavigateResult,
    "forward": NavigateResult,
    "reload": NavigateResult,
}


class DialogEntry(OutputModel):
    """A dialog the page raised during the step, already answered (dialogs never block)."""

    type: Literal["alert", "confirm", "prompt", "beforeunload"]
    message: str
    answer: Literal["accepted", "dismissed"]


def _done(operation: str, result: Any) -> type[OutputModel]:
    return create_model(
        operation[:1].upper() + operation[1:] + "Done", __base__=OutputModel,
        step=(int, Field(description="The step's number, from 1")),
        operation=(Literal[operation], ...),
        success=(Literal[True], ...),
        result=(result, ...),
        dialogs=(list[DialogEntry] | None, Field(None, description="Dialogs the step raised, if any")),
    )


DONE_MODELS = {operation: _done(operation, result) for operation, result in RESULTS.items()}
StepDone = Annotated[Union[tuple(DONE_MODELS.values())], Field(discriminator="operation")]  # type: ignore[misc]


class BrowserOutput(OutputModel):
    """What a `browser_execute` call did."""

    tab: str = Field(description="The tab's name")
    url: str = Field(description="The tab's URL after the last step")
    results: list[StepDone] = Field(description="One entry per step, in order; `result` is typed by `operation`")
    lease: LeaseReport | None = Field(None, description="With input steps: the input lease")


def dump(result: Any) -> Any:
    """A step's result as JSON: models by their aliases, unset optional fields left out."""
    if isinstance(result, OutputModel):
        return result.model_dump(mode="json", by_alias=True)
    return result
