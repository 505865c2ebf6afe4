"""The operations of `desktop_execute`: typed steps, their results, their config, and the
whole call as one model.

Each step is `{type, params}`; `Operation` is a union keyed by `type`. `OPERATIONS` names every
operation with its params model, its result type and a one-line description; from it come the
input schema (`DesktopRequest`, which also validates a call whole before anything runs) and the
output schema (`DesktopOutput`: each result entry typed by its operation). `describe_invalid`
words a failed validation naming each bad step (its index in `operations` and its number,
counted from 1) and field; `check_on_screen` then checks every coordinate against the screen's
current size.

To add an operation: its params model (or None), its result type and a line in `OPERATIONS`,
and its implementation in `desktop_tool._perform` (or a module it dispatches to).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)

from capabilities.contract import OutputModel
from capabilities.input_lease import LeaseReport

from .desktop_coordinates import MAX_SCALE, MIN_SCALE, ImageSpace, ScaleError, image_scale, scale_point
from .desktop_keys import BUTTONS, KEYS, untypeable
from .errors import InvalidRequest

MAX_SLEEP_MS = 30_000
MAX_WAIT_MS = 60_000
MAX_MARKS = 200
#: Steps that attach an image (any step with captureAfter does too).
IMAGE_STEPS = frozenset({"screen.grab", "screen.grabRegion", "window.capture", "screen.marks"})


def _known_key(name: str) -> str:
    if name not in KEYS:
        raise ValueError(
            f"unknown key {name!r}; keys use nut.js names such as Enter, Escape, Tab, LeftControl, "
            f"LeftShift, LeftAlt, A to Z, Num0 to Num9, F1 to F24 (the tool description lists all)"
        )
    return name


KeyName = Annotated[str, AfterValidator(_known_key), Field(description="A nut.js key name")]
Button = Literal["LEFT", "MIDDLE", "RIGHT"]
assert set(Button.__args__) == set(BUTTONS)  # type: ignore[attr-defined]
Coordinate = Annotated[int, Field(ge=0, description="Screen pixels from the left or top edge")]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoParams(_Params):
    pass


class Point(_Params):
    x: Coordinate
    y: Coordinate


AccessRef = Annotated[str, Field(pattern=r"^a_[0-9]+$", max_length=24,
                                  description="An element ref from accessibility.tree/find, e.g. a_12")]


class ClickParams(_Params):
    button: Button = "LEFT"
    x: Coordinate | None = Field(None, description="Moves here first when given with y")
    y: Coordinate | None = None
    ref: AccessRef | None = Field(None, description="Moves to the centre of this element first")
    mark: Annotated[int, Field(ge=1, le=MAX_MARKS)] | None = Field(
        None, description="Moves to the centre of this mark of the last screen.marks first")

    @model_validator(mode="after")
    def _both_or_neither(self) -> "ClickParams":
        if (self.x is None) != (self.y is None):
            raise ValueError("give both x and y, or neither to act where the pointer is")
        if sum((self.ref is not None, self.x is not None, self.mark is not None)) > 1:
            raise ValueError("give x and y, ref, or mark: one of them")
        return self


class ButtonParams(_Params):
    button: Button = "LEFT"


class DragParams(_Params):
    to: Point
    from_: Point | None = Field(None, alias="from", description="Default: where the pointer is")


class ScrollParams(_Params):
    amount: Annotated[int, Field(ge=1, le=1000, description="Wheel clicks")]
    x: Coordinate | None = Field(None, description="Moves here first when given with y")
    y: Coordinate | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> "ScrollParams":
        if (self.x is None) != (self.y is None):
            raise ValueError("give both x and y, or neither to scroll where the pointer is")
        return self


Keys = Annotated[list[KeyName], Field(min_length=1, max_length=16)]


def _us_typeable(text: str) -> str:
    bad = untypeable(text)
    if bad is not None:
        index, char = bad
        raise ValueError(
            f"character {char!r} (U+{ord(char):04X}) at position {index} has no key on a US "
            f"keyboard; put the text on the clipboard with clipboard.setContent {{text}} and paste "
            f'it with keyboard.type {{keys: ["LeftControl", "V"]}}'
        )
    return text


class TypeParams(_Params):
    """Either `text` (typed character by character on a US layout) or `keys` (pressed together),
    into the element `ref` when given (focused first), else wherever the keyboard focus is."""

    text: Annotated[str, AfterValidator(_us_typeable), Field(max_length=20_000)] | None = None
    keys: Keys | None = None
    ref: AccessRef | None = Field(None, description="Gives this element the keyboard focus first")

    @model_validator(mode="after")
    def _text_or_keys(self) -> "TypeParams":
        if (self.text is None) == (self.keys is None):
            raise ValueError("give either text or keys")
        return self


class KeysParams(_Params):
    keys: Keys


class RegionParams(_Params):
    left: Coordinate
    top: Coordinate
    width: Annotated[int, Field(ge=1)]
    height: Annotated[int, Field(ge=1)]


class ClipboardParams(_Params):
    text: Annotated[str, Field(max_length=10_000_000)]


class SleepParams(_Params):
    ms: Annotated[int, Field(ge=0, le=MAX_SLEEP_MS)]


WindowTitle = Annotated[str, Field(min_length=1, max_length=500, description="Words of the window's title")]
WaitMs = Annotated[int, Field(ge=0, le=MAX_WAIT_MS, description="Milliseconds")]


class AccessibilityTreeParams(_Params):
    window: Annotated[int, Field(ge=1)] | WindowTitle | None = Field(
        None, description="The window (X id from getWindows, or words of its title); default the active window")
    desktop: bool = Field(False, description="The whole desktop: every application's windows (web pages' "
                                             "contents only when their window is named)")
    depth: Annotated[int, Field(ge=1, le=64)] | None = Field(None, description="Levels below each window")
    roles: Annotated[list[Annotated[str, Field(max_length=40)]], Field(min_length=1, max_length=40)] | None = Field(
        None, description='List only these roles, e.g. ["push button", "check box"]')
    maxElements: Annotated[int, Field(ge=1, le=5000)] = Field(400, description="Lines at most")
    hidden: bool = Field(False, description="Include elements not showing (closed menus)")

    @model_validator(mode="after")
    def _one_scope(self) -> "AccessibilityTreeParams":
        if self.desktop and self.window is not None:
            raise ValueError("give window or desktop: true, not both")
        return self


class AccessibilityFindParams(AccessibilityTreeParams):
    name: Annotated[str, Field(max_length=500)] | None = Field(None, description="Words of the name (any case)")
    role: Annotated[str, Field(max_length=40)] | None = Field(None, description='A role, e.g. "push button"')
    text: Annotated[str, Field(max_length=500)] | None = Field(None, description="Words of the name, value or description")
    desktop: bool = Field(True, description="Search every window (default; web pages' contents only when "
                                            "their window is named); false: the active or named window")
    maxElements: Annotated[int, Field(ge=1, le=200)] = Field(20, description="Matches at most")

    @model_validator(mode="after")
    def _one_scope(self) -> "AccessibilityFindParams":
        if self.window is not None:
            self.desktop = False  # a named window narrows the default whole-desktop search
        return self

    @model_validator(mode="after")
    def _something(self) -> "AccessibilityFindParams":
        if self.name is None and self.role is None and self.text is None:
            raise ValueError("give name, role or text to find")
        return self


class AccessibilityActParams(_Params):
    ref: AccessRef
    action: Literal["press", "focus", "setValue", "toggle", "select", "expand"]
    value: Annotated[str, Field(max_length=1_000_000)] | float | bool | None = Field(
        None, description="For setValue: text, a number, or true/false for a check box")

    @model_validator(mode="after")
    def _value_for_set(self) -> "AccessibilityActParams":
        if (self.action == "setValue") != (self.value is not None):
            raise ValueError("setValue takes a value; the other actions take none")
        return self


class AccessibilityWaitParams(_Params):
    name: Annotated[str, Field(max_length=500)] | None = None
    role: Annotated[str, Field(max_length=40)] | None = None
    state: Annotated[str, Field(max_length=40)] | None = Field(None, description='e.g. "focused", "checked"')
    window: Annotated[int, Field(ge=1)] | WindowTitle | None = Field(
        None, description="Watch this window (its web page too); default every window, pages' contents aside")
    timeout: WaitMs = 10_000

    @model_validator(mode="after")
    def _something(self) -> "AccessibilityWaitParams":
        if self.name is None and self.role is None:
            raise ValueError("give name or role to wait for")
        return self


class WindowParams(_Params):
    id: Annotated[int, Field(ge=1)] | None = Field(None, description="The X window id (getWindows)")
    title: WindowTitle | None = None

    @model_validator(mode="after")
    def _id_or_title(self) -> "WindowParams":
        if (self.id is None) == (self.title is None):
            raise ValueError("give id or title, exactly one of them")
        return self


class WindowMoveParams(WindowParams):
    x: Annotated[int, Field(ge=-10_000, le=10_000)]
    y: Annotated[int, Field(ge=-10_000, le=10_000)]


class WindowResizeParams(WindowParams):
    width: Annotated[int, Field(ge=1, le=10_000)]
    height: Annotated[int, Field(ge=1, le=10_000)]


class WindowWaitParams(_Params):
    title: WindowTitle | None = None
    class_: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(None, alias="class")
    state: Literal["open", "closed", "active", "maximized", "minimized"] = "open"
    timeout: WaitMs = 10_000

    @model_validator(mode="after")
    def _title_or_class(self) -> "WindowWaitParams":
        if (self.title is None) == (self.class_ is None):
            raise ValueError("give title or class, exactly one of them")
        return self


class AppLaunchParams(_Params):
    id: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._+-]+$")] = Field(
        description="The app's id from apps.list")
    args: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(max_length=32)] = Field(
        default_factory=list, description="Files or URLs to open")
    timeout: WaitMs = 20_000


class MarksParams(_Params):
    window: Annotated[int, Field(ge=1)] | WindowTitle | None = Field(
        None, description="The window to mark (X id or words of its title); default the active window")
    source: Literal["accessibility", "browser", "both"] = Field(
        "both", description="Elements from native accessibility trees, from the web page shown "
                            "in Chromium's window, or both")


class StableParams(_Params):
    ms: Annotated[int, Field(ge=50, le=MAX_WAIT_MS)] = Field(500, description="Quiet period, ms")
    timeout: WaitMs = 10_000
    region: RegionParams | None = Field(None, description="Watch only this part of the screen")


# -- results ------------------------------------------------------------------------------

ScreenX = Annotated[int, Field(description="Screen pixels from the left edge")]
ScreenY = Annotated[int, Field(description="Screen pixels from the top edge")]


class PointResult(OutputModel):
    """A point on the screen."""

    x: ScreenX
    y: ScreenY


class ClickResult(OutputModel):
    button: Button = Field(description="The button clicked")
    x: ScreenX = Field(description="Where the click landed: screen pixels from the left edge")
    y: ScreenY = Field(description="Where the click landed: screen pixels from the top edge")


class ButtonResult(OutputModel):
    button: Button = Field(description="The button pressed or released")


class DragResult(OutputModel):
    from_: PointResult = Field(alias="from", description="Where the button went down (screen pixels)")
    to: PointResult = Field(description="Where it was released (screen pixels)")


class ScrollResult(OutputModel):
    direction: Literal["up", "down", "left", "right"]
    amount: int = Field(description="Wheel clicks sent")
    x: ScreenX = Field(description="The pointer's place while scrolling: screen pixels from the left edge")
    y: ScreenY = Field(description="The pointer's place while scrolling: screen pixels from the top edge")


def _scrolled(direction: str) -> type[ScrollResult]:
    """One scroll operation's result, its direction said exactly."""
    return create_model(f"Scroll{direction.title()}Result", __base__=ScrollResult,
                        direction=(Literal[direction], ...))  # type: ignore[valid-type]


class TypedResult(OutputModel):
    typed: int = Field(description="Characters typed")


class KeysResult(OutputModel):
    keys: list[str] = Field(description="The keys pressed, released or both, nut.js names")


class ScreenSize(OutputModel):
    """A screen's size in pixels (it follows the viewer's window)."""

    width: int = Field(description="Screen width in pixels")
    height: int = Field(description="Screen height in pixels")


class ImageResult(OutputModel):
    """A screenshot, attached to the result as a PNG image block, and where its pixels are on the
    screen: a PNG pixel (px, py) shows the screen point origin + (px, py) / scale."""

    image_index: int = Field(description="Index of the PNG among the result's images (0 = the first image "
                                         "block after the text)")
    width: int = Field(description="Width of the PNG in pixels")
    height: int = Field(description="Height of the PNG in pixels")
    scale: float = Field(description="PNG pixels per screen pixel (1: not scaled); to aim at a PNG pixel, give "
                                     'its x, y with coordinateSpace "image", this scale and this origin')
    origin: PointResult = Field(description="The screen point of the PNG's top-left pixel (0,0 for the whole "
                                            "screen; a region's left, top; a window's x, y)")
    screen: ScreenSize = Field(description="The screen's size when it was taken")
    at: int = Field(description="When it was taken, milliseconds since the Unix epoch")


class MarkResult(OutputModel):
    """One numbered box of screen.marks."""

    mark: int = Field(description="The number drawn on the image; mouse.click {mark} aims at it")
    ref: str = Field(description="a_N (a native element) or ref_N (an element of the page)")
    role: str
    name: str
    box: dict[str, int] = Field(description="{x, y, width, height} in screen pixels")


class MarksResult(ImageResult):
    """The screen with a numbered box over each interactive element, and the list of them."""

    marks: list[MarkResult] = Field(description="The boxes drawn, by number")


class ColorResult(OutputModel):
    x: ScreenX
    y: ScreenY
    r: int = Field(description="Red, 0 to 255")
    g: int = Field(description="Green, 0 to 255")
    b: int = Field(description="Blue, 0 to 255")
    hex: str = Field(description='The colour as "#rrggbb"')


class WindowResult(OutputModel):
    """A top-level window of the desktop."""

    id: int = Field(description="The X window id")
    title: str
    pid: int | None = Field(description="The process owning the window, null when it does not say")
    x: ScreenX = Field(description="Left edge of the window's client area, screen pixels")
    y: ScreenY = Field(description="Top edge of the window's client area, screen pixels")
    width: int = Field(description="Width of the client area in pixels")
    height: int = Field(description="Height of the client area in pixels")


class ElementResult(OutputModel):
    """An element of a native window's accessibility tree."""

    ref: str = Field(description="Its ref, for mouse.click {ref} and accessibility.act")
    role: str
    name: str
    states: list[str] = Field(description="focused, checked, selected, expanded, editable, ...")
    box: dict[str, int] | None = Field(None, description="{x, y, width, height} in screen pixels")
    value: str | None = None
    app: str | None = None


class TreeResult(OutputModel):
    tree: str = Field(description='One element a line: - role "name" [ref] (x,y WxH) value="..." {states}')
    elements: int = Field(description="Lines in the tree")
    truncated: bool
    windows: list[str] = Field(description="The windows read, by title")


class FindResult(OutputModel):
    matches: int
    elements: list[ElementResult]


class ActResult(OutputModel):
    ref: str
    action: str
    value: str | float | bool | None = None


class WindowStateResult(OutputModel):
    """A window as the window manager reports it."""

    id: int
    title: str
    class_: str = Field(alias="class", description="Its WM_CLASS class, e.g. Mousepad")
    pid: int | None
    x: ScreenX
    y: ScreenY
    width: int
    height: int
    states: list[str] = Field(description="maximized, minimized, fullscreen, above, modal, ...")


class AppResult(OutputModel):
    id: str = Field(description="For apps.launch")
    name: str
    comment: str


class StableResult(OutputModel):
    waitedMs: int
    quietMs: int


# -- the operations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OperationSpec:
    """One operation: its params model (None: it takes none), the type of its result, and a
    one-line description."""

    params: type[_Params] | None
    result: Any
    doc: str


#: Operation name -> its spec, in the spec's order.
OPERATIONS: dict[str, OperationSpec] = {
    "mouse.setPosition": OperationSpec(Point, PointResult, "Put the pointer at {x, y} at once"),
    "mouse.move": OperationSpec(Point, PointResult, "Move the pointer to {x, y}, animated at config.mouseSpeed px/s"),
    "mouse.getPosition": OperationSpec(None, PointResult, "The pointer's position {x, y}"),
    "mouse.click": OperationSpec(ClickParams, ClickResult, "Click {button?, x?, y?}"),
    "mouse.doubleClick": OperationSpec(ClickParams, ClickResult, "Double-click {button?, x?, y?}"),
    "mouse.pressButton": OperationSpec(ButtonParams, ButtonResult, "Press and hold {button?}"),
    "mouse.releaseButton": OperationSpec(ButtonParams, ButtonResult, "Release {button?}"),
    "mouse.drag": OperationSpec(
        DragParams, DragResult, "{to, from?}: press LEFT at from (default: where the pointer is), glide to to, release"),
    "mouse.scrollUp": OperationSpec(ScrollParams, _scrolled("up"), "Scroll {amount, x?, y?} wheel clicks up"),
    "mouse.scrollDown": OperationSpec(ScrollParams, _scrolled("down"), "Scroll {amount, x?, y?} wheel clicks down"),
    "mouse.scrollLeft": OperationSpec(ScrollParams, _scrolled("left"), "Scroll {amount, x?, y?} wheel clicks left"),
    "mouse.scrollRight": OperationSpec(ScrollParams, _scrolled("right"), "Scroll {amount, x?, y?} wheel clicks right"),
    "keyboard.type": OperationSpec(TypeParams, Union[TypedResult, KeysResult],
                                   "Type {text} (US layout) or press {keys} together"),
    "keyboard.pressKey": OperationSpec(KeysParams, KeysResult, "Press and hold {keys}"),
    "keyboard.releaseKey": OperationSpec(KeysParams, KeysResult, "Release {keys}"),
    "screen.width": OperationSpec(None, Annotated[int, Field(description="Screen width in pixels")],
                                  "The screen's width in pixels"),
    "screen.height": OperationSpec(None, Annotated[int, Field(description="Screen height in pixels")],
                                   "The screen's height in pixels"),
    "screen.grab": OperationSpec(None, ImageResult, "A PNG of the whole screen"),
    "screen.grabRegion": OperationSpec(RegionParams, ImageResult, "A PNG of {left, top, width, height}"),
    "screen.colorAt": OperationSpec(Point, ColorResult, "The pixel at {x, y}: {x, y, r, g, b, hex}"),
    "getActiveWindow": OperationSpec(
        None, Annotated[WindowResult | None, Field(description="The focused window, null when none is")],
        "The focused window {id, title, pid, x, y, width, height}, or null"),
    "getWindows": OperationSpec(None, list[WindowResult],
                                "The desktop's windows, each {id, title, pid, x, y, width, height}"),
    "clipboard.setContent": OperationSpec(ClipboardParams, None, "Put {text} on the clipboard"),
    "clipboard.getContent": OperationSpec(
        None, Annotated[str, Field(description='The clipboard\'s text ("" when it holds no text)')],
        "The clipboard's text"),
    "sleep": OperationSpec(SleepParams, None, f"Wait {{ms}}, at most {MAX_SLEEP_MS}"),
    "accessibility.tree": OperationSpec(
        AccessibilityTreeParams, TreeResult,
        "The accessibility tree of the active window {window?, desktop?, depth?, roles?, maxElements?, hidden?}: "
        "native apps' elements with refs, roles, names, values, states and boxes"),
    "accessibility.find": OperationSpec(
        AccessibilityFindParams, FindResult, "Elements by {name?, role?, text?, window?} on the whole desktop (a page's: name its window)"),
    "accessibility.act": OperationSpec(
        AccessibilityActParams, ActResult,
        "{ref, action: press|focus|setValue|toggle|select|expand, value?} without moving the pointer"),
    "accessibility.waitFor": OperationSpec(
        AccessibilityWaitParams, ElementResult, "Wait until an element {name?, role?, state?, window?} shows, up to {timeout} ms"),
    "window.focus": OperationSpec(WindowParams, WindowStateResult, "Raise and focus {id | title}"),
    "window.move": OperationSpec(WindowMoveParams, WindowStateResult, "Move {id | title} to {x, y}"),
    "window.resize": OperationSpec(WindowResizeParams, WindowStateResult, "Resize {id | title} to {width, height}"),
    "window.minimize": OperationSpec(WindowParams, WindowStateResult, "Minimize {id | title}"),
    "window.maximize": OperationSpec(WindowParams, WindowStateResult, "Maximize {id | title}"),
    "window.close": OperationSpec(WindowParams, None, "Close {id | title} as its close button would"),
    "window.capture": OperationSpec(WindowParams, ImageResult, "A PNG of {id | title}'s own pixels, even where covered"),
    "window.waitFor": OperationSpec(
        WindowWaitParams, Annotated[WindowStateResult | None, Field(description="The window, null once closed")],
        "Wait until a window {title | class} is in {state?: open|closed|active|maximized|minimized}"),
    "apps.list": OperationSpec(None, list[AppResult], "The installed applications (.desktop entries)"),
    "apps.launch": OperationSpec(AppLaunchParams, WindowStateResult, "Start {id, args?} and return its new window once mapped"),
    "screen.waitStable": OperationSpec(
        StableParams, StableResult, "Wait until the screen (or {region}) has not changed for {ms}, up to {timeout}"),
    "screen.marks": OperationSpec(
        MarksParams, MarksResult,
        "A PNG of the screen with numbered boxes over {window?}'s interactive elements (from {source?}), "
        "and the list of them; mouse.click {mark} clicks one"),
}


class ImageOrigin(_Params):
    """The screen point of a screenshot's top-left pixel (a window's may be off the screen)."""

    x: Annotated[int, Field(ge=-100_000, le=100_000)]
    y: Annotated[int, Field(ge=-100_000, le=100_000)]


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    captureAfter: bool = Field(False, description="Attach a screenshot taken after the step, once the screen is still")
    scale: Annotated[float, Field(ge=MIN_SCALE, le=MAX_SCALE)] | None = Field(
        None, description='Image pixels per screen pixel: the size of the images this step takes (0.5: half '
                          'size, 2: zoomed), and with coordinateSpace "image" the scale of the image its x, y '
                          "are pixels of")
    maxWidth: Annotated[int, Field(ge=16, le=10_000)] | None = Field(
        None, description="Shrink the images this step takes to at most this width")
    maxHeight: Annotated[int, Field(ge=16, le=10_000)] | None = Field(
        None, description="Shrink the images this step takes to at most this height")
    coordinateSpace: Literal["screen", "image"] = Field(
        "screen", description='"image": the step\'s x, y are pixels of a screenshot (screen.grab, grabRegion, '
                              "window.capture, screen.marks, a capture) with this step's scale and origin")
    origin: ImageOrigin | None = Field(
        None, description='With coordinateSpace "image": the origin of the screenshot, as its result gave it '
                          "(default 0,0: the whole screen)")

    @model_validator(mode="after")
    def _image_fields_fit(self) -> "_Step":
        name = getattr(self, "type", "")
        sized = self.scale is not None or self.maxWidth is not None or self.maxHeight is not None
        if self.coordinateSpace == "image":
            if not any(x is not None for _, x, _ in _points(self)):
                raise ValueError('coordinateSpace "image" maps the step\'s x and y, and this step gives none')
            if self.scale is None:
                raise ValueError('coordinateSpace "image" needs scale: the scale of the image the '
                                 "coordinates come from, as its result gave it")
            if self.maxWidth is not None or self.maxHeight is not None:
                raise ValueError('with coordinateSpace "image", scale alone says the image\'s size; '
                                 "maxWidth and maxHeight are for steps that take images")
        elif self.origin is not None:
            raise ValueError('origin places a screenshot\'s pixels on the screen: give it with '
                             'coordinateSpace "image" and the screenshot\'s scale')
        elif sized and name not in IMAGE_STEPS and not self.captureAfter:
            raise ValueError("scale, maxWidth and maxHeight size the images a step takes, and this step "
                             "takes none (add captureAfter: true, or move them to the grab)")
        return self

    @property
    def space(self) -> ImageSpace:
        """The image space of this step's x, y with coordinateSpace "image": a screenshot at this
        step's scale whose top-left pixel shows the screen point `origin` (0,0 when not given)."""
        origin = self.origin or ImageOrigin(x=0, y=0)
        return ImageSpace(self.scale or 1.0, origin.x, origin.y)


def _class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("."))


def _step(name: str, spec: OperationSpec) -> type[_Step]:
    """One operation's model: `{type: name, params}`; params may be omitted when all optional."""
    params = spec.params
    fields: dict[str, Any] = {"type": (Literal[name], ...)}
    if params is None:
        fields["params"] = (NoParams, Field(default_factory=NoParams))
    elif all(not f.is_required() for f in params.model_fields.values()):
        fields["params"] = (params, Field(default_factory=params))
    else:
        fields["params"] = (params, ...)
    return create_model(_class_name(name), __base__=_Step, __doc__=spec.doc, **fields)


def _done(name: str, spec: OperationSpec) -> type[OutputModel]:
    """One operation's entry in the results: `{success: true, operation: name, result}`."""
    result = spec.result if spec.result is not None else Annotated[None, Field(description="Always null")]
    return create_model(
        _class_name(name) + "Done", __base__=OutputModel, __doc__=spec.doc,
        success=(Literal[True], ...),
        operation=(Literal[name], ...),
        result=(result, ...),
        changed=(bool | None, Field(None, description="Pointer and key steps: whether the screen changed "
                                                     "(with captureAfter: until it settled for the capture)")),
        capture=(ImageResult | None, Field(None, description="With captureAfter: the screen after the step")),
    )


STEP_MODELS: dict[str, type[_Step]] = {name: _step(name, spec) for name, spec in OPERATIONS.items()}
DONE_MODELS: dict[str, type[OutputModel]] = {name: _done(name, spec) for name, spec in OPERATIONS.items()}

Operation = Annotated[Union[tuple(STEP_MODELS.values())], Field(discriminator="type")]  # type: ignore[misc]
StepDone = Annotated[Union[tuple(DONE_MODELS.values())], Field(discriminator="operation")]  # type: ignore[misc]


class DesktopConfig(BaseModel):
    """Pacing of the call's input, as a person at the screen would go."""

    model_config = ConfigDict(extra="forbid")

    keyboardDelayMs: Annotated[int, Field(ge=0, le=1000)] = Field(
        10, description="Pause after each key typed, ms")
    mouseDelayMs: Annotated[int, Field(ge=0, le=5000)] = Field(
        50, description="Pause after each mouse action, ms")
    mouseSpeed: Annotated[float, Field(gt=0, le=1_000_000)] = Field(
        2000, description="Pointer speed of mouse.move, drag and aimed clicks, in px/s")
    humanWaitMs: Annotated[int, Field(ge=0, le=600_000)] | None = Field(
        None, description="How long input steps wait for a person at the viewer to hand back, ms (default 10 s)")


class DesktopRequest(BaseModel):
    """A whole `desktop_execute` call."""

    model_config = ConfigDict(extra="forbid")

    operations: list[Operation] = Field(min_length=1, description="Steps, each {type, params}, run in order")
    config: DesktopConfig = Field(default_factory=DesktopConfig,
                                  description="Pacing: keyboardDelayMs, mouseDelayMs, mouseSpeed; humanWaitMs")


class DesktopOutput(OutputModel):
    """What a `desktop_execute` call did."""

    results: list[StepDone] = Field(description="One entry per step, in order; `result` is typed by `operation`")
    screen: ScreenSize = Field(description="The screen's size when the call ended")
    lease: LeaseReport | None = Field(None, description="With mouse or keyboard steps: the input lease")


INPUT_PREFIXES = ("mouse.", "keyboard.")
"""Operations that send input to the screen: they need the input lease (`capabilities/input_lease.py`)."""


def sends_input(operation: str) -> bool:
    return operation.startswith(INPUT_PREFIXES) and operation != "mouse.getPosition"


# -- validation messages -------------------------------------------------------------------------


def _describe(error: dict, step: str | None, loc: list[str]) -> tuple[str, str]:
    """One pydantic error as (a sentence naming the field and what to do, the field)."""
    if step is not None and loc and loc[0] == step:
        loc = loc[1:]  # the discriminator's tag
    field = ".".join(part if part != "from_" else "from" for part in loc)
    kind = error["type"]
    if kind == "union_tag_invalid":
        return (f"unknown operation {error['input'].get('type')!r}; operations are: "
                f"{', '.join(OPERATIONS)}"), "type"
    if kind == "union_tag_not_found":
        return "missing field 'type' (the operation's name, e.g. \"mouse.click\")", "type"
    if kind in ("model_attributes_type", "model_type", "dict_type") and not loc:
        return f"a step must be an object {{type, params}}, got {type(error['input']).__name__}", ""
    if kind == "extra_forbidden":
        allowed = _allowed_fields(step, loc)
        return f"unknown field {field!r}" + (f"; allowed: {allowed}" if allowed else ""), field
    if kind == "missing":
        return f"missing field {field!r}", field
    message = error["msg"].removeprefix("Value error, ")
    return (f"{field}: {message}" if field else message), field


def _allowed_fields(step: str | None, loc: list[str]) -> str:
    if step is None or not loc:
        return ""
    if len(loc) == 1:
        return "type, params, captureAfter, scale, maxWidth, maxHeight, coordinateSpace, origin"
    params = OPERATIONS[step].params if step in OPERATIONS else None
    if loc[0] == "params" and len(loc) == 2:
        if params is None:
            return "none (this operation takes no params)"
        return ", ".join(f.alias or name for name, f in params.model_fields.items())
    return ""


def describe_invalid(exc: ValidationError, raw: dict[str, Any]) -> InvalidRequest:
    """A failed validation of a whole call, naming every bad step (index and number) and field;
    `step` and `field` (inside the step) are the first problem's."""
    operations = raw.get("operations") if isinstance(raw, dict) else None
    problems: list[str] = []
    first: tuple[int | None, str | None] | None = None
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if len(loc) >= 2 and loc[0] == "operations" and isinstance(error["loc"][1], int):
            index = error["loc"][1]
            raw_step = operations[index] if isinstance(operations, list) and index < len(operations) else None
            name = raw_step.get("type") if isinstance(raw_step, dict) else None
            where = f"operations[{index}] (step {index + 1}" + (f", {name})" if isinstance(name, str) else ")")
            tag = name if isinstance(name, str) and name in OPERATIONS else None
            sentence, field = _describe(error, tag, loc[2:])
            problems.append(f"{where}: {sentence}")
            first = first or (index + 1, field or None)
        elif loc and loc[0] == "operations":
            if error["type"] == "missing":
                problems.append("missing field 'operations': give a non-empty array of steps, each {type, params}")
            else:
                problems.append("operations must be a non-empty array of steps, each {type, params}")
            first = first or (None, "operations")
        elif loc and loc[0] == "config":
            sentence, field = _describe(error, None, loc[1:])
            problems.append(f"config: {sentence}")
            first = first or (None, "config" + (f".{field}" if field else ""))
        else:
            sentence, field = _describe(error, None, loc)
            if error["type"] == "extra_forbidden":
                sentence = f"unknown field {field!r}; desktop_execute takes operations and config"
            problems.append(sentence)
            first = first or (None, field or None)
    problems = list(dict.fromkeys(problems))  # a union may report one mistake twice
    step, field = first or (None, None)
    return InvalidRequest("nothing was run; fix these and call again:\n" + "\n".join(problems),
                          step=step, field=field,
                          hint="the tool's description and input schema list every operation and its params")


def _points(step: Any) -> list[tuple[str, int | None, int | None]]:
    """The (field, x, y) screen points a step aims at."""
    params = step.params
    if isinstance(params, (Point, ClickParams, ScrollParams)):
        return [("params", params.x, params.y)]
    if isinstance(params, DragParams):
        points = [("params.to", params.to.x, params.to.y)]
        if params.from_ is not None:
            points.append(("params.from", params.from_.x, params.from_.y))
        return points
    return []


def _to_screen(step: Any) -> Any:
    """The step with its image-space x, y mapped to screen pixels (`scale_point`)."""
    space = step.space

    def mapped(model: Any) -> Any:
        if model is None or getattr(model, "x", None) is None:
            return model
        x, y = scale_point(model.x, model.y, space, to="screen")
        # Past the top or left edge stays negative here, so check_on_screen says so by name.
        return model.model_construct(**{**dict(model), "x": x, "y": y})

    params = step.params
    if isinstance(params, DragParams):
        params = params.model_copy(update={"to": mapped(params.to), "from_": mapped(params.from_)})
    else:
        params = mapped(params)
    return step.model_copy(update={"params": params})


def check_on_screen(steps: list[Any], width: int, height: int) -> list[Any]:
    """The steps with image coordinates mapped to screen pixels; raise `InvalidRequest` for any
    coordinate outside a `width` x `height` screen (after mapping)."""
    problems: list[str] = []
    first: tuple[int, str] | None = None
    resolved = []
    for index, given in enumerate(steps):
        step = _to_screen(given) if given.coordinateSpace == "image" else given
        resolved.append(step)
        where = f"operations[{index}] (step {index + 1}, {step.type})"
        mapped = ""
        if step is not given:
            origin = f", origin {given.origin.x},{given.origin.y}" if given.origin else ""
            mapped = f" (mapped from image pixels at scale {given.scale:g}{origin})"
        for field, x, y in _points(step):
            if x is not None and not 0 <= x < width:
                problems.append(f"{where}: {field}.x={x}{mapped} is off the screen (0 to {width - 1})")
                first = first or (index + 1, f"{field}.x")
            if y is not None and not 0 <= y < height:
                problems.append(f"{where}: {field}.y={y}{mapped} is off the screen (0 to {height - 1})")
                first = first or (index + 1, f"{field}.y")
        params = step.params
        if step.type in IMAGE_STEPS or step.captureAfter:
            grabbed = (params.width, params.height) if isinstance(params, RegionParams) else (width, height)
            try:
                image_scale(*grabbed, step.scale, step.maxWidth, step.maxHeight)
            except ScaleError as exc:
                problems.append(f"{where}: {exc}")
                first = first or (index + 1, "scale")
        if isinstance(params, RegionParams):
            if params.left + params.width > width or params.top + params.height > height:
                problems.append(
                    f"{where}: region {params.left},{params.top} {params.width}x{params.height} "
                    f"goes past the screen's edge ({width}x{height})")
                first = first or (index + 1, "params")
    if problems:
        step, field = first if first else (None, None)
        raise InvalidRequest(
            f"nothing was run; the screen is {width}x{height} now (it follows the viewer's "
            f"window, so read screen.width/height before aiming):\n" + "\n".join(problems),
            step=step, field=field, hint="read screen.width and screen.height, then aim inside them; "
                                         "image coordinates need the scale of their image")
    return resolved
