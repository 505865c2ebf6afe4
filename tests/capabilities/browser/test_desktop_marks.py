"""screen.marks on a web page, grabs scaled and zoomed, coordinates given in image pixels, and
scrollTo's screen box, through the real browser server against the session's Chromium: the
marks listed are the boxes drawn, and a click by mark, by image pixel or by screen box lands on
the element the page says was pressed.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest
from PIL import Image

from capabilities.browser.desktop_coordinates import ImageSpace, image_size, scale_point
from capabilities.browser.desktop_marks import COLORS

pytestmark = pytest.mark.desktop

TITLE = "desktop marks"


@pytest.fixture
def desk(browser_server):
    """`desk(*steps)`: one desktop_execute call; returns (is_error, body, images as PIL images)."""

    def run(*steps: dict):
        raw = browser_server.call("desktop_execute", {"operations": list(steps)})
        body = json.loads(raw.content[0].text)
        images = [Image.open(io.BytesIO(base64.b64decode(c.data))) for c in raw.content[1:] if c.type == "image"]
        return bool(raw.is_error), body, images

    return run


class MarksPage:
    """tests/pages/desktop_marks.html in a tab of its own, its window in front."""

    def __init__(self, run_page, desk, url: str) -> None:
        self.run_page, self.desk = run_page, desk
        self.tab = f"marks-{uuid.uuid4().hex[:8]}"
        run = run_page([{"type": "navigate", "params": {"url": url}}], tab=self.tab)
        assert not run.is_error, run.summary
        self.front()

    def front(self) -> None:
        failed, body, _ = self.desk({"type": "window.focus", "params": {"title": TITLE}},
                                    {"type": "screen.waitStable", "params": {"ms": 300, "timeout": 10000}})
        assert not failed, body

    def eval(self, script: str):
        run = self.run_page([{"type": "evaluate", "params": {"script": script}}], tab=self.tab)
        assert not run.is_error, run.summary
        return run.result(1)

    def clicked(self, timeout: float = 10.0) -> list[str]:
        """What the page saw pressed, once it saw anything (input reaches it asynchronously)."""
        deadline = time.monotonic() + timeout
        while not (seen := self.eval("window.clicked")) and time.monotonic() < deadline:
            time.sleep(0.1)
        return seen

    def close(self) -> None:
        self.run_page([{"type": "url", "params": {}}], tab=self.tab, close=True)


@pytest.fixture
def marks_page(run_page, desk, pages_server):
    page = MarksPage(run_page, desk, pages_server.url("/desktop_marks.html"))
    yield page
    page.close()


def drawn(image: Image.Image, mark: dict, scale: float) -> bool:
    """Whether the mark's box is drawn in its colour: its left edge, in image pixels, carries
    the colour somewhere along the box's height."""
    box = mark["box"]
    space = ImageSpace(scale)
    x0, y0 = scale_point(box["x"], box["y"], space, to="image")
    _, y1 = scale_point(box["x"], box["y"] + box["height"], space, to="image")
    color = COLORS[mark["mark"] % len(COLORS)]
    rgb = image.convert("RGB")
    return any(rgb.getpixel((x0, y)) == color for y in range(max(0, y0), min(rgb.height, y1)))


def test_page_marks_are_the_boxes_drawn_and_a_click_by_mark_lands(marks_page, desk):
    """The acceptance on a page: every interactive element a person sees is numbered, each box
    listed is drawn in the image, and mouse.click {mark} in a later call presses that element."""
    failed, body, images = desk({"type": "screen.marks", "params": {"window": TITLE, "source": "browser"}})
    assert not failed, body
    result = body["results"][0]["result"]
    marks = result["marks"]
    by_name = {m["name"]: m for m in marks}
    assert {"Alpha", "Bravo", "Charlie", "Your name", "More"} <= set(by_name), marks
    assert "Hidden" not in by_name
    assert [m["mark"] for m in marks] == list(range(1, len(marks) + 1))
    assert all(m["ref"].startswith("ref_") for m in marks)
    image = images[result["image_index"]]
    assert image.size == (result["width"], result["height"]) == (body["screen"]["width"], body["screen"]["height"])
    undrawn = [m for m in marks if not drawn(image, m, result["scale"])]
    assert not undrawn, undrawn
    # Alpha is left of Bravo on the same row: numbered in reading order.
    assert by_name["Alpha"]["mark"] < by_name["Bravo"]["mark"] < by_name["Charlie"]["mark"]

    failed, body, _ = desk({"type": "mouse.click", "params": {"mark": by_name["Bravo"]["mark"]}})
    assert not failed, body
    assert marks_page.clicked() == ["bravo"]
    box = by_name["Bravo"]["box"]
    click = body["results"][0]["result"]
    assert box["x"] <= click["x"] < box["x"] + box["width"] and box["y"] <= click["y"] < box["y"] + box["height"]


def test_whole_desktop_reads_leave_web_pages_to_a_read_naming_their_window(marks_page, desk):
    """A desktop-wide find searches the browser's interface but not its pages (a busy page is
    thousands of elements, a second to read); naming the window finds the page's button."""
    button = {"name": "Charlie", "role": "push button"}
    failed, body, _ = desk({"type": "accessibility.find", "params": button},
                           {"type": "accessibility.find", "params": {**button, "window": TITLE}},
                           {"type": "accessibility.find", "params": {"name": "Reload", "role": "push button"}})
    assert not failed, body
    desktop_wide, in_window, interface = (r["result"] for r in body["results"])
    assert desktop_wide["matches"] == 0, desktop_wide
    assert in_window["matches"] == 1 and in_window["elements"][0]["app"] == "Chromium", in_window
    assert interface["matches"] >= 1, interface
    failed, body, _ = desk({"type": "accessibility.waitFor", "params": {**button, "window": TITLE, "timeout": 5000}})
    assert not failed and body["results"][0]["result"]["name"] == "Charlie", body
    failed, body, _ = desk({"type": "accessibility.waitFor", "params": {**button, "timeout": 300}})
    assert failed and "a web page's elements: name its window" in body["error"]["message"], body


def test_a_page_naming_an_element_with_megabytes_gets_a_bounded_answer(desk, run_page):
    """A hostile page's 2 MB aria-label reaches the accessibility tree; the element's name is
    cut when read, so finds, trees and marks stay small."""
    tab, title = f"huge-{uuid.uuid4().hex[:6]}", f"huge name {uuid.uuid4().hex[:6]}"
    run = run_page([{"type": "setContent", "params": {"html": f"<title>{title}</title>"
                     "<button id=b>x</button><script>b.setAttribute('aria-label', 'A'.repeat(2e6))</script>"}}],
                   tab=tab)
    assert not run.is_error, run.summary
    try:
        failed, body, _ = desk(
            {"type": "window.waitFor", "params": {"title": title, "timeout": 15000}},  # Chromium retitles later
            {"type": "window.focus", "params": {"title": title}},
            {"type": "accessibility.find", "params": {"name": "AAAA", "role": "push button", "window": title}},
            {"type": "accessibility.tree", "params": {"window": title}},
            {"type": "screen.marks", "params": {"window": title, "source": "accessibility"}})
        assert not failed, body
        found = body["results"][2]["result"]["elements"]
        assert len(found) == 1 and found[0]["name"].startswith("AAAA") and len(found[0]["name"]) <= 1000, \
            body["results"][3]["result"]["tree"]
        assert max(len(line) for line in body["results"][3]["result"]["tree"].splitlines()) < 400
        assert len(json.dumps(body)) < 100_000
    finally:
        run_page([{"type": "url", "params": {}}], tab=tab, close=True)


def test_marks_of_both_sources_number_the_interface_and_the_page_once(marks_page, desk):
    """By default a Chromium window's marks are the browser's own interface (from its
    accessibility tree, a_N) and the page's elements (from the page, ref_N), none twice; a
    click by the mark of an interface element lands inside its box."""
    failed, body, _ = desk({"type": "screen.marks", "params": {"window": TITLE}})
    assert not failed, body
    marks = body["results"][0]["result"]["marks"]
    page = [m for m in marks if m["ref"].startswith("ref_")]
    interface = [m for m in marks if m["ref"].startswith("a_")]
    assert {"Alpha", "Bravo", "Charlie"} <= {m["name"] for m in page}, marks
    assert not {"Alpha", "Bravo", "Charlie"} & {m["name"] for m in interface}, marks
    reload = next((m for m in interface if m["name"] == "Reload"), None)
    assert reload is not None, interface
    assert all(m["box"]["y"] + m["box"]["height"] <= min(p["box"]["y"] for p in page) for m in interface
               if m["role"] == "push button" and m["name"] in ("Reload", "Back", "Forward"))
    failed, body, _ = desk({"type": "mouse.click", "params": {"mark": reload["mark"]}})
    assert not failed, body
    box, click = reload["box"], body["results"][0]["result"]
    assert box["x"] <= click["x"] < box["x"] + box["width"] and box["y"] <= click["y"] < box["y"] + box["height"]


def test_marks_drawn_on_a_half_size_image_match_their_list(marks_page, desk):
    """maxWidth shrinks the marked image; the boxes are drawn where the list says, scaled (the
    page's marks: the browser's own tab strip, its buttons nested and crowded, would hide
    some boxes' edges under their neighbours' labels)."""
    failed, body, images = desk({"type": "screen.marks", "params": {"window": TITLE, "source": "browser"},
                                 "maxWidth": 640})
    assert not failed, body
    result = body["results"][0]["result"]
    assert result["width"] == 640 and result["scale"] == pytest.approx(640 / body["screen"]["width"])
    assert images[0].size == (result["width"], result["height"])
    undrawn = [m for m in result["marks"] if not drawn(images[0], m, result["scale"])]
    assert not undrawn, undrawn


def test_coordinates_in_a_half_size_image_land_on_the_right_element(marks_page, desk, run_page):
    """A point read off a half-size grab, given with coordinateSpace "image" and the grab's
    scale, is mapped back to the screen and presses the element under it."""
    failed, body, images = desk({"type": "screen.grab", "scale": 0.5})
    assert not failed, body
    shot = body["results"][0]["result"]
    assert shot["scale"] == 0.5 and images[0].size == (shot["width"], shot["height"])
    assert shot["origin"] == {"x": 0, "y": 0} and shot["screen"] == body["screen"]
    assert (shot["width"], shot["height"]) == (body["screen"]["width"] // 2, body["screen"]["height"] // 2)
    charlie = run_page([{"type": "scrollTo", "params": {"selector": "#charlie"}}], tab=marks_page.tab).result(1)
    box = charlie["screenBox"]
    x, y = scale_point(box["x"] + box["width"] // 2, box["y"] + box["height"] // 2, ImageSpace(0.5), to="image")
    marks_page.front()
    failed, body, _ = desk({"type": "mouse.click", "params": {"x": x, "y": y}, "coordinateSpace": "image",
                            "scale": 0.5})
    assert not failed, body
    assert marks_page.clicked() == ["charlie"]
    click = body["results"][0]["result"]
    assert box["x"] <= click["x"] < box["x"] + box["width"] and box["y"] <= click["y"] < box["y"] + box["height"]


def test_coordinates_in_a_half_size_region_grab_land_on_the_right_element(marks_page, desk, run_page):
    """A region grab says where its pixels sit (origin) and the screen's size; a point read off it
    at half size, given with its scale and origin, presses the element under it."""
    box = run_page([{"type": "scrollTo", "params": {"selector": "#charlie"}}], tab=marks_page.tab).result(1)["screenBox"]
    marks_page.front()
    left, top = max(0, box["x"] - 30), max(0, box["y"] - 20)
    width, height = box["width"] + 60, box["height"] + 40
    failed, body, images = desk({"type": "screen.grabRegion", "scale": 0.5,
                                 "params": {"left": left, "top": top, "width": width, "height": height}})
    assert not failed, body
    shot = body["results"][0]["result"]
    assert shot["origin"] == {"x": left, "y": top} and shot["screen"] == body["screen"]
    assert images[0].size == (shot["width"], shot["height"]) == image_size(width, height, 0.5)
    x, y = scale_point(box["x"] + box["width"] // 2, box["y"] + box["height"] // 2,
                       ImageSpace(0.5, left, top), to="image")
    assert 0 <= x < shot["width"] and 0 <= y < shot["height"]
    failed, body, _ = desk({"type": "mouse.click", "params": {"x": x, "y": y}, "coordinateSpace": "image",
                            "scale": shot["scale"], "origin": shot["origin"]})
    assert not failed, body
    assert marks_page.clicked() == ["charlie"]
    click = body["results"][0]["result"]
    assert box["x"] <= click["x"] < box["x"] + box["width"] and box["y"] <= click["y"] < box["y"] + box["height"]


def test_chromium_interface_and_page_are_in_the_accessibility_tree(marks_page, desk):
    """The session turns Chromium's accessibility on: its window's tree holds the browser's own
    interface (the address bar showing the page's address, Reload) and the page's elements, and a
    page button pressed by ref through accessibility.act, without the pointer, is activated."""
    failed, body, _ = desk(
        {"type": "accessibility.tree", "params": {"window": TITLE, "maxElements": 2000}},
        {"type": "accessibility.find", "params": {"name": "Bravo", "role": "push button", "window": TITLE}})
    assert not failed, body
    tree = body["results"][0]["result"]["tree"]
    assert re.search(r'entry "Address and search bar" \[a_\d+\] .*value="[^"]*desktop_marks\.html', tree), tree
    assert re.search(r'push button "Reload" \[a_\d+\]', tree), tree
    assert re.search(r'push button "Charlie" \[a_\d+\]', tree), tree
    bravo = body["results"][1]["result"]["elements"][0]
    failed, body, _ = desk({"type": "mouse.getPosition"},
                           {"type": "accessibility.act", "params": {"ref": bravo["ref"], "action": "press"}},
                           {"type": "mouse.getPosition"})
    assert not failed, body
    deadline = time.monotonic() + 10
    while not (activated := marks_page.eval("window.activated")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert activated == ["bravo"]
    assert body["results"][0]["result"] == body["results"][2]["result"]  # the pointer stayed put


def test_scroll_to_reports_the_screen_box_a_desktop_click_lands_in(marks_page, desk, run_page):
    """browser_execute gives an element's box in screen pixels; desktop_execute clicking its
    centre presses that element (the route to what the page cannot reach)."""
    box = run_page([{"type": "scrollTo", "params": {"selector": "#alpha"}}], tab=marks_page.tab).result(1)["screenBox"]
    assert set(box) == {"x", "y", "width", "height"} and (box["width"], box["height"]) == (140, 48)
    marks_page.front()
    failed, body, _ = desk({"type": "mouse.click", "params": {"x": box["x"] + 70, "y": box["y"] + 24}})
    assert not failed, body
    assert marks_page.clicked() == ["alpha"]


def test_the_browsers_file_chooser_is_driven_from_the_desktop(browser_desktop, desk, run_page):
    """What the page cannot reach: a click at the file input's screen box opens Chromium's own
    file chooser, and the keyboard (LeftControl+L, the path, LeftAlt+O, as the tool's
    description says) picks a file the page then holds."""
    info = browser_desktop.info
    name = f"chosen-{uuid.uuid4().hex[:6]}.txt"
    path = Path(info.home) / name
    path.write_text("chosen from the desktop\n")
    os.chown(path, info.uid, info.gid)
    tab, title = f"chooser-{uuid.uuid4().hex[:6]}", f"chooser {uuid.uuid4().hex[:6]}"
    run = run_page([{"type": "setContent", "params": {"html": f"<title>{title}</title><input type=file id=f>"}},
                    {"type": "scrollTo", "params": {"selector": "#f"}}], tab=tab)
    assert not run.is_error, run.summary
    box = run.result(2)["screenBox"]
    try:
        failed, body, _ = desk(
            {"type": "window.waitFor", "params": {"title": title, "timeout": 15000}},  # Chromium retitles later
            {"type": "window.focus", "params": {"title": title}},
            {"type": "mouse.click", "params": {"x": box["x"] + 20, "y": box["y"] + box["height"] // 2}},
            {"type": "window.waitFor", "params": {"title": "Open File", "timeout": 15000}},
            {"type": "keyboard.type", "params": {"keys": ["LeftControl", "L"]}},
            {"type": "keyboard.type", "params": {"text": str(path)}},
            {"type": "keyboard.type", "params": {"keys": ["LeftAlt", "O"]}},
            {"type": "window.waitFor", "params": {"title": "Open File", "state": "closed", "timeout": 15000}})
        assert not failed, body
        deadline = time.monotonic() + 10
        script = "document.querySelector('#f').files[0]?.name ?? null"
        while (chosen := run_page([{"type": "evaluate", "params": {"script": script}}], tab=tab).result(1)) != name \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert chosen == name
    finally:
        desk({"type": "window.close", "params": {"title": "Open File"}})  # after a failure: not left open
        run_page([{"type": "url", "params": {}}], tab=tab, close=True)


def test_a_zoomed_grab_is_larger_and_an_absurd_one_is_refused(desk):
    """scale > 1 zooms a region; a zoom past the pixel limit is refused before anything runs."""
    failed, body, images = desk({"type": "screen.grabRegion", "params": {"left": 10, "top": 10, "width": 100,
                                                                          "height": 50}, "scale": 3})
    assert not failed, body
    assert images[0].size == (300, 150) and body["results"][0]["result"]["scale"] == 3
    failed, body, _ = desk({"type": "mouse.move", "params": {"x": 5, "y": 5}},
                           {"type": "screen.grab", "scale": 4})
    assert failed and body["error"]["kind"] == "invalid_arguments" and body["error"]["step"] == 2, body
    assert "zoom into a smaller region" in body["error"]["message"] and body["results"] == []


@pytest.mark.parametrize("step, says", [
    ({"type": "screen.grab", "scale": 0}, "greater than or equal to 0.01"),
    ({"type": "screen.grab", "scale": 1000}, "less than or equal to 4"),
    ({"type": "screen.grab", "maxWidth": 2}, "greater than or equal to 16"),
    ({"type": "keyboard.type", "params": {"text": "a"}, "scale": 0.5}, "takes none"),
    ({"type": "mouse.click", "params": {"x": 1, "y": 1}, "coordinateSpace": "image"}, "needs scale"),
    ({"type": "mouse.click", "coordinateSpace": "image", "scale": 0.5}, "gives none"),
    ({"type": "mouse.click", "params": {"x": 1, "y": 1}, "coordinateSpace": "image", "scale": 0.5,
      "maxWidth": 100}, "scale alone"),
    ({"type": "mouse.click", "params": {"x": 1, "y": 1}, "coordinateSpace": "pixels"}, "coordinateSpace"),
    ({"type": "mouse.click", "params": {"mark": 0}}, "params.mark"),
    ({"type": "mouse.click", "params": {"mark": 3, "x": 1, "y": 1}}, "one of them"),
    ({"type": "screen.marks", "params": {"sourc": "browser"}}, "unknown field 'params.sourc'"),
    ({"type": "screen.marks", "params": {"source": "ocr"}}, "params.source"),
    ({"type": "screen.marks", "origin": {"x": 1, "y": 1}}, 'give it with coordinateSpace "image"'),
    ({"type": "mouse.click", "params": {"x": 1, "y": 1}, "coordinateSpace": "image", "scale": 0.5,
      "origin": {"x": 1}}, "missing field 'origin.y'"),
    ({"type": "mouse.click", "params": {"x": 1, "y": 1}, "scale": 0.5, "origin": {"x": 1, "y": 1}},
      'give it with coordinateSpace "image"'),
])
def test_bad_image_and_mark_fields_are_refused_by_name(desk, step, says):
    """Each hostile field is refused before anything runs, with a message naming it."""
    failed, body, _ = desk({"type": "mouse.getPosition"}, step)
    assert failed and body["error"]["kind"] == "invalid_arguments", body
    assert body["error"]["step"] == 2 and says in body["error"]["message"], body["error"]["message"]
    assert body["results"] == []


def test_image_coordinates_off_the_screen_after_mapping_are_refused(desk):
    """A point inside the image's numbers but outside the screen once mapped is refused by field."""
    failed, body, _ = desk({"type": "screen.width"})
    width = body["results"][0]["result"]
    failed, body, _ = desk({"type": "mouse.click", "params": {"x": width // 2 + 10, "y": 5},
                            "coordinateSpace": "image", "scale": 0.5})
    assert failed and body["error"]["kind"] == "invalid_arguments", body
    assert body["error"]["field"] == "params.x" and "mapped from image pixels at scale 0.5" in body["error"]["message"]


def test_unknown_and_stale_marks_fail_as_not_found(marks_page, desk, run_page):
    """A mark number the last list did not give, or whose element left the page, fails the step
    with not_found and says to take the marks again."""
    failed, body, _ = desk({"type": "screen.marks", "params": {"window": TITLE, "source": "browser"}})
    assert not failed, body
    marks = body["results"][0]["result"]["marks"]
    failed, body, _ = desk({"type": "mouse.click", "params": {"mark": len(marks) + 1}})
    assert failed and body["error"]["kind"] == "not_found", body
    assert f"numbered 1 to {len(marks)}" in body["error"]["message"]
    run = run_page([{"type": "setContent", "params": {"html": "<title>desktop marks</title><p>gone</p>"}}],
                   tab=marks_page.tab)
    assert not run.is_error, run.summary
    failed, body, _ = desk({"type": "mouse.click", "params": {"mark": marks[0]["mark"]}})
    assert failed and body["error"]["kind"] == "not_found", body
    assert "no longer" in body["error"]["message"] and "screen.marks again" in body["error"]["message"]
    assert body["results"][0]["screenshot"]["scale"] == 1
