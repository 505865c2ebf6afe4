"""The files server through run_js, as an agent uses it: typed calls, the raw form, a refusal."""

from __future__ import annotations

import json
import secrets

FOLDER = f"~/codedesk-e2e-files-{secrets.token_hex(4)}"


def test_a_script_writes_edits_reads_and_trashes_files_as_the_desktop_user(runtime):
    """tools.files.* resolve to the structured result, mcp.callTool gives the raw one, and a
    path the desktop user cannot read throws a ToolError naming why."""
    out = runtime.run_js(f"""
const dir = {json.dumps(FOLDER)};
const written = await tools.files.write({{path: dir + "/notes.txt", content: "hello\\nworld\\n"}});
const edited = await tools.files.edit({{path: written.path, old: "world", new: "there"}});
const raw = await mcp.callTool("files", "read", {{path: dir + "/notes.txt"}});
let refused = null;
try {{ await tools.files.read({{path: "/etc/shadow"}}); }} catch (e) {{ refused = [e.name, e.kind, e.message]; }}
const found = await tools.files.search({{pattern: "there", root: dir}});
const trashed = await tools.files.delete({{path: dir}});
JSON.stringify({{written, edited, text: raw.structuredContent.text, isError: raw.isError ?? false,
                 textBlock: raw.content[0].text, refused, hits: found.total, trashed}})
""", timeout_seconds=60)
    assert not out.is_error, out.text
    result = json.loads(out.text)
    assert result["written"]["created"] is True and result["written"]["path"].startswith("/")
    assert result["edited"]["replacements"] == 1
    assert result["text"] == "     1\thello\n     2\tthere" and result["isError"] is False
    assert json.loads(result["textBlock"].split("\n")[-1])["text"] == result["text"]
    name, kind, message = result["refused"]
    assert (name, kind) == ("ToolError", "refused") and "permission denied" in message
    assert result["hits"] == 1 and result["trashed"]["type"] == "folder"
    restored = runtime.run_js(f'(await tools.files.restore({{path: {json.dumps(FOLDER)}}})).path')
    assert not restored.is_error, restored.text
    cleanup = runtime.run_js(f'(await tools.files.delete({{path: {json.dumps(FOLDER)}}})).type')
    assert cleanup.text == "folder"


def test_the_run_js_description_names_the_files_tools(runtime):
    """The model learns files exists, and where its declarations are, from the description."""
    description = next(tool.description for tool in runtime.list_tools() if tool.name == "run_js")
    assert '// files: read, stat, list, glob, write, edit, patch, search, move, copy, delete, restore' in description
    declared = runtime.run_js('await mcp.describe("files", "delete")')
    assert "export { delete_ as delete };" in declared.text
