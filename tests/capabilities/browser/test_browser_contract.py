"""Both tools of the browser server keep the one result contract, over stdio with the real SDK
client against the session's Chromium and display: structured content valid against the output
schema the server lists, on success and on failure; the text the spec prescribes (for
browser_execute a summary line, then the same object as JSON; for desktop_execute that object
as JSON); every image block referenced by exactly one `image_index`.

The walks run every operation of each tool: a new operation without a step here fails
`test_every_operation_is_walked`.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from pathlib import Path

import jsonschema
import pytest

from capabilities.contract import ERROR_KINDS
from tests.fixtures.contract import image_indices

TAB = "contract"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tools(browser_server) -> dict:
    return {tool.name: tool for tool in browser_server.list_tools()}


def check(tool, result) -> dict:
    """The contract, whatever the outcome; returns the structured content."""
    jsonschema.Draft202012Validator.check_schema(tool.output_schema)
    data = result.structured_content
    jsonschema.validate(data, tool.output_schema)
    assert result.content[0].type == "text"
    images = result.content[1:]
    assert all(block.type == "image" and block.mime_type == "image/png" for block in images)
    assert sorted(image_indices(data)) == list(range(len(images)))
    for block in images:
        assert base64.b64decode(block.data).startswith(PNG)
    text = result.content[0].text
    if tool.name == "browser_execute":
        summary, _, body = text.partition("\n")
        assert summary and "\n" not in summary
        assert json.loads(body) == data
    else:
        assert json.loads(text) == data
    if result.is_error:
        assert data["error"]["kind"] in ERROR_KINDS
    else:
        assert "error" not in data
        success = tool.output_schema["anyOf"][0]
        jsonschema.validate(data, {**success, "$defs": tool.output_schema.get("$defs", {})})
    return data


def step(kind: str, **params) -> dict:
    return {"type": kind, "params": params}


def browser_walk(pages_server, upload: Path) -> list[list[dict]]:
    """Every browser_execute operation with valid params, in two batches."""
    return [[
        step("navigate", url=pages_server.url("/browser_form.html")),
        step("url"),
        step("setViewport", width=1000, height=700),
        step("wait", ms=10),
        step("wait", selector="#name"),
        step("type", selector="#name", text="ab"),
        step("press", key="Tab"),
        step("click", selector="#count"),
        step("select", selector="#fruits", values=["apple"]),
        step("evaluate", script="({n: document.querySelector('#count').textContent})"),
        step("screenshot"),
        step("readPage"),
        step("find", query="name"),
        step("getText", format="markdown"),
        step("formInput", selector="#name", value="zz"),
        step("tabs"),
        step("console"),
        step("network"),
        step("dialog", action="accept"),
        step("hover", selector="#count"),
        step("doubleClick", selector="#count"),
        step("tripleClick", selector="#count"),
        step("rightClick", selector="#count"),
        step("middleClick", x=600, y=600),
        step("drag", **{"from": {"x": 600, "y": 600}, "to": {"x": 620, "y": 620}}),
        step("scroll", direction="down", amount=1),
        step("scrollTo", selector="#count"),
        step("key", text="Escape"),
        step("holdKey", text="Shift", duration=50),
        step("zoom", x0=0, y0=0, x1=200, y1=100),
    ], [
        step("navigate", url=pages_server.url("/browser_files.html")),
        step("upload", selector="#file", paths=[str(upload)]),
        step("download", selector="#get"),
        step("back"),
        step("forward"),
        step("reload"),
        step("setContent", html="<title>done</title><p>done</p>"),
        step("screenshot", fullPage=True),
    ]]


DESKTOP_WALK = [
    {"type": "mouse.setPosition", "params": {"x": 600, "y": 400}},
    {"type": "mouse.move", "params": {"x": 610, "y": 410}},
    {"type": "mouse.getPosition"},
    {"type": "mouse.click"},
    {"type": "mouse.doubleClick", "params": {"x": 600, "y": 400}},
    {"type": "mouse.pressButton"},
    {"type": "mouse.releaseButton"},
    {"type": "mouse.drag", "params": {"from": {"x": 600, "y": 400}, "to": {"x": 620, "y": 400}}},
    {"type": "mouse.scrollUp", "params": {"amount": 1}},
    {"type": "mouse.scrollDown", "params": {"amount": 1}},
    {"type": "mouse.scrollLeft", "params": {"amount": 1, "x": 600, "y": 400}},
    {"type": "mouse.scrollRight", "params": {"amount": 1}},
    {"type": "keyboard.type", "params": {"text": "a"}},
    {"type": "keyboard.type", "params": {"keys": ["Escape"]}},
    {"type": "keyboard.pressKey", "params": {"keys": ["LeftShift"]}},
    {"type": "keyboard.releaseKey", "params": {"keys": ["LeftShift"]}},
    {"type": "screen.width"},
    {"type": "screen.height"},
    {"type": "screen.grab"},
    {"type": "screen.grabRegion", "params": {"left": 10, "top": 10, "width": 30, "height": 20}},
    {"type": "screen.colorAt", "params": {"x": 5, "y": 5}},
    {"type": "getActiveWindow"},
    {"type": "getWindows"},
    {"type": "clipboard.setContent", "params": {"text": "contract"}},
    {"type": "clipboard.getContent"},
    {"type": "sleep", "params": {"ms": 1}},
    {"type": "screen.grab", "maxWidth": 640, "maxHeight": 640},
    {"type": "mouse.move", "params": {"x": 300, "y": 200}, "coordinateSpace": "image", "scale": 0.5},
]

# The native-window operations, walked on a terminal of their own in two calls (the second acts on
# a ref the first read): test_native_walk_matches_the_output_schema.
NATIVE_WALK = [
    {"type": "apps.list"},
    {"type": "apps.launch", "params": {"id": "xfce4-terminal"}},
    {"type": "window.waitFor", "params": {"class": "Xfce4-terminal"}},
    {"type": "window.resize", "params": {"title": "Terminal", "width": 500, "height": 300}},
    {"type": "window.move", "params": {"title": "Terminal", "x": 60, "y": 60}},
    {"type": "window.focus", "params": {"title": "Terminal"}, "captureAfter": True},
    {"type": "window.capture", "params": {"title": "Terminal"}},
    {"type": "screen.waitStable", "params": {"ms": 200, "timeout": 10000}},
    {"type": "accessibility.tree", "params": {"maxElements": 50}},
    {"type": "accessibility.waitFor", "params": {"role": "terminal", "timeout": 10000}},
    {"type": "screen.marks", "params": {"window": "Terminal"}, "scale": 0.5},
    {"type": "accessibility.find", "params": {"role": "terminal", "window": "Terminal"}},
]
NATIVE_ACT = [
    {"type": "accessibility.act", "params": {"ref": "REF", "action": "focus"}},
    {"type": "window.maximize", "params": {"title": "Terminal"}},
    {"type": "window.minimize", "params": {"title": "Terminal"}},
    {"type": "window.close", "params": {"title": "Terminal"}},
]


@pytest.fixture(scope="module")
def upload(browser_desktop):
    path = Path(browser_desktop.data_dir) / f"contract-{uuid.uuid4().hex[:6]}.txt"
    path.write_text("contract upload")
    yield path
    path.unlink(missing_ok=True)


def test_every_operation_is_walked(tools, pages_server, upload):
    """The walks below must cover every operation each tool lists, so each result type is checked."""
    for name, walked in (("browser_execute", [op["type"] for batch in browser_walk(pages_server, upload)
                                               for op in batch]),
                         ("desktop_execute", [op["type"] for op in DESKTOP_WALK + NATIVE_WALK + NATIVE_ACT])):
        listed = {v["properties"]["type"]["const"]
                  for v in tools[name].input_schema["properties"]["operations"]["items"]["oneOf"]}
        done = {v["properties"]["operation"]["const"]
                for v in tools[name].output_schema["anyOf"][0]["properties"]["results"]["items"]["oneOf"]}
        assert set(walked) == listed == done, name


def test_browser_walk_matches_the_output_schema(browser_server, tools, pages_server, upload, browser_desktop):
    """Every operation's result, as a script reads it, has the type the declarations promise."""
    tool = tools["browser_execute"]
    try:
        for batch in browser_walk(pages_server, upload):
            result = browser_server.call("browser_execute", {"operations": batch, "tab": TAB})
            assert not result.is_error, result.content[0].text[:2000]
            data = check(tool, result)
            assert [r["operation"] for r in data["results"]] == [op["type"] for op in batch]
            assert data["tab"] == TAB and data["url"]
        downloaded = Path(data["results"][2]["result"]["path"])
        assert downloaded.parent == Path(browser_desktop.info.downloads_dir)
    finally:
        browser_server.call("browser_execute", {"operations": [step("url")], "tab": TAB, "close": True})
    downloaded.unlink(missing_ok=True)


def test_browser_failures_keep_the_contract(browser_server, tools, pages_server):
    """Bad input and failing steps answer isError with the one error object, by the schema."""
    tool = tools["browser_execute"]
    form = step("navigate", url=pages_server.url("/browser_form.html"))

    def call(arguments: dict):
        result = browser_server.call("browser_execute", {"tab": TAB, **arguments})
        assert result.is_error, result.content[0].text
        return check(tool, result)

    unknown = call({"operations": [step("url")], "tabz": "x"})
    assert unknown["error"]["kind"] == "invalid_arguments" and "'tabz'" in unknown["error"]["message"]
    assert unknown["results"] == []

    bad_type = call({"operations": [step("url"), {"type": "clik", "params": {}}]})
    assert bad_type["error"] | {"message": ""} == {"kind": "invalid_arguments", "message": "", "step": 2,
                                                   "field": "type", "hint": bad_type["error"]["hint"]}

    bad_field = call({"operations": [step("url"), step("click", selector="#a", button="left")]})
    assert (bad_field["error"]["step"], bad_field["error"]["field"]) == (2, "params.button")

    missing = call({"operations": [form, step("evaluate", script="1"), step("wait", selector="#nope", ms=300)]})
    assert missing["error"]["kind"] == "not_found" and missing["error"]["step"] == 3
    assert missing["error"]["field"] == "params.selector"
    assert [r["success"] for r in missing["results"]] == [True, True, False]
    assert missing["results"][2]["screenshot"]["image_index"] == 0  # the moment it failed

    hidden = call({"operations": [form, step("wait", selector="#hidden", ms=300)]})
    assert hidden["error"]["kind"] == "timeout"

    refused = call({"operations": [step("url"), step("navigate", url="http://169.254.169.254/")]})
    assert refused["error"]["kind"] == "refused" and refused["error"]["step"] == 2
    assert refused["results"] == []

    thrown = call({"operations": [step("evaluate", script="missingFunction()")]})
    assert thrown["error"]["kind"] == "failed" and thrown["error"]["field"] == "params.script"


def test_desktop_walk_matches_the_output_schema(browser_server, tools):
    """Every desktop operation's result has the type the declarations promise (on a blank page,
    so the clicks and keys land nowhere that matters)."""
    tab = f"{TAB}-desktop"
    opened = browser_server.call("browser_execute", {
        "operations": [step("setContent", html="<title>contract blank</title><body style='height:100vh'>")],
        "tab": tab})
    assert not opened.is_error, opened.content[0].text
    try:
        result = browser_server.call("desktop_execute", {"operations": DESKTOP_WALK,
                                                         "config": {"mouseDelayMs": 0, "keyboardDelayMs": 0}})
        assert not result.is_error, result.content[0].text[:2000]
        data = check(tools["desktop_execute"], result)
    finally:
        browser_server.call("browser_execute", {"operations": [step("url")], "tab": tab, "close": True})
    assert [r["operation"] for r in data["results"]] == [op["type"] for op in DESKTOP_WALK]
    shot = data["results"][18]["result"]
    assert shot | {"at": 0} == {"image_index": 0, **data["screen"], "scale": 1, "at": 0,
                                "origin": {"x": 0, "y": 0}, "screen": data["screen"]}
    assert abs(shot["at"] / 1000 - time.time()) < 120  # taken during this call
    assert data["results"][24]["result"] == "contract"
    assert data["results"][26]["result"]["scale"] == 0.5 and data["results"][27]["result"] == {"x": 601, "y": 401}


def test_native_walk_matches_the_output_schema(browser_server, tools):
    """The native-window operations' results have the types the declarations promise."""
    result = browser_server.call("desktop_execute", {"operations": NATIVE_WALK})
    assert not result.is_error, result.content[0].text[:2000]
    data = check(tools["desktop_execute"], result)
    marks = data["results"][-2]["result"]
    assert marks["scale"] == 0.5 and all(m["ref"].startswith("a_") for m in marks["marks"])
    ref = data["results"][-1]["result"]["elements"][0]["ref"]
    acts = [{**op, "params": {**op["params"], "ref": ref}} if op["type"] == "accessibility.act" else op
            for op in NATIVE_ACT]
    result = browser_server.call("desktop_execute", {"operations": acts})
    assert not result.is_error, result.content[0].text[:2000]
    data = check(tools["desktop_execute"], result)
    assert [r["operation"] for r in data["results"]] == [op["type"] for op in NATIVE_ACT]


def test_desktop_failures_keep_the_contract(browser_server, tools, resize_screen):
    """Bad input, aim off the screen and a step failing at run time answer isError with the one
    error object, by the schema (a failing step with its screenshot)."""
    tool = tools["desktop_execute"]

    def call(arguments: dict):
        result = browser_server.call("desktop_execute", arguments)
        assert result.is_error, result.content[0].text
        return check(tool, result)

    unknown = call({"operations": [{"type": "mouse.getPosition"}], "confg": {}})
    assert unknown["error"]["kind"] == "invalid_arguments" and "'confg'" in unknown["error"]["message"]

    bad_type = call({"operations": [{"type": "mouse.getPosition"}, {"type": "mouse.teleport"}]})
    assert (bad_type["error"]["step"], bad_type["error"]["field"]) == (2, "type")

    bad_field = call({"operations": [{"type": "mouse.click", "params": {"buton": "LEFT"}}]})
    assert (bad_field["error"]["step"], bad_field["error"]["field"]) == (1, "params.buton")

    off = call({"operations": [{"type": "mouse.move", "params": {"x": 99999, "y": 1}}]})
    assert off["error"]["kind"] == "invalid_arguments" and off["error"]["field"] == "params.x"
    width, height = off["screen"]["width"], off["screen"]["height"]

    # The region is on the screen when the call is checked; the screen shrinks during the sleep.
    shrink = threading.Timer(1.0, resize_screen, (width - 256, height - 200))
    shrink.start()
    try:
        failed = call({"operations": [
            {"type": "sleep", "params": {"ms": 3000}},
            {"type": "screen.grabRegion", "params": {"left": width - 50, "top": height - 50, "width": 50,
                                                     "height": 50}},
        ]})
    finally:
        shrink.join()
        resize_screen(width, height)
        time.sleep(0.5)
    assert failed["error"]["kind"] == "failed" and failed["error"]["step"] == 2
    assert [r["success"] for r in failed["results"]] == [True, False]
    assert failed["results"][1]["screenshot"]["image_index"] == 0


def test_descriptions_promise_nothing_about_vision(tools):
    """In code mode images go to the script (which attaches one with artifact()): no tool may
    say they go into the model's vision context."""
    for tool in tools.values():
        assert "vision" not in tool.description.lower(), tool.name
