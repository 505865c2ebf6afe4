"""`desktop_execute`: batched mouse, keyboard, screen, window and clipboard steps on the
session's display, done as a person at the screen would (real pointer, real keys via XTEST).

The call is validated whole before anything runs (`desktop_ops`), runs one call at a time,
stops at the first failing step with a screenshot of that moment, and lets go of any key or
button still held when a step fails. The result is one text block of JSON
`{results: [{success, operation, result}], screen: {width, height}}`, then the PNG images.
"""

from __future__ import annotations

import base64
import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ImageContent, TextContent
from pydantic import WithJsonSchema

from ..session import SessionInfo, SessionNotFound, read_session
from .desktop_display import DesktopError, DisplayConnection, Grab
from .desktop_keys import BUTTONS, KEYS, SCROLL_BUTTONS, text_keysym
from .desktop_ops import (
    OPERATIONS,
    Call,
    ClickParams,
    DesktopConfig,
    InvalidCall,
    check_on_screen,
    config_schema,
    operations_schema,
    parse_call,
)

# Pointer animation: one motion event per frame at about 120 frames a second.
FRAME_S = 1 / 120
DRAG_MIN_FRAMES = 5  # apps only see a drag when the pointer moves while pressed
DOUBLE_CLICK_GAP_S = 0.03


def _description() -> str:
    operations = "\n".join(f"- {name}: {doc}" for name, (_, doc) in OPERATIONS.items())
    return f"""Use the mouse, keyboard, screen, windows and clipboard of the desktop, as a person at \
the screen would. Use browser_execute for anything inside a web page; use this for the browser's \
own interface, dialogs such as the file chooser, and other windows.

operations: steps, each {{type, params}}, run in order. config (optional): keyboardDelayMs \
(default 10), mouseDelayMs (default 50), mouseSpeed (default 2000 px/s).

{operations}

Buttons: LEFT (default), MIDDLE, RIGHT. Keys (nut.js names): {", ".join(KEYS)}.

Coordinates are screen pixels from the top left; the screen changes size when a viewer resizes \
their window, so read screen.width/height before aiming. keyboard.type {{text}} presses the keys of \
a US layout; for other characters put the text on the clipboard (clipboard.setContent) and paste \
it (keyboard.type {{keys: ["LeftControl", "V"]}}). keyboard.type {{keys}} presses the keys together \
and releases them (a chord); pressKey holds keys until releaseKey or until a step fails.

Result: text JSON {{results: [{{success, operation, result}}], screen: {{width, height}}}}; \
screenshots are PNG images after the text, a screenshot's result being {{image_index, width, \
height}}. The whole call is checked before anything runs. It stops at the first failing step and \
attaches a screenshot (the failed step's entry has error and screenshot); keys and buttons \
still held are then released. One call runs at a time.

Screenshots go to the code, not to the model: attach one with artifact(...) only when the model \
needs to see it. For a large one, pass heap_memory_max_mb: 64 to run_js."""


@dataclass
class _Run:
    """One call in progress: its config, results and images so far."""

    config: DesktopConfig
    results: list[dict] = field(default_factory=list)
    images: list[Grab] = field(default_factory=list)

    def image(self, grab: Grab) -> dict:
        self.images.append(grab)
        return {"image_index": len(self.images) - 1, "width": grab.width, "height": grab.height}


class DesktopController:
    """The shared state of `desktop_execute`: the display connection (opened on first use,
    reopened when the session changes or the connection breaks) and the lock that makes
    calls take turns."""

    def __init__(self) -> None:
        self._connection: DisplayConnection | None = None
        self._thread_lock = threading.Lock()  # for callers outside the event loop (benchmarks)
        self._lock: anyio.Lock | None = None

    async def execute(self, operations: Any, config: Any) -> CallToolResult:
        """Run one `desktop_execute` call; concurrent calls queue."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            return await anyio.to_thread.run_sync(self.execute_sync, operations, config)

    def execute_sync(self, operations: Any, config: Any) -> CallToolResult:
        """The same, from a plain thread."""
        with self._thread_lock:
            return self._execute(operations, config)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def connection(self) -> DisplayConnection:
        """The display connection for the current session (read fresh from session.json)."""
        session = read_session()
        if self._connection is not None and _x_address(self._connection.session) != _x_address(session):
            self.close()  # another display, or the session was restarted with a new cookie
        if self._connection is None:
            self._connection = DisplayConnection(session)
        self._connection.session = session  # its other facts (the clipboard's env) may change
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
        try:
            return self._connect()[1]
        except (SessionNotFound, DesktopError):
            return None

    def _execute(self, operations: Any, config: Any) -> CallToolResult:
        try:
            call = parse_call(operations, config)
        except InvalidCall as exc:
            return _refusal(str(exc), self._screen_size_if_reachable())
        try:
            display, size = self._connect()
        except (SessionNotFound, DesktopError) as exc:
            return _refusal(str(exc), None)
        try:
            check_on_screen(call.operations, *size)
        except InvalidCall as exc:
            return _refusal(str(exc), size)
        if any(step.type.startswith("keyboard.") for step in call.operations):
            try:
                display.read_keymap()  # someone may have switched the layout since
            except DesktopError as exc:
                self.close()
                return _refusal(str(exc), size)
        run = _Run(config=call.config)
        failed = self._run_steps(display, call, run)
        try:
            size = display.screen_size()
        except DesktopError:
            self.close()
        body = {"results": run.results, "screen": {"width": size[0], "height": size[1]}}
        if failed is not None:
            body["error"] = failed + "; the keys and buttons still held were released"
        return _result(body, run.images, is_error=failed is not None)

    def _run_steps(self, display: DisplayConnection, call: Call, run: _Run) -> str | None:
        """Run the steps in order until one fails; returns what failed, or None. Whatever
        failed (a step, or anything raised), every key and button still held is released."""
        failed: str | None = None
        try:
            for index, step in enumerate(call.operations):
                try:
                    result = _perform(display, step, run)
                    display.settle()
                except DesktopError as exc:
                    failed = f"operations[{index}] (step {index + 1}, {step.type}) failed: {exc}"
                    entry = {"success": False, "operation": step.type, "result": None,
                             "error": str(exc)}
                    run.results.append(entry)
                    try:
                        entry["screenshot"] = run.image(display.grab(0, 0, *display.screen_size()))
                    except DesktopError:
                        pass  # the display itself is gone; the error says so
                    return failed
                run.results.append({"success": True, "operation": step.type, "result": result})
            return None
        except BaseException:
            failed = failed or "interrupted"
            raise
        finally:
            if failed is not None:
                try:
                    display.release_held()
                except DesktopError:
                    self.close()


def _x_address(session: SessionInfo) -> tuple[str, str | None]:
    return session.display, session.env.get("XAUTHORITY")


def _refusal(message: str, size: tuple[int, int] | None) -> CallToolResult:
    body: dict[str, Any] = {"results": [], "error": message}
    if size is not None:
        body["screen"] = {"width": size[0], "height": size[1]}
    return _result(body, [], is_error=True)


def _result(body: dict, images: list[Grab], *, is_error: bool) -> CallToolResult:
    """The one place results are built: JSON text first, then the PNGs."""
    content: list[Any] = [TextContent(type="text", text=json.dumps(body, ensure_ascii=False))]
    content += [ImageContent(type="image", data=base64.b64encode(g.png).decode(),
                             mime_type="image/png") for g in images]
    return CallToolResult(content=content, is_error=is_error)


# -- the operations -------------------------------------------------------------------------

def _pause(ms: float) -> None:
    if ms > 0:
        time.sleep(ms / 1000)


def _glide(display: DisplayConnection, x: int, y: int, speed: float, min_frames: int = 1) -> None:
    """Move the pointer in a straight line to (x, y) at `speed` px/s, a frame at a time."""
    start_x, start_y = display.pointer()
    distance = math.hypot(x - start_x, y - start_y)
    frames = max(min_frames, math.ceil(distance / speed / FRAME_S)) if distance else 1
    frame_s = distance / speed / frames
    began = time.perf_counter()
    for frame in range(1, frames + 1):
        t = frame / frames
        display.move_pointer(round(start_x + (x - start_x) * t), round(start_y + (y - start_y) * t))
        if frame < frames:
            # Sleep to the frame's deadline so the whole glide keeps to the speed.
            delay = began + frame * frame_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)


def _aim(display: DisplayConnection, params: Any, run: _Run) -> tuple[int, int]:
    """Glide to the step's {x, y} when it has one; returns where the pointer is."""
    if params.x is None:
        return display.pointer()
    _glide(display, params.x, params.y, run.config.mouseSpeed)
    return params.x, params.y


def _click(display: DisplayConnection, params: ClickParams, run: _Run, times: int) -> dict:
    x, y = _aim(display, params, run)
    button = BUTTONS[params.button]
    for n in range(times):
        if n:
            time.sleep(DOUBLE_CLICK_GAP_S)
        display.press_button(button)
        display.release_button(button)
    _pause(run.config.mouseDelayMs)
    return {"button": params.button, "x": x, "y": y}


def _scroll(display: DisplayConnection, params: Any, run: _Run, direction: str) -> dict:
    x, y = _aim(display, params, run)
    button = SCROLL_BUTTONS[direction]
    for n in range(params.amount):
        display.press_button(button)
        display.release_button(button)
    _pause(run.config.mouseDelayMs)
    return {"direction": direction, "amount": params.amount, "x": x, "y": y}


def _keycodes(display: DisplayConnection, names: list[str]) -> list[int]:
    return [display.key_for(KEYS[name])[0] for name in names]


def _type_text(display: DisplayConnection, text: str, run: _Run) -> dict:
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
    return {"typed": len(text)}


def _perform(display: DisplayConnection, step: Any, run: _Run) -> Any:
    """Do one validated step; returns its result."""
    p = step.params
    config = run.config
    match step.type:
        case "mouse.setPosition":
            display.move_pointer(p.x, p.y)
            _pause(config.mouseDelayMs)
            return {"x": p.x, "y": p.y}
        case "mouse.move":
            _glide(display, p.x, p.y, config.mouseSpeed)
            _pause(config.mouseDelayMs)
            return {"x": p.x, "y": p.y}
        case "mouse.getPosition":
            x, y = display.pointer()
            return {"x": x, "y": y}
        case "mouse.click":
            return _click(display, p, run, 1)
        case "mouse.doubleClick":
            return _click(display, p, run, 2)
        case "mouse.pressButton":
            display.press_button(BUTTONS[p.button])
            _pause(config.mouseDelayMs)
            return {"button": p.button}
        case "mouse.releaseButton":
            display.release_button(BUTTONS[p.button])
            _pause(config.mouseDelayMs)
            return {"button": p.button}
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
            return {"from": {"x": start[0], "y": start[1]}, "to": {"x": p.to.x, "y": p.to.y}}
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
            return {"keys": p.keys}
        case "keyboard.pressKey":
            for keycode in _keycodes(display, p.keys):
                display.press_key(keycode)
            _pause(config.keyboardDelayMs)
            return {"keys": p.keys}
        case "keyboard.releaseKey":
            for keycode in reversed(_keycodes(display, p.keys)):
                display.release_key(keycode)
            _pause(config.keyboardDelayMs)
            return {"keys": p.keys}
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
            return {"x": p.x, "y": p.y, "r": r, "g": g, "b": b, "hex": f"#{r:02x}{g:02x}{b:02x}"}
        case "getActiveWindow":
            window = display.active_window()
            return None if window is None else window.to_json()
        case "getWindows":
            return [window.to_json() for window in display.windows()]
        case "clipboard.setContent":
            display.set_clipboard(p.text)
            return None
        case "clipboard.getContent":
            return display.get_clipboard()
        case "sleep":
            _pause(p.ms)
            return None
    raise AssertionError(f"operation {step.type} has no implementation")


def register(server: MCPServer) -> None:
    """Add `desktop_execute` to the browser server."""
    controller = DesktopController()

    async def desktop_execute(
        operations: Annotated[list[Any], WithJsonSchema(operations_schema())],
        config: Annotated[dict[str, Any] | None, WithJsonSchema(config_schema())] = None,
    ) -> CallToolResult:
        # The arguments are checked here, against the same models their schema comes from,
        # so every problem is reported by step and field before anything runs.
        return await controller.execute(operations, config)

    server.add_tool(desktop_execute, name="desktop_execute", description=_description(),
                    structured_output=False)
