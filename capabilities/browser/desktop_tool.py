"""`desktop_execute`: batched mouse, keyboard, screen, window and clipboard steps on the
session's display, done as a person at the screen would (real pointer, real keys via XTEST).

The call is validated whole before anything runs (`desktop_ops.DesktopRequest`, through the
contract's registry), runs one call at a time, stops at the first failing step with a
screenshot of that moment, and lets go of any key or button still held when a step fails.
A call its client cancels stops at once, waits and pointer moves included (`current_cancellation`
is checked between steps and is what every wait here waits on), and lets go of them the same way.

The result (built in `_result`, the one place): structured content `{results: [{success,
operation, result}], screen: {width, height}}` (plus `error` on failure), the same object as
the text (JSON, as the spec prescribes), then the PNG images the results point at.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
from collections.abc import Awaitable, Callable
from mcp_types import CallToolResult
from PIL import Image as PILImage
from playwright.async_api import Error as PlaywrightError

from capabilities.contract import Image, ToolError, ToolSpec, current_cancellation, failure, success

from .. import input_lease
from ..session import SessionInfo, SessionNotFound, read_session
from ..png import encode_png
from . import desktop_accessibility, desktop_marks, page_screen
from .desktop_accessibility import Box
from .desktop_coordinates import ImageSpace, ScaleError, image_scale
from .desktop_display import DesktopError, DisplayConnection, Grab
from .desktop_keys import BUTTONS, KEYS, SCROLL_BUTTONS, text_keysym
from .desktop_ops import (
    OPERATIONS,
    ButtonResult,
    ClickParams,
    ClickResult,
    ColorResult,
    DragResult,
    ImageResult,
    KeysResult,
    MAX_MARKS,
    MarkResult,
    MarksResult,
    PointResult,
    ScreenSize,
    ScrollResult,
    TypedResult,
    WindowResult,
    DesktopConfig,
    DesktopOutput,
    DesktopRequest,
    check_on_screen,
    describe_invalid,
    sends_input,
)
from .errors import BrowserError, Unavailable
from . import desktop_native

if TYPE_CHECKING:
    from .state import BrowserState
    from .tabs import TabRegistry

# Pointer animation: one motion event per frame at about 120 frames a second.
FRAME_S = 1 / 120
DRAG_MIN_FRAMES = 5  # apps only see a drag when the pointer moves while pressed
DOUBLE_CLICK_GAP_S = 0.03


def _description() -> str:
    operations = "\n".join(f"- {name}: {spec.doc}" for name, spec in OPERATIONS.items())
    return f"""The desktop's mouse, keyboard, screen, windows and clipboard, as a person uses them.

Use it for native windows and their dialogs, and the browser's own interface; use browser_execute \
for anything inside a web page.

operations: steps, each {{type, params}}, run in order. config (optional): keyboardDelayMs \
(default 10), mouseDelayMs (default 50), mouseSpeed (default 2000 px/s), humanWaitMs.

A person may use the same screen from the viewer: while they do, a call with mouse or keyboard \
steps waits (humanWaitMs, default 10 s) for them to hand back, then fails with human_has_control \
and runs none of its steps; its result says who held the screen (lease).

{operations}

Buttons: LEFT (default), MIDDLE, RIGHT. Keys (nut.js names): {", ".join(KEYS)}.

Coordinates are screen pixels from the top left; the screen changes size when a viewer resizes \
their window, so read screen.width/height before aiming. Screenshots (screen.grab, grabRegion, \
window.capture, screen.marks, captureAfter) are sized by the step's scale (image pixels per screen \
pixel: 0.5 half size, 2 zoomed, at most 4) and maxWidth/maxHeight; each says its width, height, scale, \
origin (the screen point of its top-left pixel), the screen's size and when it was taken (at, ms since \
the epoch). A pointer step with coordinateSpace: "image" and a screenshot's scale and origin takes x, y \
in that screenshot's pixels and is aimed at the screen point they show. screen.marks draws a numbered box over each interactive element of a window (native elements \
from its accessibility tree, a web page's from the page Chromium shows) and lists them {{mark, ref, \
role, name, box}}; mouse.click {{mark}} clicks one where it is now, in that or a later call, until the \
next screen.marks. browser_execute's scrollTo gives a page element's box on the screen. keyboard.type {{text}} presses the keys of \
a US layout (into element {{ref}}, focused first, when given); for other characters put the text on the clipboard (clipboard.setContent) and paste \
it (keyboard.type {{keys: ["LeftControl", "V"]}}). keyboard.type {{keys}} presses the keys together \
and releases them (a chord); pressKey holds keys until releaseKey or until a step fails.

Result: the text is JSON {{results: [{{success, operation, result}}], screen: {{width, height}}}}, \
the same object as the structured content (each result typed by its operation in the output \
schema); screenshots are PNG images after the text, a screenshot's result being {{image_index, \
width, height, scale, origin, screen, at}}. The whole call is checked before anything runs. It stops at the first failing \
step and attaches a screenshot: the call is then an error {{error: {{kind, message, step, field?, \
hint?}}, results, screen}}, the failed step's entry having success false, error and screenshot; keys \
and buttons still held are released. One call runs at a time; a cancelled call (its run timed out) \
stops at once, waits included, and releases them too.

Native windows (GTK apps such as Mousepad and Thunar and their dialogs, XFCE's panel, Chromium's own interface: tabs, toolbar, address bar, and the page as a tree) are read through their accessibility trees: accessibility.tree gives one element a line (role "name" [a_N] (x,y WxH) value="..." {{states}}); a ref a_N is taken by mouse.click and mouse.doubleClick {{ref}} (the element's centre, read at that moment) and by accessibility.act, which presses, focuses, sets values, toggles, selects or expands without moving the pointer. A ref whose element is gone fails with "read the screen again". Chromium's web pages are best read with browser_execute; its file chooser shows no tree: attach files with browser_execute's upload, or in the chooser press LeftControl+L, type the path, then press LeftAlt+O. Waits watch the screen, not the clock: screen.waitStable, window.waitFor, accessibility.waitFor. Any step may carry captureAfter: true (its entry gets capture, a screenshot once the screen is still); mouse and keyboard steps' entries say changed: whether the screen changed.

Screenshots go to the code, not to the model: attach one with artifact(...) only when the model \
needs to see it. For a large one, pass heap_memory_max_mb: 64 to run_js."""


@dataclass
class _Run:
    """One call in progress: its config, results and images (PNGs) so far, and the step running."""

    config: DesktopConfig
    results: list[dict] = field(default_factory=list)
    images: list[bytes] = field(default_factory=list)
    step: Any = None

    def image(self, grab: Grab, decorate: Callable[[PILImage.Image, ImageSpace], None] | None = None,
              ) -> ImageResult:
        """Attach a grab as a PNG, sized as the running step asks (scale, maxWidth, maxHeight);
        `decorate(image, space)` may draw on it first."""
        step = self.step
        try:
            scale = 1.0 if step is None else image_scale(grab.width, grab.height, step.scale,
                                                         step.maxWidth, step.maxHeight)
        except ScaleError as exc:
            raise DesktopError(str(exc)) from exc
        if decorate is None:
            png, width, height = grab.encode(scale)
        else:
            picture = grab.image(scale)
            decorate(picture, ImageSpace(scale, grab.left, grab.top))
            png, (width, height) = encode_png(picture), picture.size
        self.images.append(png)
        return ImageResult(image_index=len(self.images) - 1, width=width, height=height,
                           scale=round(scale, 6), origin=PointResult(x=grab.left, y=grab.top),
                           screen=ScreenSize(width=grab.screen[0], height=grab.screen[1]),
                           at=round(grab.at * 1000))


class DesktopController:
    """The shared state of `desktop_execute`: the display connection (opened on first use,
    reopened when the session changes or the connection breaks) and the lock that makes
    calls take turns. Owned by the server's state; `close` at shutdown."""

    def __init__(self, pages: TabRegistry | None = None) -> None:
        self._connection: DisplayConnection | None = None
        self._native = desktop_native.NativeDesktop()
        self._pages = pages  # Chromium's pages, for screen.marks and clicks on their marks
        self._thread_lock = threading.Lock()  # for callers outside the event loop (benchmarks)
        self._lock: anyio.Lock | None = None

    async def execute(self, request: DesktopRequest) -> CallToolResult:
        """Run one validated `desktop_execute` call; concurrent calls queue."""
        async with self._turn():
            return await anyio.to_thread.run_sync(self.execute_sync, request)

    def execute_sync(self, request: DesktopRequest) -> CallToolResult:
        """The same, from a plain thread."""
        with self._thread_lock:
            return self._execute(request)

    async def refused(self, error: ToolError) -> CallToolResult:
        """The result of a call refused before it ran (with the screen's size when reachable)."""
        async with self._turn():
            size = await anyio.to_thread.run_sync(self._screen_size_if_reachable)
        return _result([], [], size, error)

    def _turn(self) -> anyio.Lock:
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._native.close()

    def connection(self) -> DisplayConnection:
        """The display connection for the current session (read fresh from session.json)."""
        try:
            session = read_session()
        except SessionNotFound as exc:
            raise Unavailable(str(exc), hint="start the desktop session, then call again") from exc
        if self._connection is not None and _x_address(self._connection.session) != _x_address(session):
            self.close()  # another display, or the session was restarted with a new cookie
        if self._connection is None:
            self._connection = DisplayConnection(session)
        self._connection.session = session  # its other facts (the clipboard's env) may change
        self._native.use(session)
        return self._connection

    def _connect(self) -> tuple[DisplayConnection, tuple[int, int]]:
        """A working connection and the screen's size now; a connection that broke (the X
        server restarted) is replaced once."""
        for attempt in (1, 2):
            try:
                display = self.connection()
                return display, display.screen_size()
            except DesktopError:
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _screen_size_if_reachable(self) -> tuple[int, int] | None:
        with self._thread_lock:
            try:
                return self._connect()[1]
            except BrowserError:
                return None

    def _aim(self, step: Any, display: DisplayConnection, run: _Run) -> Any:
        """A click given an element ref or a mark, turned into one at the element's centre
        (read now, so an element that moved is still hit); keys given a ref go to that
        element, focused first."""
        params = step.params
        ref, mark = getattr(params, "ref", None), getattr(params, "mark", None)
        if step.type == "keyboard.type" and ref is not None:
            self._focus(ref, display, run)
            return step
        if (ref is None and mark is None) or not step.type.startswith("mouse."):
            return step
        if mark is not None:
            x, y = desktop_marks.centre(self._native.marks, mark, self._native.element_center, self._page_box)
            what = f"mark {mark}"
        else:
            x, y = self._native.element_center(ref)
            what = ref
        _on_screen(display, what, x, y)
        return step.model_copy(update={"params": params.model_copy(update={"x": x, "y": y})})

    def _focus(self, ref: str, display: DisplayConnection, run: _Run) -> None:
        """Give an element the keyboard focus: through accessibility where its toolkit does
        (and its window is active after), else by clicking its centre, as a person would."""
        try:
            self._native.bus.act(ref, "focus")
            if "focused" in self._native.bus.element(ref).states:
                return
        except desktop_accessibility.StaleRef:
            raise
        except DesktopError:
            pass  # refused the focus: click it
        x, y = self._native.element_center(ref)
        _on_screen(display, f"{ref} takes no focus through accessibility and", x, y)
        _click(display, ClickParams(x=x, y=y), run, 1)

    def _on_loop(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run `fn(*args)` on the server's event loop (where Playwright's connection lives)
        from this step's worker thread."""
        if self._pages is None:
            raise DesktopError("this desktop controller has no browser connection to read pages with")
        try:
            return anyio.from_thread.run(fn, *args)
        except RuntimeError as exc:
            if "worker thread" not in str(exc) and "event loop" not in str(exc):
                raise
            raise DesktopError("web pages can be read only from the server's own calls") from exc

    def _page_box(self, page: Any, ref: str) -> Any:
        return self._on_loop(page_screen.ref_box, page, ref)

    def _browser_candidates(self, window: Any) -> tuple[list[desktop_marks.Candidate], Any]:
        """The interactive elements of the page Chromium shows in `window`, and its viewport."""
        async def read() -> tuple[list[desktop_marks.Candidate], Any]:
            page = await page_screen.shown_page(await self._pages.open_pages(),
                                                (window.x, window.y, window.width, window.height))
            if page is None:
                raise page_screen.PageGone(f"Chromium's window {window.id} shows no page that answers")
            boxes, viewport = await page_screen.page_boxes(page, MAX_MARKS)
            return [desktop_marks.Candidate(b.ref, b.role, b.name, b.box, page) for b in boxes], viewport

        try:
            return self._on_loop(read)
        except (BrowserError, PlaywrightError, page_screen.PageGone) as exc:
            if isinstance(exc, DesktopError):
                raise
            message = exc.message if isinstance(exc, (BrowserError, PlaywrightError)) else str(exc)
            raise DesktopError(f"the page in Chromium's window could not be read: {message}") from exc

    def _marks(self, display: DisplayConnection, step: Any, run: _Run) -> MarksResult:
        p, native = step.params, self._native
        window = native.wm.find(id=p.window if isinstance(p.window, int) else None,
                                title=p.window if isinstance(p.window, str) else None) \
            if p.window is not None else native.wm.active()
        if window is None:
            raise DesktopError("no window is active; name one: screen.marks {window: id or title words}")
        if "minimized" in window.states:
            raise DesktopError(f"window {window.id} ({window.title!r}) is minimized; window.focus it first")
        width, height = display.screen_size()
        bounds = desktop_marks.clip(Box(window.x, window.y, window.width, window.height), Box(0, 0, width, height))
        if bounds is None:
            raise DesktopError(f"window {window.id} ({window.title!r}) is off the screen; window.move it first")
        chromium = "chromium" in window.wm_class.lower()
        candidates: list[desktop_marks.Candidate] = []
        viewport = None
        if p.source in ("browser", "both") and chromium:
            try:
                candidates, viewport = self._browser_candidates(window)
            except DesktopError:
                if p.source == "browser":
                    raise
        elif p.source == "browser":
            raise DesktopError(f"window {window.id} ({window.title!r}, {window.wm_class}) is not Chromium's; "
                               f'mark it with source "accessibility"')
        if p.source in ("accessibility", "both"):
            def page_shown(element: desktop_accessibility.Element) -> bool:
                return (element.role == "document web" and element.box is not None
                        and _inside(element.box.center, viewport))

            # The page's own elements come from the page: its accessible document is not walked.
            prune = page_shown if viewport is not None else None
            try:
                roots, _ = native.read(desktop_accessibility.Scope(window=window.id), None, 5000, False, prune)
                natives = desktop_marks.native_candidates(roots, bounds)
            except DesktopError:
                if p.source == "accessibility" or not candidates:
                    raise
                natives = []
            if viewport is not None:
                natives = [c for c in natives if not _inside(c.box.center, viewport)]
            candidates += natives
        marks, truncated = desktop_marks.number(candidates, MAX_MARKS)
        native.marks = {m.number: m for m in marks}
        shot = run.image(display.grab(0, 0, width, height),
                         lambda picture, space: desktop_marks.draw(picture, marks, space))
        return MarksResult(**shot.model_dump(), marks=[MarkResult(**m.to_json()) for m in marks])

    def _execute(self, request: DesktopRequest) -> CallToolResult:
        size: tuple[int, int] | None = None
        try:
            display, size = self._connect()
            steps = check_on_screen(request.operations, *size)
            if any(step.type.startswith("keyboard.") for step in request.operations):
                try:
                    display.read_keymap()  # someone may have switched the layout since
                except DesktopError:
                    self.close()
                    raise
        except BrowserError as exc:
            return _result([], [], size, exc.to_tool_error())
        lease = None
        if any(sends_input(step.type) for step in request.operations):
            lease, refusal = _wait_for_the_screen(display.session.data_dir, request.config)
            if refusal is not None:
                return _result([], [], size, refusal, lease)
        run = _Run(config=request.config)
        failed = self._run_steps(display, steps, run)
        try:
            size = display.screen_size()
        except DesktopError:
            self.close()
        return _result(run.results, run.images, size, failed, lease)

    def _run_steps(self, display: DisplayConnection, steps: list[Any], run: _Run) -> ToolError | None:
        """Run the steps in order until one fails; returns what failed, or None. Whatever
        failed (a step, or anything raised), every key and button still held is released."""
        failed: ToolError | None = None
        cancellation = current_cancellation()
        try:
            native = self._native
            for index, step in enumerate(steps):
                cancellation.check()
                run.step = step
                try:
                    step = self._aim(step, display, run)
                    desktop_native.before_step(native, step)
                    if step.type == "screen.marks":
                        result = self._marks(display, step, run)
                    elif desktop_native.handles(step.type):
                        result = desktop_native.perform(native, step, run.image)
                    else:
                        result = _perform(display, step, run)
                    display.settle()
                    entry = {"success": True, "operation": step.type, "result": _jsonable(result)}
                    desktop_native.after_step(native, step, entry,
                                              lambda: display.grab(0, 0, *display.screen_size()),
                                              lambda grab: _jsonable(run.image(grab)))
                except DesktopError as exc:
                    failed = exc.at_step(index + 1).to_tool_error()
                    failed.message = (f"operations[{index}] (step {index + 1}, {step.type}) failed: {exc.message}; "
                                      "the keys and buttons still held were released")
                    entry = {"success": False, "operation": step.type, "result": None, "error": exc.message}
                    run.results.append(entry)
                    try:
                        entry["screenshot"] = _jsonable(run.image(display.grab(0, 0, *display.screen_size())))
                    except DesktopError:
                        pass  # the display itself is gone; the error says so
                    return failed
                run.results.append(entry)
            return None
        except BaseException:  # a bug, or the call cancelled (CallCancelled): let go all the same
            failed = failed or ToolError("internal", "interrupted")
            raise
        finally:
            if failed is not None:
                try:
                    display.release_held()
                except DesktopError:
                    self.close()


def _on_screen(display: DisplayConnection, what: str, x: int, y: int) -> None:
    """Refuse to aim at an element whose centre is off the screen."""
    width, height = display.screen_size()
    if not (0 <= x < width and 0 <= y < height):
        raise DesktopError(f"{what} is off the screen (its centre is at {x},{y}); bring it into view first")


def _inside(point: tuple[int, int], box: Any) -> bool:
    return box.x <= point[0] < box.x + box.width and box.y <= point[1] < box.y + box.height


def _x_address(session: SessionInfo) -> tuple[str, str | None]:
    return session.display, session.env.get("XAUTHORITY")


def _jsonable(result: Any) -> Any:
    """A step's result model (or list of them) as JSON."""
    if isinstance(result, list):
        return [_jsonable(item) for item in result]
    if hasattr(result, "model_dump"):
        return result.model_dump(mode="json", by_alias=True)
    return result


def _wait_for_the_screen(data: Path, config: DesktopConfig) -> tuple[dict[str, Any], ToolError | None]:
    """Wait while a person holds the input lease (`capabilities/input_lease.py`), up to the call's
    `humanWaitMs` (else the operator's default): the lease report, and the refusal if they kept it."""
    wait = input_lease.wait_seconds() if config.humanWaitMs is None else config.humanWaitMs / 1000
    cancellation = current_cancellation()
    started = time.monotonic()
    while (verdict := input_lease.verdict(data, time.monotonic() - started, wait)) is None:
        cancellation.sleep(min(0.1, max(wait - (time.monotonic() - started), 0.01)))
    return verdict


def _result(results: list[dict], images: list[bytes], size: tuple[int, int] | None,
            error: ToolError | None, lease: dict[str, Any] | None = None) -> CallToolResult:
    """The one place results are built: structured content, the same object as JSON text (the
    spec's text: JSON alone, no summary line), the PNGs."""
    body: dict[str, Any] = {"results": results}
    if size is not None:
        body["screen"] = {"width": size[0], "height": size[1]}
    if lease is not None:
        body["lease"] = lease
    pngs = [Image(png) for png in images]
    if error is None:
        return success(body, images=pngs)
    return failure(error, summary="", extra=body, images=pngs)


async def _run(state: BrowserState, request: DesktopRequest) -> CallToolResult:
    return await state.desktop.execute(request)


async def _failed(state: BrowserState, error: ToolError, arguments: dict[str, Any]) -> CallToolResult:
    return await state.desktop.refused(error)


TOOL: ToolSpec[BrowserState] = ToolSpec(
    name="desktop_execute",
    description=_description(),
    args=DesktopRequest,
    output=DesktopOutput,
    run=_run,
    invalid=lambda exc, raw: describe_invalid(exc, raw).to_tool_error(),
    failed=_failed,
    annotations={"read_only_hint": False, "destructive_hint": True, "open_world_hint": False},
)


# -- the operations -------------------------------------------------------------------------

def _pause(ms: float) -> None:
    """Wait `ms`; a cancelled call stops here (CallCancelled), even with no wait."""
    current_cancellation().sleep(ms / 1000)


def _glide(display: DisplayConnection, x: int, y: int, speed: float, min_frames: int = 1) -> None:
    """Move the pointer in a straight line to (x, y) at `speed` px/s, a frame at a time."""
    start_x, start_y = display.pointer()
    distance = math.hypot(x - start_x, y - start_y)
    frames = max(min_frames, math.ceil(distance / speed / FRAME_S)) if distance else 1
    frame_s = distance / speed / frames
    cancellation = current_cancellation()
    began = time.perf_counter()
    for frame in range(1, frames + 1):
        t = frame / frames
        display.move_pointer(round(start_x + (x - start_x) * t), round(start_y + (y - start_y) * t))
        if frame < frames:
            # Sleep to the frame's deadline so the whole glide keeps to the speed.
            cancellation.sleep(began + frame * frame_s - time.perf_counter())


def _aim(display: DisplayConnection, params: Any, run: _Run) -> tuple[int, int]:
    """Glide to the step's {x, y} when it has one; returns where the pointer is."""
    if params.x is None:
        return display.pointer()
    _glide(display, params.x, params.y, run.config.mouseSpeed)
    return params.x, params.y


def _click(display: DisplayConnection, params: ClickParams, run: _Run, times: int) -> ClickResult:
    x, y = _aim(display, params, run)
    button = BUTTONS[params.button]
    for n in range(times):
        if n:
            _pause(DOUBLE_CLICK_GAP_S * 1000)
        display.press_button(button)
        display.release_button(button)
    _pause(run.config.mouseDelayMs)
    return ClickResult(button=params.button, x=x, y=y)


def _scroll(display: DisplayConnection, params: Any, run: _Run, direction: str) -> ScrollResult:
    x, y = _aim(display, params, run)
    button = SCROLL_BUTTONS[direction]
    for n in range(params.amount):
        display.press_button(button)
        display.release_button(button)
    _pause(run.config.mouseDelayMs)
    return ScrollResult(direction=direction, amount=params.amount, x=x, y=y)


def _keycodes(display: DisplayConnection, names: list[str]) -> list[int]:
    return [display.key_for(KEYS[name])[0] for name in names]


def _type_text(display: DisplayConnection, text: str, run: _Run) -> TypedResult:
    shift = display.shift_keycode()
    shift_held = shift in display.held_keys  # held by pressKey: leave it to releaseKey
    for char in text:
        keycode, shifted = display.key_for(text_keysym(char))  # validated: never None
        if shifted and not shift_held:
            display.press_key(shift)
        display.press_key(keycode)
        display.release_key(keycode)
        if shifted and not shift_held:
            display.release_key(shift)
        _pause(run.config.keyboardDelayMs)
    return TypedResult(typed=len(text))


def _perform(display: DisplayConnection, step: Any, run: _Run) -> Any:
    """Do one validated step; returns its result."""
    p = step.params
    config = run.config
    match step.type:
        case "mouse.setPosition":
            display.move_pointer(p.x, p.y)
            _pause(config.mouseDelayMs)
            return PointResult(x=p.x, y=p.y)
        case "mouse.move":
            _glide(display, p.x, p.y, config.mouseSpeed)
            _pause(config.mouseDelayMs)
            return PointResult(x=p.x, y=p.y)
        case "mouse.getPosition":
            x, y = display.pointer()
            return PointResult(x=x, y=y)
        case "mouse.click":
            return _click(display, p, run, 1)
        case "mouse.doubleClick":
            return _click(display, p, run, 2)
        case "mouse.pressButton":
            display.press_button(BUTTONS[p.button])
            _pause(config.mouseDelayMs)
            return ButtonResult(button=p.button)
        case "mouse.releaseButton":
            display.release_button(BUTTONS[p.button])
            _pause(config.mouseDelayMs)
            return ButtonResult(button=p.button)
        case "mouse.drag":
            if p.from_ is not None:
                _glide(display, p.from_.x, p.from_.y, config.mouseSpeed)
                start = (p.from_.x, p.from_.y)
            else:
                start = display.pointer()
            display.press_button(BUTTONS["LEFT"])
            _pause(config.mouseDelayMs)
            _glide(display, p.to.x, p.to.y, config.mouseSpeed, DRAG_MIN_FRAMES)
            _pause(config.mouseDelayMs)
            display.release_button(BUTTONS["LEFT"])
            _pause(config.mouseDelayMs)
            return DragResult(from_=PointResult(x=start[0], y=start[1]), to=PointResult(x=p.to.x, y=p.to.y))
        case "mouse.scrollUp" | "mouse.scrollDown" | "mouse.scrollLeft" | "mouse.scrollRight":
            return _scroll(display, p, run, step.type.removeprefix("mouse.scroll").lower())
        case "keyboard.type":
            if p.text is not None:
                return _type_text(display, p.text, run)
            keycodes = _keycodes(display, p.keys)
            for keycode in keycodes:
                display.press_key(keycode)
            for keycode in reversed(keycodes):
                display.release_key(keycode)
            _pause(config.keyboardDelayMs)
            return KeysResult(keys=p.keys)
        case "keyboard.pressKey":
            for keycode in _keycodes(display, p.keys):
                display.press_key(keycode)
            _pause(config.keyboardDelayMs)
            return KeysResult(keys=p.keys)
        case "keyboard.releaseKey":
            for keycode in reversed(_keycodes(display, p.keys)):
                display.release_key(keycode)
            _pause(config.keyboardDelayMs)
            return KeysResult(keys=p.keys)
        case "screen.width":
            return display.screen_size()[0]
        case "screen.height":
            return display.screen_size()[1]
        case "screen.grab":
            return run.image(display.grab(0, 0, *display.screen_size()))
        case "screen.grabRegion":
            return run.image(display.grab(p.left, p.top, p.width, p.height))
        case "screen.colorAt":
            r, g, b = display.color_at(p.x, p.y)
            return ColorResult(x=p.x, y=p.y, r=r, g=g, b=b, hex=f"#{r:02x}{g:02x}{b:02x}")
        case "getActiveWindow":
            window = display.active_window()
            return None if window is None else WindowResult(**window.to_json())
        case "getWindows":
            return [WindowResult(**window.to_json()) for window in display.windows()]
        case "clipboard.setContent":
            display.set_clipboard(p.text)
            return None
        case "clipboard.getContent":
            return display.get_clipboard()
        case "sleep":
            _pause(p.ms)
            return None
    raise AssertionError(f"operation {step.type} has no implementation")
