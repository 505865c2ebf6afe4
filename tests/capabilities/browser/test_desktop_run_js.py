"""desktop_execute called from scripts through the runtime (`run_js`, `run_py`)."""

from __future__ import annotations

import base64
import io
import json

from PIL import Image

GRAB = """
const r = await mcp.callTool("browser", "desktop_execute", {
  operations: [{ type: "screen.width" }, { type: "screen.height" }, { type: "screen.grab" }],
});
const body = JSON.parse(r.content[0].text);
"""


def test_a_screenshot_stays_in_the_script_unless_attached(desktop_runtime):
    """The script gets the PNG; the model sees it only when the script calls artifact()."""
    kept = desktop_runtime.run_js(GRAB + """
console.log(JSON.stringify({ blocks: r.content.map((c) => c.type), mime: r.content[1].mimeType,
                             shot: body.results[2].result, screen: body.screen }));
""")
    assert not kept.is_error, kept.text
    assert kept.images == []
    seen = json.loads(kept.text.strip().splitlines()[-1])
    assert seen["blocks"] == ["text", "image"]
    assert seen["mime"] == "image/png"
    width, height = seen["screen"]["width"], seen["screen"]["height"]
    assert seen["shot"] | {"at": 0} == {"image_index": 0, "width": width, "height": height, "scale": 1, "at": 0,
                                        "origin": {"x": 0, "y": 0}, "screen": {"width": width, "height": height}}

    attached = desktop_runtime.run_js(GRAB + "artifact(r.content[1 + body.results[2].result.image_index]);")
    assert not attached.is_error, attached.text
    assert len(attached.images) == 1
    png = Image.open(io.BytesIO(base64.b64decode(attached.images[0].data)))
    assert png.size == (width, height)


def test_a_refused_call_is_a_result_the_script_can_read(desktop_runtime):
    """A bad step comes back to the script as isError with the step named, not as a throw."""
    outcome = desktop_runtime.run_js("""
const r = await mcp.callTool("browser", "desktop_execute", {
  operations: [{ type: "mouse.getPosition" }, { type: "keyboard.pressKey", params: { keys: ["Ctrl"] } }],
});
JSON.stringify({ isError: r.isError, error: JSON.parse(r.content[0].text).error.message,
                 kind: r.structuredContent.error.kind, step: r.structuredContent.error.step });
""")
    assert not outcome.is_error, outcome.text
    seen = json.loads(outcome.text.strip().splitlines()[-1])
    assert seen["isError"] is True
    assert "operations[1] (step 2, keyboard.pressKey)" in seen["error"]
    assert "unknown key 'Ctrl'" in seen["error"]
    assert (seen["kind"], seen["step"]) == ("invalid_arguments", 2)
