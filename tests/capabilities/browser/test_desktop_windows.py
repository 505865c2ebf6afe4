"""Windows handled as a person would (focus, move, resize, minimize, maximize, close, a covered
window's own pixels, launching apps) and waiting for the screen instead of for time, on the real
desktop session.
"""

from __future__ import annotations

import io
import os
import time
import uuid
from pathlib import Path

import pytest

from PIL import Image, ImageChops, ImageStat

from capabilities.browser.desktop_accessibility import Box
from capabilities.browser.desktop_waits import ScreenWatch, WaitTimeout
from capabilities.browser.desktop_windows import (WindowError, WindowGone, WindowManager,
                                                  launch_app, spawn_app)

pytestmark = [pytest.mark.desktop, pytest.mark.usefixtures("no_session_restore_prompt")]


@pytest.fixture
def watch(browser_desktop):
    screen = ScreenWatch(browser_desktop.info)
    yield screen
    screen.close()


def owned_file(info, text: str) -> Path:
    path = Path(info.home) / f"win-{uuid.uuid4().hex[:6]}.txt"
    path.write_text(text)
    os.chown(path, info.uid, info.gid)
    return path


@pytest.fixture
def editor(browser_desktop, wm):
    """A Mousepad window of its own (its own process) on a fresh file; closed after."""
    opened = []

    def open_one(text: str = "hello"):
        path = owned_file(browser_desktop.info, text)
        before = {(w.id, w.pid) for w in wm.windows()}  # X reuses a closed window's id
        spawn_app(browser_desktop.info, ["mousepad", "--disable-server", str(path)])
        window = wm.wait(lambda: next((w for w in wm.windows() if (w.id, w.pid) not in before
                                       and path.name in w.title), None), 30, path.name)
        opened.append(window.id)
        return window

    yield open_one
    for window_id in opened:
        try:
            wm.close_window(wm.find(id=window_id))
        except WindowGone:
            pass
    wm.wait(lambda: True if not set(opened) & {w.id for w in wm.windows()} else None, 15, "the close")


def settled(wm: WindowManager, window_id: int, check, timeout: float = 10.0):
    """The window's facts once `check(info)` holds (the window manager acts asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        info = wm.info(window_id)
        if info is not None and check(info):
            return info
        if time.monotonic() > deadline:
            return info
        time.sleep(0.05)


def test_move_resize_and_focus_change_what_the_window_list_reports(wm, editor):
    """Moving, resizing and focusing a window shows in the window list, as a person sees it."""
    first = editor("first")
    second = editor("second")
    wm.move_resize(wm.find(id=first.id), 100, 120, 500, 300)
    moved = settled(wm, first.id, lambda w: (w.width, w.height) == (500, 300) and abs(w.x - 100) < 20)
    assert (moved.width, moved.height) == (500, 300), moved
    assert abs(moved.x - 100) < 20 and abs(moved.y - 120) < 40, moved  # decorations offset the client
    def active_id():
        active = wm.active()
        return active and active.id

    wm.focus(wm.find(id=first.id))
    settled(wm, first.id, lambda w: active_id() == first.id)
    assert active_id() == first.id
    wm.focus(wm.find(id=second.id))
    settled(wm, second.id, lambda w: active_id() == second.id)
    assert active_id() == second.id


def test_minimize_and_maximize_show_in_the_window_states(wm, editor):
    """Minimized and maximized are states the window list reports, and focus brings a window back."""
    window = editor()
    wm.set_maximized(wm.find(id=window.id), True)
    assert "maximized" in settled(wm, window.id, lambda w: "maximized" in w.states).states
    wm.minimize(wm.find(id=window.id))
    assert "minimized" in settled(wm, window.id, lambda w: "minimized" in w.states).states
    wm.focus(wm.find(id=window.id))
    assert "minimized" not in settled(wm, window.id, lambda w: "minimized" not in w.states).states


def test_closed_window_is_gone_by_id_and_by_title(wm, editor):
    """Closing a window removes it; a step naming it afterwards says it is gone."""
    window = editor()
    wm.close_window(wm.find(id=window.id))
    wm.wait(lambda: True if window.id not in {w.id for w in wm.windows()} else None, 15, "the close")
    with pytest.raises(WindowGone, match=str(window.id)):
        wm.find(id=window.id)
    with pytest.raises(WindowGone, match="no window with a title"):
        wm.find(title=f"no such window {uuid.uuid4().hex}")


def _png(grab) -> Image.Image:
    return Image.open(io.BytesIO(grab.png)).convert("RGB")


def _difference(a: Image.Image, b: Image.Image) -> float:
    """Percent of pixels whose ink differs (dark text against light ground), so a focus tint of
    the background does not count."""
    ink_a = a.convert("L").point(lambda v: 255 if v < 128 else 0)
    ink_b = b.convert("L").point(lambda v: 255 if v < 128 else 0)
    return ImageStat.Stat(ImageChops.difference(ink_a, ink_b)).mean[0] / 255 * 100


def test_covered_window_captured_shows_its_own_content(wm, editor):
    """window.capture gives a window's own pixels even under another window."""
    below = editor(("BELOW " * 20 + "\n") * 30)
    wm.move_resize(wm.find(id=below.id), 50, 60, 600, 400)
    below = settled(wm, below.id, lambda w: (w.width, w.height) == (600, 400))
    time.sleep(0.5)
    alone = _png(wm.capture(wm.find(id=below.id)))
    above = editor(("#" * 100 + "\n") * 40)
    wm.move_resize(wm.find(id=above.id), 40, 50, 700, 500)
    settled(wm, above.id, lambda w: (w.width, w.height) == (700, 500))
    wm.focus(wm.find(id=above.id))
    time.sleep(0.5)
    covered = _png(wm.capture(wm.find(id=below.id)))
    top = _png(wm.capture(wm.find(id=above.id))).crop((0, 0, alone.width, alone.height))
    assert covered.size == alone.size == (600, 400)
    # Focus changes a few pixels (the caret, the selection colour); another window changes many.
    own, other = _difference(covered, alone), _difference(top, alone)
    assert own < 8 and other > 2 * own + 5, (own, other)


def test_launching_an_installed_app_returns_its_new_window(browser_desktop, wm):
    """apps.launch gives back the window that appeared, ready to act on."""
    window = launch_app(browser_desktop.info, wm, "xfce4-terminal", [], 30)
    try:
        assert window.wm_class.lower() == "xfce4-terminal", window
        assert window.width > 0 and window.height > 0
    finally:
        wm.close_window(wm.find(id=window.id))


def test_launching_an_unknown_app_is_refused_with_the_way_to_list_them(browser_desktop, wm):
    """A made-up app id starts nothing and says how to find the right one."""
    with pytest.raises(WindowError, match="apps.list"):
        launch_app(browser_desktop.info, wm, "no-such-app-" + uuid.uuid4().hex, [], 5)


def test_wait_stable_returns_after_an_animation_ends(run_page, pages_server, watch):
    """screen.waitStable waits out an animation and returns once it stops."""
    tab = f"anim-{uuid.uuid4().hex[:6]}"
    run = run_page([{"type": "navigate", "params": {"url": pages_server.url("/desktop_animation.html?ms=1500")}}],
                   tab=tab)
    assert not run.is_error, run.summary
    try:
        result = watch.wait_stable(400, 15_000)
        title = run_page([{"type": "evaluate", "params": {"script": "document.title"}}], tab=tab).result(1)
        assert title == "animation done", f"returned while still animating ({result})"
    finally:
        run_page([{"type": "evaluate", "params": {"script": "1"}}], tab=tab, close=True)


def test_wait_stable_times_out_with_a_clear_error_on_a_page_that_never_stops(run_page, pages_server, watch):
    """A screen that never settles fails the wait at its timeout, saying what to do."""
    tab = f"anim-{uuid.uuid4().hex[:6]}"
    run = run_page([{"type": "navigate", "params": {"url": pages_server.url("/desktop_animation.html?forever=1")}}],
                   tab=tab)
    assert not run.is_error, run.summary
    try:
        began = time.monotonic()
        with pytest.raises(WaitTimeout, match="kept changing for 1500 ms"):
            watch.wait_stable(500, 1500)
        assert time.monotonic() - began < 1.5 + 1
        # A region away from the animation is still.
        assert watch.wait_stable(300, 5000, Box(0, 0, 1280, 20))["quietMs"] == 300
    finally:
        run_page([{"type": "evaluate", "params": {"script": "1"}}], tab=tab, close=True)


def test_screen_change_is_seen_after_a_window_moves_and_not_when_idle(wm, editor, watch):
    """`changed` tells a step that did something on screen from one that did nothing."""
    window = editor("still")
    watch.wait_stable(500, 15_000)
    watch.mark()
    time.sleep(0.3)
    assert not watch.changed(), "an idle screen reported a change"
    wm.move_resize(wm.find(id=window.id), 300, 200, 400, 300)
    settled(wm, window.id, lambda w: (w.width, w.height) == (400, 300))
    assert watch.changed()
