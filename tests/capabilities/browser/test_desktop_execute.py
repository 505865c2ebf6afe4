"""desktop_execute on the real desktop session: pointer, keys, screen, windows, clipboard.

Pages are opened in Chromium with browser_execute (one fresh tab per test, closed after), and
what the page saw is read back with its `evaluate` step; the input itself comes only from
desktop_execute, through XTEST, as a person's would.
"""

from __future__ import annotations

import base64
import io
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass

import psutil
import pytest
from PIL import Image
from Xlib import X, display as xdisplay

from capabilities.browser.desktop_keys import KEYS


def chromium_pid(info) -> int | None:
    """The session's Chromium browser process (not a helper), found by its profile dir."""
    marker = f"--user-data-dir={info.chrome_profile}"
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if marker in cmdline and not any(arg.startswith("--type=") for arg in cmdline):
            return proc.info["pid"]
    return None


@dataclass
class DesktopRun:
    """A desktop_execute result, read."""

    raw: object
    body: dict
    images: list[Image.Image]

    @property
    def is_error(self) -> bool:
        return bool(self.raw.is_error)

    def result(self, step: int):
        """The result of step N (numbered from 1)."""
        return self.body["results"][step - 1]["result"]


def read_desktop_run(raw) -> DesktopRun:
    assert raw.content[0].type == "text"
    images = [Image.open(io.BytesIO(base64.b64decode(c.data))) for c in raw.content[1:]]
    assert all(c.type == "image" and c.mime_type == "image/png" for c in raw.content[1:])
    return DesktopRun(raw=raw, body=json.loads(raw.content[0].text), images=images)


@pytest.fixture
def desktop(browser_server):
    """`desktop(operations, **config)`: one desktop_execute call, read."""

    def run(operations: list[dict], **config) -> DesktopRun:
        args: dict = {"operations": operations}
        if config:
            args["config"] = config
        return read_desktop_run(browser_server.call("desktop_execute", args))

    return run


class XProbe:
    """A plain X client on the session's display, to check what the server sees."""

    def __init__(self, info) -> None:
        if info.env.get("XAUTHORITY"):
            os.environ["XAUTHORITY"] = info.env["XAUTHORITY"]
        self.x = xdisplay.Display(info.display)

    def pointer(self) -> tuple[int, int, int]:
        reply = self.x.screen().root.query_pointer()
        return reply.root_x, reply.root_y, reply.mask

    def keys_down(self) -> list[int]:
        return [i * 8 + b for i, byte in enumerate(self.x.query_keymap()) for b in range(8)
                if byte & (1 << b)]

    def close(self) -> None:
        self.x.close()


@pytest.fixture
def xprobe(browser_desktop):
    probe = XProbe(browser_desktop.info)
    yield probe
    probe.close()


class InputPage:
    """tests/pages/desktop_input.html in a fresh Chromium tab, with its place on the screen."""

    def __init__(self, run_page, desktop, url: str) -> None:
        self.run_page, self.desktop = run_page, desktop
        self.tab = f"desktop-{uuid.uuid4().hex[:8]}"
        run = run_page([{"type": "navigate", "params": {"url": url}}], tab=self.tab)
        assert not run.is_error, run.summary
        self._wait_for_a_still_maximised_window()
        self.origin = self._find_origin()

    def eval(self, script: str):
        run = self.run_page([{"type": "evaluate", "params": {"script": script}}], tab=self.tab)
        assert not run.is_error, run.summary
        return run.result(1)

    def settled(self, script: str, expected, timeout: float = 10.0):
        """The value of `script` once it equals `expected` (input reaches the page
        asynchronously: X, then Chromium's browser process, then the renderer), or its
        last value after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while (value := self.eval(script)) != expected and time.monotonic() < deadline:
            time.sleep(0.1)
        return value

    def _wait_for_a_still_maximised_window(self) -> None:
        # After a screen resize the window manager re-maximises windows a moment later; aim
        # only once the window spans the screen and has stopped moving.
        size = self.desktop([{"type": "screen.width"}, {"type": "screen.height"}])
        width = size.result(1)
        script = "[window.screenX, window.screenY, window.outerWidth, window.outerHeight]"
        deadline = time.monotonic() + 15
        last = None
        while True:
            box = self.eval(script)
            if box == last and box[2] == width:
                return
            assert time.monotonic() < deadline, f"the window never settled maximised: {box}"
            last = box
            time.sleep(0.2)

    def _find_origin(self) -> tuple[int, int]:
        # The window is maximised: the middle of the screen is inside the page. The page learns
        # its screen origin from the pointer's events (screenX - clientX).
        size = self.desktop([{"type": "screen.width"}, {"type": "screen.height"}])
        cx, cy = size.result(1) // 2, size.result(2) // 2
        moved = self.desktop([{"type": "mouse.setPosition", "params": {"x": cx, "y": cy}},
                              {"type": "mouse.setPosition", "params": {"x": cx + 3, "y": cy + 3}}])
        assert not moved.is_error, moved.body
        deadline = time.monotonic() + 10
        while (origin := self.eval("window.seen.origin")) is None:
            assert time.monotonic() < deadline, "the page never saw the pointer"
            time.sleep(0.1)
        return origin["x"], origin["y"]

    def on_screen(self, x: float, y: float) -> dict:
        """Screen coordinates of page point (x, y)."""
        return {"x": round(self.origin[0] + x), "y": round(self.origin[1] + y)}

    def center_of(self, selector: str) -> dict:
        box = self.eval(f"(() => {{ const r = document.querySelector({selector!r})"
                        f".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        return self.on_screen(*box)

    def close(self) -> None:
        self.run_page([{"type": "url", "params": {}}], tab=self.tab, close=True)


@pytest.fixture
def input_page(run_page, desktop, pages_server):
    page = InputPage(run_page, desktop, pages_server.url("/desktop_input.html"))
    yield page
    page.close()


@pytest.fixture
def screen_resizer(resize_screen, desktop):
    """`resize(w, h)`; the original size comes back after the test."""
    before = desktop([{"type": "screen.width"}, {"type": "screen.height"}])
    yield resize_screen
    resize_screen(before.result(1), before.result(2))


# -- mouse ----------------------------------------------------------------------------------


def test_move_and_get_position_agree(desktop, xprobe):
    """The pointer ends where mouse.move and setPosition put it, as getPosition and the X
    server both report."""
    run = desktop([
        {"type": "mouse.setPosition", "params": {"x": 40, "y": 50}},
        {"type": "mouse.getPosition"},
        {"type": "mouse.move", "params": {"x": 321, "y": 234}},
        {"type": "mouse.getPosition"},
    ], mouseDelayMs=0)
    assert not run.is_error, run.body
    assert run.result(2) == {"x": 40, "y": 50}
    assert run.result(3) == run.result(4) == {"x": 321, "y": 234}
    assert xprobe.pointer()[:2] == (321, 234)


def test_move_is_animated_at_mouse_speed(desktop):
    """mouse.move glides at config.mouseSpeed so people watching see the pointer travel."""
    desktop([{"type": "mouse.setPosition", "params": {"x": 0, "y": 100}}], mouseDelayMs=0)
    began = time.perf_counter()
    run = desktop([{"type": "mouse.move", "params": {"x": 1000, "y": 100}}],
                  mouseSpeed=2000, mouseDelayMs=0)
    assert not run.is_error, run.body
    assert time.perf_counter() - began >= 0.45  # 1000 px at 2000 px/s


def test_click_lands_on_the_point_aimed_at(desktop, input_page):
    """A click at a screen point reaches the page at that point, with the right button."""
    target = input_page.center_of("#target")
    run = desktop([
        {"type": "mouse.click", "params": {**target}},
        {"type": "mouse.click", "params": {"button": "RIGHT", **target}},
        {"type": "mouse.doubleClick", "params": {**target}},
    ], mouseDelayMs=20)
    assert not run.is_error, run.body
    assert run.result(1) == {"button": "LEFT", **target}
    assert input_page.settled("window.seen.dblclicks", 1) == 1
    clicks = input_page.eval("window.seen.clicks")
    expected = {"x": 260, "y": 190, "target": "target"}
    assert clicks[0] == {**expected, "button": 0}
    assert clicks[1] == {**expected, "button": 2}


def test_drag_moves_a_slider(desktop, input_page):
    """mouse.drag presses on the slider's thumb, moves and releases: the value follows."""
    start = input_page.on_screen(202, 380 + input_page.eval(
        "document.querySelector('#slider').getBoundingClientRect().height") / 2)
    end = {"x": start["x"] + 300, "y": start["y"]}
    run = desktop([{"type": "mouse.drag", "params": {"from": start, "to": end}}])
    assert not run.is_error, run.body
    assert run.result(1) == {"from": start, "to": end}
    # The value changes while the thumb moves; wait for the release to be seen.
    assert input_page.settled("window.seen.mouseups", 1) == 1
    value = int(input_page.eval("document.querySelector('#slider').value"))
    assert 65 <= value <= 85  # 300 of the track's ~400 px


def test_scroll_scrolls_the_page(desktop, input_page):
    """Wheel clicks over the page scroll it down, and back up."""
    point = input_page.on_screen(700, 300)
    run = desktop([{"type": "mouse.scrollDown", "params": {"amount": 5, **point}}])
    assert not run.is_error, run.body
    # Smooth scrolling animates over several frames: wait for it to pass 100 px, not just to start.
    deadline = time.monotonic() + 5
    while (down := input_page.eval("window.scrollY")) <= 100 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert down > 100
    run = desktop([{"type": "mouse.scrollUp", "params": {"amount": 20}}])
    assert not run.is_error, run.body
    deadline = time.monotonic() + 5
    while input_page.eval("window.scrollY") != 0:
        assert time.monotonic() < deadline, "the page did not scroll back up"
        time.sleep(0.1)


# -- keyboard -------------------------------------------------------------------------------


def test_typed_text_lands_in_a_page_input(desktop, input_page):
    """keyboard.type {text} types every US-keyboard character, shifted ones included."""
    text = "Hello, World! ~`|{}<>?:\"_+ 1234567890-=[]\\;',./ @#$%^&*()"
    run = desktop([
        {"type": "mouse.click", "params": input_page.center_of("#field")},
        {"type": "keyboard.type", "params": {"text": text}},
    ], keyboardDelayMs=0)
    assert not run.is_error, run.body
    assert run.result(2) == {"typed": len(text)}
    assert input_page.settled("document.querySelector('#field').value", text) == text


def test_chord_selects_all_and_types_over_it(desktop, input_page):
    """keyboard.type {keys} presses keys together (LeftControl+A selects the input's text), and
    a key held with pressKey stays down across steps until releaseKey."""
    run = desktop([
        {"type": "mouse.click", "params": input_page.center_of("#field")},
        {"type": "keyboard.type", "params": {"text": "old text"}},
        {"type": "keyboard.type", "params": {"keys": ["LeftControl", "A"]}},
        {"type": "keyboard.type", "params": {"text": "new"}},
        {"type": "keyboard.pressKey", "params": {"keys": ["LeftShift"]}},
        {"type": "keyboard.type", "params": {"keys": ["Left"]}},
        {"type": "keyboard.releaseKey", "params": {"keys": ["LeftShift"]}},
        {"type": "keyboard.type", "params": {"keys": ["Backspace"]}},
        {"type": "keyboard.pressKey", "params": {"keys": ["LeftShift"]}},
        {"type": "keyboard.type", "params": {"text": "ab"}},
        {"type": "keyboard.releaseKey", "params": {"keys": ["LeftShift"]}},
    ])
    assert not run.is_error, run.body
    assert input_page.settled("document.querySelector('#field').value", "neAB") == "neAB"


def test_keys_missing_from_the_keymap_are_bound_and_pressed(desktop, xprobe):
    """Keys the keyboard map lacks (F13 to F24 on a standard map) are bound to a spare keycode,
    so pressing one puts that key down on the server."""
    held = desktop([{"type": "keyboard.pressKey", "params": {"keys": ["F24"]}}])
    try:
        assert not held.is_error, held.body
        down = xprobe.keys_down()
        assert len(down) == 1
        assert xprobe.x.get_keyboard_mapping(down[0], 1)[0][0] == KEYS["F24"]
    finally:
        released = desktop([{"type": "keyboard.releaseKey", "params": {"keys": ["F24"]}}])
    assert not released.is_error, released.body
    assert xprobe.keys_down() == []


def test_enter_and_a_newline_press_return(desktop, input_page):
    """Enter (a key) and "\\n" (in text) both reach the page as the Enter key."""
    run = desktop([
        {"type": "mouse.click", "params": input_page.center_of("#field")},
        {"type": "keyboard.type", "params": {"keys": ["Enter"]}},
        {"type": "keyboard.type", "params": {"text": "a\n"}},
    ])
    assert not run.is_error, run.body
    expected = ["Enter", "a", "Enter"]
    assert input_page.settled("window.seen.keys", expected) == expected


def test_held_keys_and_buttons_are_released_when_a_step_fails(
        desktop, xprobe, screen_resizer, browser_desktop):
    """A key and a button held by pressKey/pressButton are let go when a later step fails,
    and the failure comes with a screenshot of that moment."""
    size = desktop([{"type": "screen.width"}, {"type": "screen.height"}])
    width, height = size.result(1), size.result(2)
    # The region is on the screen when the call is checked; the screen shrinks during the
    # sleep (as when a viewer resizes), so grabbing it fails at run time.
    def shrink_once_keys_are_down() -> None:
        watcher = XProbe(browser_desktop.info)
        try:
            deadline = time.monotonic() + 30
            while not watcher.keys_down() and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            watcher.close()
        screen_resizer(width - 256, height - 200)

    shrink = threading.Thread(target=shrink_once_keys_are_down)
    shrink.start()
    try:
        run = desktop([
            {"type": "mouse.setPosition", "params": {"x": 5, "y": 5}},
            {"type": "keyboard.pressKey", "params": {"keys": ["LeftShift", "LeftControl"]}},
            {"type": "mouse.pressButton", "params": {"button": "MIDDLE"}},
            {"type": "sleep", "params": {"ms": 3000}},
            {"type": "screen.grabRegion",
             "params": {"left": width - 100, "top": height - 100, "width": 100, "height": 100}},
            {"type": "mouse.getPosition"},
        ])
    finally:
        shrink.join()
    assert run.is_error
    results = run.body["results"]
    assert [r["success"] for r in results] == [True, True, True, True, False]  # stopped there
    assert "past the screen" in results[4]["error"]
    assert "operations[4]" in run.body["error"]["message"]
    assert run.body["error"]["kind"] == "failed" and run.body["error"]["step"] == 5
    assert run.raw.structured_content == run.body
    assert results[4]["screenshot"]["image_index"] == 0
    assert run.images[0].size == (width - 256, height - 200)
    assert xprobe.keys_down() == []
    assert xprobe.pointer()[2] & (X.Button1Mask | X.Button2Mask | X.Button3Mask) == 0


def test_untypeable_text_is_refused_with_the_clipboard_route(desktop, xprobe):
    """Text a US keyboard cannot type is refused before anything runs, saying to paste it."""
    desktop([{"type": "mouse.setPosition", "params": {"x": 11, "y": 12}}])
    run = desktop([
        {"type": "mouse.setPosition", "params": {"x": 300, "y": 300}},
        {"type": "keyboard.type", "params": {"text": "Grüße"}},
    ])
    assert run.is_error
    assert "operations[1]" in run.body["error"]["message"] and "'ü'" in run.body["error"]["message"]
    assert "clipboard.setContent" in run.body["error"]["message"]
    assert xprobe.pointer()[:2] == (11, 12)


# -- clipboard ------------------------------------------------------------------------------


def test_clipboard_round_trips_unicode_and_pastes_it(desktop, input_page):
    """Any Unicode text goes on the clipboard, comes back, and pastes with LeftControl+V."""
    text = "Grüße, 東京 🚀"
    run = desktop([
        {"type": "clipboard.setContent", "params": {"text": text}},
        {"type": "clipboard.getContent"},
        {"type": "mouse.click", "params": input_page.center_of("#field")},
        {"type": "keyboard.type", "params": {"keys": ["LeftControl", "V"]}},
    ])
    assert not run.is_error, run.body
    assert run.result(2) == text
    assert input_page.settled("document.querySelector('#field').value", text) == text
    # The owner outlives the call: a later call still reads it.
    assert desktop([{"type": "clipboard.getContent"}]).result(1) == text


def test_clipboard_owner_runs_as_the_desktop_user(desktop, browser_desktop):
    """The xclip left owning the clipboard is a desktop process, so it must not run as root."""
    desktop([{"type": "clipboard.setContent", "params": {"text": "owned"}}])
    display = browser_desktop.info.display
    owners = []
    for proc in psutil.process_iter(["name", "uids"]):
        try:
            if proc.info["name"] == "xclip" and proc.environ().get("DISPLAY") == display:
                owners.append(proc.info["uids"].real)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    assert owners and set(owners) == {browser_desktop.info.uid}


# -- windows --------------------------------------------------------------------------------


def test_get_windows_lists_an_opened_window_with_its_pid(desktop, input_page, browser_desktop):
    """getWindows lists Chromium's window with its title, its pid and a real geometry, and
    getActiveWindow names it once it is clicked."""
    run = desktop([
        {"type": "mouse.click", "params": input_page.center_of("#target")},
        {"type": "getWindows"},
        {"type": "getActiveWindow"},
    ])
    assert not run.is_error, run.body
    chromium = chromium_pid(browser_desktop.info)
    windows = [w for w in run.result(2) if w["title"].startswith("desktop input")]
    assert len(windows) == 1, run.result(2)
    window = windows[0]
    assert window["pid"] == chromium
    assert window["width"] > 300 and window["height"] > 200
    assert set(window) == {"id", "title", "pid", "x", "y", "width", "height"}
    assert run.result(3)["id"] == window["id"]


def _display_of(process: psutil.Process) -> str | None:
    try:
        return process.environ().get("DISPLAY")
    except psutil.Error:
        return None


def test_get_windows_lists_the_panel(desktop, browser_desktop):
    """The XFCE panel along the bottom is one of the desktop's windows."""
    panels = [p.pid for p in psutil.process_iter(["name"])
              if p.info["name"] == "xfce4-panel" and _display_of(p) == browser_desktop.info.display]
    if not panels:
        pytest.skip("this desktop has no XFCE panel (the minimal local session)")
    run = desktop([{"type": "getWindows"}])
    assert not run.is_error, run.body
    assert any(w["pid"] in panels for w in run.result(1)), run.result(1)


# -- screen ---------------------------------------------------------------------------------


def test_grab_size_follows_a_resize(desktop, screen_resizer):
    """After the screen is resized, grab, width/height and the reported screen all agree."""
    screen_resizer(1024, 640)
    run = desktop([{"type": "screen.width"}, {"type": "screen.height"}, {"type": "screen.grab"}])
    assert not run.is_error, run.body
    assert (run.result(1), run.result(2)) == (1024, 640)
    assert run.result(3) | {"at": 0} == {"image_index": 0, "width": 1024, "height": 640, "scale": 1, "at": 0,
                                         "origin": {"x": 0, "y": 0}, "screen": {"width": 1024, "height": 640}}
    assert run.images[0].size == (1024, 640)
    assert run.body["screen"] == {"width": 1024, "height": 640}


def test_color_at_matches_a_pixel_of_grab_region(desktop, input_page):
    """colorAt and grabRegion read the same pixels, in the right channel order."""
    corner = input_page.on_screen(200, 150)  # #target, #ff8000
    run = desktop([
        {"type": "mouse.setPosition", "params": {"x": 0, "y": 0}},
        {"type": "screen.grabRegion", "params": {"left": corner["x"] - 10, "top": corner["y"] - 10,
                                                 "width": 40, "height": 30}},
        {"type": "screen.colorAt", "params": {"x": corner["x"] + 5, "y": corner["y"] + 5}},
        {"type": "screen.colorAt", "params": {"x": corner["x"] - 5, "y": corner["y"] - 5}},
    ])
    assert not run.is_error, run.body
    region = run.images[0].convert("RGB")
    assert region.size == (40, 30)
    inside, outside = run.result(3), run.result(4)
    assert inside["hex"] == "#ff8000"
    assert region.getpixel((15, 15)) == (inside["r"], inside["g"], inside["b"])
    assert region.getpixel((5, 5)) == (outside["r"], outside["g"], outside["b"])


# -- the call as a whole ----------------------------------------------------------------------


def test_a_bad_step_3_is_refused_before_step_1_moves_the_pointer(desktop, xprobe):
    """The whole call is checked first: nothing moves, and the message names step and field."""
    desktop([{"type": "mouse.setPosition", "params": {"x": 17, "y": 19}}])
    run = desktop([
        {"type": "mouse.move", "params": {"x": 400, "y": 400}},
        {"type": "mouse.click"},
        {"type": "mouse.click", "params": {"x": "left", "y": 10}},
    ])
    assert run.is_error
    assert run.body["results"] == []
    assert set(run.body["screen"]) == {"width", "height"}
    assert "operations[2] (step 3, mouse.click): params.x" in run.body["error"]["message"]
    assert run.body["error"]["kind"] == "invalid_arguments"
    assert (run.body["error"]["step"], run.body["error"]["field"]) == (3, "params.x")
    assert xprobe.pointer()[:2] == (17, 19)


@pytest.mark.parametrize(("step", "says"), [
    ({"type": "mouse.teleport", "params": {}}, "unknown operation 'mouse.teleport'"),
    ({"type": "mouse.click", "params": {"buton": "LEFT"}}, "unknown field 'params.buton'"),
    ({"type": "mouse.click", "params": {"button": "BACK"}}, "params.button"),
    ({"type": "mouse.move", "params": {"x": 5}}, "missing field 'params.y'"),
    ({"type": "mouse.move", "params": {"x": 99999, "y": 5}}, "params.x=99999 is off the screen"),
    ({"type": "keyboard.pressKey", "params": {"keys": ["Ctrl"]}}, "unknown key 'Ctrl'"),
    ({"type": "sleep", "params": {"ms": 30001}}, "params.ms"),
    ({"type": "screen.grabRegion", "params": {"left": 0, "top": 0, "width": 99999, "height": 1}},
     "goes past the screen's edge"),
])
def test_each_kind_of_bad_step_is_refused_by_name(desktop, step, says):
    """Unknown operations, fields, buttons and keys, missing fields and off-screen
    coordinates are each refused, naming the step and field."""
    run = desktop([{"type": "mouse.getPosition"}, step])
    assert run.is_error
    assert "operations[1] (step 2" in run.body["error"]["message"]
    assert says in run.body["error"]["message"]


def test_concurrent_calls_take_turns(browser_server):
    """Two calls at once run one after the other, never interleaved."""
    slow = {"operations": [
        {"type": "mouse.setPosition", "params": {"x": 100, "y": 100}},
        {"type": "sleep", "params": {"ms": 400}},
        {"type": "mouse.getPosition"},
    ]}
    quick = {"operations": [
        {"type": "mouse.setPosition", "params": {"x": 600, "y": 500}},
        {"type": "mouse.getPosition"},
    ]}
    first, second = (read_desktop_run(r) for r in browser_server.call_many(
        [("desktop_execute", slow), ("desktop_execute", quick)]))
    assert first.result(3) == {"x": 100, "y": 100}
    assert second.result(2) == {"x": 600, "y": 500}


def test_description_and_schema_list_every_operation_and_key(browser_server):
    """The model learns every operation and key name, and each operation's result type, from
    the tool itself."""
    tool = next(t for t in browser_server.list_tools() if t.name == "desktop_execute")
    for name in KEYS:
        assert name in tool.description
    items = tool.input_schema["properties"]["operations"]["items"]["oneOf"]
    names = {item["properties"]["type"]["const"] for item in items}
    assert {"mouse.drag", "keyboard.type", "screen.grabRegion", "clipboard.setContent",
            "getWindows", "sleep"} <= names
    assert len(names) == 41  # the spec's 25, then the native-window steps (accessibility, window, apps, waits, marks)
    done = tool.output_schema["anyOf"][0]["properties"]["results"]["items"]["oneOf"]
    assert {item["properties"]["operation"]["const"] for item in done} == names
    assert "vision" not in tool.description
    assert set(tool.input_schema["properties"]["config"]["properties"]) == {
        "keyboardDelayMs", "mouseDelayMs", "mouseSpeed", "humanWaitMs"}
    assert "lease" in tool.output_schema["anyOf"][0]["properties"]
