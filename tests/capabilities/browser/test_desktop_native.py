"""desktop_execute's native steps through the real browser server over stdio: accessibility
trees, refs taken by clicks and actions, windows, apps, waits, captureAfter, and their refusals.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest


pytestmark = pytest.mark.desktop

EDITOR = "codedesk-test-editor"


@pytest.fixture(scope="module", autouse=True)
def own_editor_entry(browser_desktop, no_session_restore_prompt):
    """Mousepad without its restore prompt, and launched through an entry of the user's own."""
    info = browser_desktop.info
    # An editor of its own per launch (Mousepad otherwise hands files to a running instance,
    # which opens them as tabs): the desktop user's own .desktop entry, as a person could add.
    folder = Path(info.home) / ".local/share/applications"
    subprocess.run(["mkdir", "-p", str(folder)], user=info.uid, group=info.gid, extra_groups=[], check=True)
    entry = folder / f"{EDITOR}.desktop"
    entry.write_text("[Desktop Entry]\nType=Application\nName=Test editor\n"
                     "Exec=mousepad --disable-server %F\n")
    os.chown(entry, info.uid, info.gid)


@pytest.fixture
def desk(browser_server):
    """`desk(*steps)`: one desktop_execute call; returns (is_error, body, images)."""

    def run(*steps: dict):
        raw = browser_server.call("desktop_execute", {"operations": list(steps)})
        body = json.loads(raw.content[0].text)
        return bool(raw.is_error), body, [c for c in raw.content[1:] if c.type == "image"]

    return run


def owned(info, name: str, text: str = "") -> Path:
    path = Path(info.home) / name
    path.write_text(text)
    os.chown(path, info.uid, info.gid)
    return path


def close(desk, window_id: int) -> None:
    desk({"type": "window.close", "params": {"id": window_id}})


def test_mousepad_typed_and_saved_through_desktop_execute(browser_desktop, desk, session_exec):
    """The acceptance path: launch, find the text area, set its text by ref, save through the
    File menu found by name, and the file, read back through the exec server, has the text."""
    path = owned(browser_desktop.info, f"native-{uuid.uuid4().hex[:6]}.txt")
    failed, body, _ = desk({"type": "apps.launch", "params": {"id": EDITOR, "args": [str(path)]}})
    assert not failed, body
    window = body["results"][0]["result"]
    try:
        failed, body, _ = desk(
            {"type": "window.waitFor", "params": {"title": path.name}},
            {"type": "accessibility.tree", "params": {"window": window["id"]}},
            {"type": "accessibility.find", "params": {"role": "text", "window": window["id"]}},
        )
        assert not failed, body
        assert '[a_' in body["results"][1]["result"]["tree"]
        text_ref = body["results"][2]["result"]["elements"][0]["ref"]
        failed, body, _ = desk(
            {"type": "accessibility.act", "params": {"ref": text_ref, "action": "setValue", "value": "saved by ref\n"}},
            {"type": "accessibility.find", "params": {"role": "menu", "name": "File", "window": window["id"]}},
        )
        assert not failed, body
        file_ref = body["results"][1]["result"]["elements"][0]["ref"]
        failed, body, _ = desk(
            {"type": "accessibility.act", "params": {"ref": file_ref, "action": "expand"}},
            {"type": "accessibility.waitFor", "params": {"role": "menu item", "name": "Save As", "timeout": 5000}},
            {"type": "accessibility.find", "params": {"role": "menu item", "name": "Save", "window": window["id"]}},
        )
        assert not failed, body
        save = next(e for e in body["results"][2]["result"]["elements"] if e["name"] == "Save")
        failed, body, _ = desk({"type": "accessibility.act", "params": {"ref": save["ref"], "action": "press"}},
                               {"type": "screen.waitStable", "params": {"ms": 300, "timeout": 10000}})
        assert not failed, body
        deadline = time.monotonic() + 10
        while (text := session_exec.read_file(path)) != "saved by ref\n" and time.monotonic() < deadline:
            time.sleep(0.2)  # Mousepad writes the file from its own loop
        assert text == "saved by ref\n"
    finally:
        close(desk, window["id"])


def test_click_by_ref_lands_on_the_element_and_reports_the_change(browser_desktop, desk):
    """mouse.click {ref} aims at the element's centre; the entry says the screen changed and
    captureAfter attaches the screen after the click."""
    path = owned(browser_desktop.info, f"click-{uuid.uuid4().hex[:6]}.txt", "x")
    failed, body, _ = desk({"type": "apps.launch", "params": {"id": EDITOR, "args": [str(path)]}})
    assert not failed, body
    window = body["results"][0]["result"]
    try:
        failed, body, _ = desk({"type": "accessibility.find",
                                "params": {"role": "menu", "name": "Edit", "window": window["id"]}})
        edit = body["results"][0]["result"]["elements"][0]
        failed, body, images = desk(
            {"type": "mouse.click", "params": {"ref": edit["ref"]}, "captureAfter": True},
            {"type": "accessibility.waitFor", "params": {"role": "menu item", "name": "Select All", "timeout": 5000}},
            {"type": "keyboard.type", "params": {"keys": ["Escape"]}},
        )
        assert not failed, body
        click = body["results"][0]
        box = edit["box"]
        assert box["x"] <= click["result"]["x"] < box["x"] + box["width"]
        assert box["y"] <= click["result"]["y"] < box["y"] + box["height"]
        assert click["changed"] is True
        assert click["capture"]["image_index"] == 0 and len(images) == 1
    finally:
        close(desk, window["id"])


def test_keys_given_a_ref_go_to_that_element(browser_desktop, desk):
    """keyboard.type {ref, text} gives the element the focus first: typed while another
    editor's window is in front, the text lands in the first editor's text area only."""
    windows, paths = [], []
    try:
        for name in ("first", "second"):
            path = owned(browser_desktop.info, f"keys-{name}-{uuid.uuid4().hex[:6]}.txt")
            paths.append(path)
            failed, body, _ = desk({"type": "apps.launch", "params": {"id": EDITOR, "args": [str(path)]}})
            assert not failed, body
            windows.append(body["results"][0]["result"])
        first, second = windows

        def text_area(window: dict) -> dict:
            failed, body, _ = desk({"type": "accessibility.find", "params": {"role": "text", "window": window["id"]}})
            assert not failed, body
            return body["results"][0]["result"]["elements"][0]

        failed, body, _ = desk({"type": "window.focus", "params": {"id": second["id"]}},
                               {"type": "getActiveWindow"},
                               {"type": "keyboard.type", "params": {"ref": text_area(first)["ref"],
                                                                    "text": "typed by ref"}})
        assert not failed, body
        assert body["results"][1]["result"]["id"] == second["id"]  # the keys would have gone there
        deadline = time.monotonic() + 10
        while (value := text_area(first).get("value")) != "typed by ref" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert value == "typed by ref"
        assert not text_area(second).get("value")
        # Saved (Ctrl+S into the same element), so the editor closes without asking.
        failed, body, _ = desk({"type": "keyboard.type", "params": {"ref": text_area(first)["ref"],
                                                                    "keys": ["LeftControl", "S"]}})
        assert not failed, body
        deadline = time.monotonic() + 10
        while paths[0].read_text() != "typed by ref" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert paths[0].read_text() == "typed by ref"
    finally:
        for window in windows:
            close(desk, window["id"])


def test_window_steps_change_what_get_windows_reports(browser_desktop, desk):
    """window.move/resize/focus by id are what getWindows then reports."""
    path = owned(browser_desktop.info, f"win-{uuid.uuid4().hex[:6]}.txt")
    failed, body, _ = desk({"type": "apps.launch", "params": {"id": EDITOR, "args": [str(path)]}})
    assert not failed, body
    window = body["results"][0]["result"]
    try:
        failed, body, images = desk(
            {"type": "window.resize", "params": {"id": window["id"], "width": 420, "height": 330}},
            {"type": "window.move", "params": {"id": window["id"], "x": 200, "y": 150}},
            {"type": "window.focus", "params": {"title": path.name}},
            {"type": "window.capture", "params": {"id": window["id"]}},
            {"type": "getWindows"},
        )
        assert not failed, body
        listed = next(w for w in body["results"][4]["result"] if w["id"] == window["id"])
        assert (listed["width"], listed["height"]) == (420, 330)
        assert abs(listed["x"] - 200) < 20 and abs(listed["y"] - 150) < 40
        capture = body["results"][3]["result"]
        assert capture["width"] == 420 and len(images) == 1
        # The capture says where its pixels sit: the window's client area, on this screen.
        assert capture["origin"] == {"x": listed["x"], "y": listed["y"]} and capture["screen"] == body["screen"]
    finally:
        close(desk, window["id"])


def test_native_steps_refuse_unknown_fields_and_bad_refs_by_name(desk):
    """Bad input is refused before anything runs, naming the step and the field."""
    failed, body, _ = desk({"type": "accessibility.act", "params": {"ref": "a_1", "action": "press", "evil": 1}})
    assert failed and "unknown field 'params.evil'" in body["error"]["message"]
    failed, body, _ = desk({"type": "accessibility.act", "params": {"ref": "../../x", "action": "press"}})
    assert failed and "params.ref" in body["error"]["message"]
    failed, body, _ = desk({"type": "window.focus", "params": {}})
    assert failed and "give id or title" in body["error"]["message"]
    failed, body, _ = desk({"type": "mouse.click", "params": {"ref": "a_1", "x": 1, "y": 1}})
    assert failed and "one of them" in body["error"]["message"]
    failed, body, _ = desk({"type": "keyboard.type", "params": {"ref": "$(id)", "text": "x"}})
    assert failed and "params.ref" in body["error"]["message"] and body["results"] == []


def test_a_ref_never_given_out_and_a_vanished_window_fail_as_not_found(desk):
    """A ref the server never gave, or a window that is gone, fails the step with not_found."""
    failed, body, _ = desk({"type": "accessibility.act", "params": {"ref": "a_987654321", "action": "press"}})
    assert failed and body["error"]["kind"] == "not_found", body
    assert "read the screen again" in body["error"]["message"]
    failed, body, _ = desk({"type": "window.close", "params": {"id": 987654321}})
    assert failed and body["error"]["kind"] == "not_found", body
    failed, body, _ = desk({"type": "keyboard.type", "params": {"ref": "a_987654321", "text": "lost keys"}})
    assert failed and body["error"]["kind"] == "not_found", body  # typed nowhere, not where the focus was
    failed, body, _ = desk({"type": "apps.launch", "params": {"id": "rm -rf"}})
    assert failed and "params.id" in body["error"]["message"]


def test_thunar_file_found_by_name_and_its_context_menu_opened_by_ref(browser_desktop, desk):
    """A file manager's file is found by its name, and a right click by its ref opens the
    file's context menu (its items then readable by name)."""
    info = browser_desktop.info
    folder = Path(info.home) / f"files-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    os.chown(folder, info.uid, info.gid)
    for name in ("alpha.txt", "bravo.txt"):
        owned(info, f"{folder.name}/{name}", name)
    failed, body, _ = desk({"type": "apps.launch", "params": {"id": "thunar", "args": [str(folder)]}})
    assert not failed, body
    window = body["results"][0]["result"]
    try:
        # Thunar's icon view exposes no items to assistive technology: its detailed list does
        # (Ctrl+2, as a person switches views).
        failed, body, _ = desk(
            {"type": "window.focus", "params": {"id": window["id"]}},
            {"type": "keyboard.type", "params": {"keys": ["LeftControl", "Num2"]}},
            {"type": "accessibility.waitFor", "params": {"name": "bravo.txt", "window": window["id"],
                                                         "timeout": 15000}})
        assert not failed, body
        bravo = body["results"][2]["result"]
        assert bravo["name"] == "bravo.txt" and bravo["box"], bravo
        failed, body, _ = desk(
            {"type": "mouse.click", "params": {"ref": bravo["ref"], "button": "RIGHT"}},
            {"type": "accessibility.waitFor", "params": {"role": "menu item", "name": "Rename", "timeout": 10000}},
            {"type": "accessibility.find", "params": {"role": "menu item"}},
            {"type": "keyboard.type", "params": {"keys": ["Escape"]}},
        )
        assert not failed, body
        click = body["results"][0]["result"]
        box = bravo["box"]
        assert click["button"] == "RIGHT"
        assert box["x"] <= click["x"] < box["x"] + box["width"] and box["y"] <= click["y"] < box["y"] + box["height"]
        items = {e["name"] for e in body["results"][2]["result"]["elements"]}
        assert any(name.startswith("Open") for name in items), items
    finally:
        close(desk, window["id"])


def drawn(image, mark: dict, scale: float) -> bool:
    """Whether the mark's box is drawn in its colour along its left edge (image pixels)."""
    from capabilities.browser.desktop_coordinates import ImageSpace, scale_point
    from capabilities.browser.desktop_marks import COLORS

    box = mark["box"]
    x0, y0 = scale_point(box["x"], box["y"], ImageSpace(scale), to="image")
    _, y1 = scale_point(box["x"], box["y"] + box["height"], ImageSpace(scale), to="image")
    color = COLORS[mark["mark"] % len(COLORS)]
    return any(image.getpixel((x0, y)) == color for y in range(max(0, y0), min(image.height, y1)))


def test_native_marks_are_the_boxes_drawn_and_a_click_by_mark_opens_the_menu(browser_desktop, desk):
    """The acceptance on a native window: Mousepad's interactive elements are numbered with
    a_N refs inside its window, each listed box is drawn, a click by mark opens the Edit menu;
    once the window is gone, its marks fail as not_found."""
    import base64
    import io

    from PIL import Image

    path = owned(browser_desktop.info, f"marks-{uuid.uuid4().hex[:6]}.txt", "marks")
    failed, body, _ = desk({"type": "apps.launch", "params": {"id": EDITOR, "args": [str(path)]}})
    assert not failed, body
    window = body["results"][0]["result"]
    closed = False
    try:
        failed, body, images = desk(
            {"type": "window.focus", "params": {"id": window["id"]}},
            {"type": "screen.waitStable", "params": {"ms": 300, "timeout": 10000}},
            {"type": "screen.marks", "params": {"window": window["id"], "source": "accessibility"}})
        assert not failed, body
        result = body["results"][2]["result"]
        marks = result["marks"]
        assert marks and all(m["ref"].startswith("a_") for m in marks)
        window = body["results"][0]["result"]
        for m in marks:
            b = m["box"]
            assert window["x"] <= b["x"] and b["x"] + b["width"] <= window["x"] + window["width"], m
            assert window["y"] <= b["y"] and b["y"] + b["height"] <= window["y"] + window["height"], m
        image = Image.open(io.BytesIO(base64.b64decode(images[0].data))).convert("RGB")
        undrawn = [m for m in marks if not drawn(image, m, result["scale"])]
        assert not undrawn, undrawn
        edit = next(m for m in marks if m["role"] == "menu" and m["name"] == "Edit")
        failed, body, _ = desk(
            {"type": "mouse.click", "params": {"mark": edit["mark"]}},
            {"type": "accessibility.waitFor", "params": {"role": "menu item", "name": "Select All", "timeout": 5000}},
            {"type": "keyboard.type", "params": {"keys": ["Escape"]}})
        assert not failed, body
        failed, body, _ = desk({"type": "screen.marks", "params": {"window": window["id"], "source": "browser"}})
        assert failed and "not Chromium's" in body["error"]["message"], body
        failed, body, _ = desk({"type": "screen.marks", "params": {"window": window["id"]}})
        assert not failed, body
        close(desk, window["id"])
        closed = True
        failed, body, _ = desk({"type": "window.waitFor", "params": {"title": path.name, "state": "closed"}},
                               {"type": "mouse.click", "params": {"mark": 1}})
        assert failed and body["error"]["kind"] == "not_found" and body["error"]["step"] == 2, body
        assert "screen.marks again" in body["error"]["message"]
    finally:
        if not closed:
            close(desk, window["id"])
