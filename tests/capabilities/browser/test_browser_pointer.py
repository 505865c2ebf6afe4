"""Pointer and keys beyond click/type/press: hover, multi-clicks, other buttons, modifiers,
x/y points, drag, scroll, scrollTo, key chords, holdKey, zoom."""

from __future__ import annotations

import struct
import uuid

TAB = "pointer"


def nav(url: str) -> dict:
    return {"type": "navigate", "params": {"url": url}}


def ev(script: str) -> dict:
    return {"type": "evaluate", "params": {"script": script}}


def test_hover_and_the_click_family(run_page, pages_server):
    """hover enters, doubleClick/tripleClick give click counts, rightClick opens the context menu,
    middleClick is button 1, and modifiers are held during the click."""
    run = run_page([
        nav(pages_server.url("/browser_pointer.html")),
        {"type": "hover", "params": {"selector": "#target"}},
        {"type": "doubleClick", "params": {"selector": "#target"}},
        {"type": "rightClick", "params": {"selector": "#target"}},
        {"type": "middleClick", "params": {"selector": "#target"}},
        {"type": "doubleClick", "params": {"x": 150, "y": 120, "modifiers": ["Shift"]}},
        ev("events"),
        {"type": "tripleClick", "params": {"selector": "#para"}},
        ev("getSelection().toString().trim()"),
    ], tab=TAB)
    assert not run.is_error, run.summary
    events = run.result(7)
    assert events[0] == "enter"
    assert events[1:4] == ["click:1:", "click:2:", "dblclick"]
    assert "contextmenu" in events and "auxclick:1" in events
    assert events[-3:] == ["click:1:shift", "click:2:shift", "dblclick"]
    assert run.result(9) == "one two three"


def test_drag_moves_the_knob(run_page, pages_server):
    """drag presses on the knob, moves and releases at a point further along the track."""
    run = run_page([nav(pages_server.url("/browser_pointer.html")),
                    {"type": "drag", "params": {"from": {"selector": "#knob"}, "to": {"x": 400, "y": 230}}},
                    ev("parseInt(getComputedStyle(document.querySelector('#knob')).left)")], tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(2)["to"] == {"x": 400, "y": 230}
    assert 280 <= run.result(3) <= 300  # 400 - 100 (track) - 10 (half the knob)


def test_scroll_and_scroll_to(run_page, pages_server):
    """scroll turns the wheel by notches of 100 px; scrollTo brings an element into view."""
    run = run_page([nav(pages_server.url("/browser_pointer.html")),
                    {"type": "scroll", "params": {"direction": "down", "amount": 5}},
                    {"type": "scroll", "params": {"direction": "up", "amount": 2, "x": 50, "y": 50}},
                    {"type": "scrollTo", "params": {"selector": "#far"}},
                    ev("(r => r.top >= 0 && r.bottom <= innerHeight)(document.querySelector('#far').getBoundingClientRect())")],
                   tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(2)["scrollY"] == 500
    assert run.result(3)["scrollY"] == 300
    assert run.result(5) is True


def test_key_chords_sequences_and_repeat(run_page, pages_server):
    """key takes friendly chord names and space-separated sequences; repeat presses again."""
    run = run_page([nav(pages_server.url("/browser_pointer.html")),
                    {"type": "click", "params": {"selector": "#field"}},
                    {"type": "key", "params": {"text": "ctrl+a Delete"}},
                    {"type": "type", "params": {"selector": "#field", "text": "abc"}},
                    {"type": "key", "params": {"text": "Backspace", "repeat": 2}},
                    ev("document.querySelector('#field').value")], tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(3) == {"pressed": ["Control+a", "Delete"], "repeat": 1}
    assert run.result(6) == "a"


def test_hold_key_holds_for_the_duration(run_page, pages_server):
    """holdKey presses, waits, then releases: the page sees keyup well after keydown (half the
    duration at least: a busy machine may deliver the keydown late)."""
    run = run_page([nav(pages_server.url("/browser_pointer.html")),
                    {"type": "holdKey", "params": {"text": "shift", "duration": 600}},
                    ev("keys.filter(k => k[1] === 'Shift').map(k => [k[0], k[3]])")], tab=TAB)
    assert not run.is_error, run.summary
    (down, t0), (up, t1) = run.result(3)[0], run.result(3)[-1]
    assert (down, up) == ("down", "up") and t1 - t0 >= 300


def test_zoom_attaches_an_enlarged_region(run_page, pages_server):
    """zoom attaches a PNG of the region, enlarged (at most 4x)."""
    run = run_page([nav(pages_server.url("/browser_pointer.html")),
                    {"type": "zoom", "params": {"x0": 100, "y0": 100, "x1": 300, "y1": 160}}], tab=TAB)
    assert not run.is_error, run.summary
    shot = run.result(2)
    assert shot["region"] == {"x": 100, "y": 100, "width": 200, "height": 60}
    assert (shot["width"], shot["height"]) == (800, 240)
    assert struct.unpack(">II", run.images[0][16:24]) == (800, 240)


def test_keys_reach_a_page_in_a_tab_just_opened(run_page, pages_server):
    """A new tab's window starts with the focus in the browser's own interface; press and key
    must still reach the page, keydown included."""
    tab = f"fresh-{uuid.uuid4().hex[:8]}"
    run = run_page([nav(pages_server.url("/browser_pointer.html")),
                    {"type": "press", "params": {"key": "b"}},
                    {"type": "key", "params": {"text": "c"}},
                    ev("keys.filter(k => k[1] === 'b' || k[1] === 'c').map(k => k[0] + k[1])")],
                   tab=tab, close=True)
    assert not run.is_error, run.summary
    assert run.result(4) == ["downb", "upb", "downc", "upc"]
