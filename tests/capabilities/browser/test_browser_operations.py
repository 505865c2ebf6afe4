"""browser_execute: each of the eleven operations against local pages in the session's Chromium."""

from __future__ import annotations

import struct

import pytest

TAB = "ops"


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def nav(url: str) -> dict:
    return {"type": "navigate", "params": {"url": url}}


def ev(script: str) -> dict:
    return {"type": "evaluate", "params": {"script": script}}


def test_navigate_reports_url_and_status(run_page, pages_server):
    """navigate loads the page and says where it landed and with what HTTP status."""
    url = pages_server.url("/browser_form.html")
    run = run_page([nav(url), ev("document.title")], tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(1) == {"url": url, "title": "browser form", "status": 200}
    assert run.result(2) == "browser form"
    assert run.summary.startswith("ok: 2 of 2 steps succeeded") and url in run.summary and '"ops"' in run.summary


def test_navigate_waits_for_the_requested_load_state(run_page, pages_server):
    """waitUntil 'load' waits for the load event, not only the DOM."""
    run = run_page(
        [{"type": "navigate", "params": {"url": pages_server.url("/browser_tall.html"), "waitUntil": "load"}},
         ev("document.readyState")],
        tab=TAB,
    )
    assert not run.is_error, run.summary
    assert run.result(2) == "complete"


def test_wait_by_time_sleeps_the_given_ms(run_page):
    """wait {ms} pauses the batch for that long (measured by the page's own clock)."""
    run = run_page([ev("performance.now()"), {"type": "wait", "params": {"ms": 400}}, ev("performance.now()")], tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(2) == {"waited_ms": 400}
    assert run.result(3) - run.result(1) >= 390


def test_wait_by_selector_waits_until_visible(run_page, pages_server):
    """wait {selector} returns once an element that appears later becomes visible."""
    run = run_page(
        [nav(pages_server.url("/browser_form.html")),
         {"type": "click", "params": {"selector": "#reveal"}},
         {"type": "wait", "params": {"selector": "#late"}},
         ev("getComputedStyle(document.querySelector('#late')).display")],
        tab=TAB,
    )
    assert not run.is_error, run.summary
    assert run.result(3) == {"selector": "#late", "visible": True}
    assert run.result(4) == "block"


def test_wait_by_selector_gives_up_after_ms(run_page, pages_server):
    """wait {selector, ms} fails after ms when the element stays hidden, saying so."""
    run = run_page(
        [nav(pages_server.url("/browser_form.html")), {"type": "wait", "params": {"selector": "#hidden", "ms": 300}}],
        tab=TAB,
    )
    assert run.is_error
    failed = run.results[1]
    assert failed["success"] is False
    assert "'#hidden'" in failed["error"] and "0.3 s" in failed["error"] and "visible" in failed["error"]


def test_click_clicks_the_element(run_page, pages_server):
    """click runs the element's handler (twice = counter at 2)."""
    run = run_page(
        [nav(pages_server.url("/browser_form.html")),
         {"type": "click", "params": {"selector": "#count"}},
         {"type": "click", "params": {"selector": "text=1"}},
         ev("document.querySelector('#count').textContent")],
        tab=TAB,
    )
    assert not run.is_error, run.summary
    assert run.result(4) == "2"


def test_type_with_delay_types_key_by_key(run_page, pages_server):
    """type clicks the field, then types each key with the given delay between them."""
    run = run_page(
        [nav(pages_server.url("/browser_form.html")),
         {"type": "type", "params": {"selector": "#name", "text": "abcd", "delay": 80}},
         ev("({value: document.querySelector('#name').value, focused: document.activeElement.id,"
            " gaps: keyTimes.slice(1).map((t, i) => t - keyTimes[i])})")],
        tab=TAB,
    )
    assert not run.is_error, run.summary
    typed = run.result(3)
    assert typed["value"] == "abcd" and typed["focused"] == "name"
    # 3 gaps of 80 ms; a busy machine may deliver one key late, so check the whole span
    assert len(typed["gaps"]) == 3 and sum(typed["gaps"]) >= 200


def test_press_enter_submits_the_form(run_page, pages_server):
    """press sends a Playwright key to the focused element (Enter submits)."""
    run = run_page(
        [nav(pages_server.url("/browser_form.html")),
         {"type": "type", "params": {"selector": "#name", "text": "zoe"}},
         {"type": "press", "params": {"key": "Enter"}},
         {"type": "wait", "params": {"selector": "#q"}},
         {"type": "url", "params": {}}],
        tab=TAB,
    )
    assert not run.is_error, run.summary
    assert run.result(3) == {"pressed": "Enter"}
    assert "/echo?name=zoe" in run.result(5)["url"] and run.result(5)["title"] == "echo"


def test_select_several_values(run_page, pages_server):
    """select picks several options of a multiple <select>, by value or label."""
    run = run_page(
        [nav(pages_server.url("/browser_form.html")),
         {"type": "select", "params": {"selector": "#fruits", "values": ["apple", "Cherry"]}},
         ev("[...document.querySelector('#fruits').selectedOptions].map(o => o.value)")],
        tab=TAB,
    )
    assert not run.is_error, run.summary
    assert sorted(run.result(2)["selected"]) == ["apple", "cherry"]
    assert run.result(3) == ["apple", "cherry"]


def test_evaluate_returns_objects_and_awaits_promises(run_page):
    """evaluate returns structured values and awaits a promise the script returns."""
    run = run_page(
        [ev("({n: 1, s: 'x', list: [true, null], nested: {k: 2.5}})"),
         ev("new Promise(resolve => setTimeout(() => resolve({late: 'yes'}), 200))"),
         ev("async () => { await new Promise(r => setTimeout(r, 50)); return 6 * 7 }")],
        tab=TAB,
    )
    assert not run.is_error, run.summary
    assert run.result(1) == {"n": 1, "s": "x", "list": [True, None], "nested": {"k": 2.5}}
    assert run.result(2) == {"late": "yes"}
    assert run.result(3) == 42


def test_screenshot_viewport_and_full_page(run_page, pages_server):
    """screenshot attaches PNGs; fullPage covers the whole 3000 px tall page, and each step's
    result points at its image with the image's size."""
    run = run_page(
        [nav(pages_server.url("/browser_tall.html")),
         {"type": "screenshot", "params": {}},
         {"type": "screenshot", "params": {"fullPage": True}},
         ev("[innerWidth, innerHeight]")],
        tab=TAB,
    )
    assert not run.is_error, run.summary
    assert len(run.images) == 2
    view, full = run.result(2), run.result(3)
    assert view["image_index"] == 0 and full["image_index"] == 1
    assert png_size(run.images[0]) == (view["width"], view["height"])
    assert png_size(run.images[1]) == (full["width"], full["height"])
    width, height = run.result(4)
    assert (view["width"], view["height"]) == (width, height)
    assert full["height"] >= 3000 > view["height"]


def test_url_after_a_redirect(run_page, pages_server):
    """url reports where a redirect landed, with the page's title."""
    run = run_page([nav(pages_server.url("/redirect?to=/index.html")), {"type": "url", "params": {}}], tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(2) == {"url": pages_server.url("/index.html"), "title": "index"}
    assert run.body["url"] == pages_server.url("/index.html")


@pytest.mark.parametrize("size", [(320, 200), (3840, 2160), (800, 600)])
def test_set_viewport_within_bounds(run_page, size):
    """setViewport accepts 320x200 up to 3840x2160 and the page sees that size."""
    width, height = size
    run = run_page(
        [{"type": "setViewport", "params": {"width": width, "height": height}}, ev("[innerWidth, innerHeight]")],
        tab="viewport",
    )
    assert not run.is_error, run.summary
    assert run.result(2) == [width, height]


@pytest.mark.parametrize("size", [(319, 200), (320, 199), (3841, 2160), (3840, 2161)])
def test_set_viewport_out_of_bounds_is_refused(run_page, size):
    """A viewport outside 320x200..3840x2160 is refused before running, naming the field."""
    width, height = size
    run = run_page([{"type": "setViewport", "params": {"width": width, "height": height}}], tab="viewport")
    assert run.is_error and run.results == []
    field = "width" if width in (319, 3841) else "height"
    assert f"step 1 (setViewport): field 'params.{field}'" in run.summary


def test_set_content_replaces_the_page(run_page):
    """setContent replaces the document; later steps act on the new content."""
    run = run_page(
        [{"type": "setContent", "params": {"html": "<title>fresh</title><button id=b onclick=\"this.textContent='done'\">go</button>"}},
         {"type": "click", "params": {"selector": "#b"}},
         ev("[document.title, document.querySelector('#b').textContent]")],
        tab=TAB,
    )
    assert not run.is_error, run.summary
    assert run.result(3) == ["fresh", "done"]
