"""The descriptions of run_js and run_py, written for a model that writes code.

Each is: what the tool is for; an orientation (the screen, where files live, what persists,
which capability to use); the guest API; the limits; worked examples; then the typed
declarations of every built-in server's tools in full (TypeScript for run_js, Python stubs for
run_py, `declarations.py`) and one line per tool of servers added by config (their full
declarations are one `mcp.describe(server)` away). They are regenerated whenever the known tool
listing changes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sandbox.result import (
    HEAP_MEMORY_MAX_MB_RANGE,
    MAX_ARTIFACT_BYTES_RANGE,
    MAX_ARTIFACTS_RANGE,
    MAX_OUTPUT_BYTES_RANGE,
    MAX_TOOL_CALLS_RANGE,
    MEMORY_MAX_MB_RANGE,
    TIMEOUT_SECONDS_RANGE,
)

from . import declarations, signatures

ToolsByServer = Mapping[str, Sequence[Mapping[str, Any]]]
"""`{server: [{name, description, inputSchema, outputSchema?}]}` of the servers whose tools are known."""

DOC_CHARS = 0
"""How much of each field's doc the descriptions carry: none, so that both descriptions, with
every operation, field and result type of the built-in servers, fit the tools/list budget
(40 KB); `mcp.describe(server, tool)` gives the declarations with every doc whole."""

# The spec's exec example, word for word: it must run unchanged.
SPEC_EXEC_EXAMPLE = """\
const call = async (tool, args) => JSON.parse((await mcp.callTool("exec", tool, args)).content[0].text);
const { id } = await call("exec", { bin: "ls", args: ["-la", "/data/chrome/Downloads"], timeout: 60 });
let logs = "", offset = 0, status = "running";
while (status === "running") {
  const r = await call("stream_logs", { id, offset });
  logs += r.logs; offset = r.next_offset; status = r.status;
  if (status === "running") await new Promise((resolve) => setTimeout(resolve, 250));
}
console.log(status, logs); // "completed:0" and the listing"""

ORIENTATION = """\
The desktop: one X display (XFCE; Chromium, a terminal, Thunar, Mousepad, an image viewer), \
1280x800 at first, following the viewer's window (320x200 to 2560x1600): read its size before aiming \
at pixels. People may watch and use it too.
Files: /data is the session's data directory; the desktop user's home is /data/home (programs \
start there; "~" in documents paths); downloads land in /data/chrome/Downloads. documents and browser \
uploads take paths under the home or /data; programs reach what the desktop user can.
Between runs persist: named browser tabs and their pages, files, exec commands and logs (7 days), \
memory; not your script's variables.
Which capability: browser_execute for anything inside a web page (selectors and refs, no pixels); \
desktop_execute for what no page contains: the browser's own interface and dialogs, the file \
chooser, other windows, the clipboard; exec for programs; files to read, write, edit and search \
text files; documents for PDFs, Office files, images; web to read a page as markdown without a tab (fetch_rendered runs its scripts); memory to keep \
and recall what you learn, and the session's skills (skills_list names them below); session for \
the timeline of every run (timeline_query), its export and replay."""


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def _limits_text(memory_field: str, memory_range: tuple[int, int, int], memory_what: str) -> str:
    t_low, t_default, t_high = TIMEOUT_SECONDS_RANGE
    m_low, m_default, m_high = memory_range
    return (
        f"Limits: timeout_seconds = wall time of the whole run, result included (default {t_default:g}, "
        f"max {t_high:g}); when it hits, calls in flight are cancelled. {memory_field} = {memory_what} "
        f"in MiB (default {m_default}, {m_low} to {m_high}; a large screenshot needs 64). Console output "
        f"is kept up to {_mib(MAX_OUTPUT_BYTES_RANGE[1])} (then cut, with a marker); at most "
        f"{MAX_ARTIFACTS_RANGE[1]} artifacts totalling {_mib(MAX_ARTIFACT_BYTES_RANGE[1])}; at most "
        f"{MAX_TOOL_CALLS_RANGE[1]} tool calls per run. Every failure (syntax, thrown, timeout, memory, "
        "output, call budget, bridge) is an error result naming the kind and the line in your code."
    )


def _servers_text(servers: Sequence[str], tools: ToolsByServer, builtin: Collection[str],
                  full: Any, line: Any, describe_call: str, brief: Collection[str] = ()) -> str:
    if not servers:
        return "No capability servers are configured."
    parts = []
    for server in servers:
        known = tools.get(server)
        describe = describe_call.format(server=server)
        if not known:
            parts.append(f"// {server}: its tools are listed by {describe}")
        elif server in builtin:
            parts.append(full({server: known}).rstrip())
        elif server in brief:
            parts.append(_brief(server, known, describe))
        else:
            parts.append("\n".join([f"// {server} (full declarations: {describe})",
                                    *(f"//   {line(tool)}" + _first_line(tool) for tool in known)]))
    return "\n".join(parts)


SUMMARY_LINES = 30
"""At most this many further lines of a tool's summary in the brief form."""


def _brief(server: str, known: Sequence[Mapping[str, Any]], describe: str) -> str:
    """One line naming a built-in server's tools (the orientation says what it is for); a tool
    whose summary runs over several lines (skills_list: the installed skills) adds them."""
    lines = [f"// {server}: {', '.join(tool['name'] for tool in known)} (declarations: {describe})"]
    for tool in known:
        summary = [text.strip() for text in declarations.summary(tool.get("description") or "").splitlines()]
        summary = [text[:159] + "…" if len(text) > 160 else text for text in summary if text]
        if len(summary) > 1:
            lines.append(f"//   {tool['name']}: {summary[0]}")
            lines.extend(f"//     {text}" for text in summary[1:SUMMARY_LINES + 1])
    return "\n".join(lines)


def _first_line(tool: Mapping[str, Any]) -> str:
    text = (tool.get("description") or "").strip()
    first = text.splitlines()[0] if text else ""
    return f"  -- {first[:159] + '…' if len(first) > 160 else first}" if first else ""


def run_js_description(servers: Sequence[str], tools: ToolsByServer, builtin: Collection[str] = (),
                       brief: Collection[str] = ()) -> str:
    """The description of run_js for these configured servers and known tools: the `builtin`
    ones' declarations in full, the `brief` ones' tool names, the others' one line per tool."""
    declared = _servers_text(
        servers, tools, builtin, lambda listing: declarations.typescript_declarations(listing, DOC_CHARS),
        lambda tool: signatures.typescript(tool["name"], tool.get("inputSchema")),
        'await mcp.describe("{server}")', brief)
    return "\n\n".join([
        "Run a JavaScript script (QuickJS, ES2023; TypeScript accepted, types are stripped) in a "
        "WebAssembly sandbox; it acts on a Linux desktop through capability servers. One script can "
        "loop, branch and call tools in parallel (Promise.all), then return only what matters. The result is the console output, then the value of the last expression (strings as "
        "they are, other values as JSON); images attached with artifact() follow as image blocks. "
        "Screenshots and tool results go to your script, not to you: attach what you must see.",
        ORIENTATION,
        "Guest API:\n"
        "- await tools.<server>.<tool>(args): the typed functions declared below; they resolve to the "
        "structured result, or throw a ToolError (kind, message, step?, field?, hint?, result).\n"
        "- await tools.exec.run({bin, args?, timeout, cwd?, env?}) -> {id, status, logs}: starts a "
        "program and waits for it (status \"completed:0\" on success).\n"
        "- await mcp.callTool(server, tool, args) -> {content, isError, structuredContent?}: the raw form "
        "(content: text and image blocks); a tool's own failure is returned with isError: true.\n"
        "- await mcp.listTools(server?), await mcp.describe(server, tool?): the servers' tools, and their "
        "full declarations as text.\n"
        "- A bridge failure (unknown server or tool, server down) throws an Error.\n"
        "- console.log / info / warn / error / debug; artifact(x): attach an image block or text to the result.\n"
        "- setTimeout / setInterval and their clear*, top-level await, JSON, TextEncoder/Decoder, atob/btoa. "
        "Nothing else reaches out (no fetch, require, files, network, env or process).",
        _limits_text("heap_memory_max_mb", HEAP_MEMORY_MAX_MB_RANGE, "the JavaScript heap"),
        "Examples.\n"
        "Run a program and read its output (the raw exec tools, polling by hand):\n" + SPEC_EXEC_EXAMPLE + "\n"
        "The same with the helper: const r = await tools.exec.run({bin: \"ls\", args: [\"-la\"], timeout: 60});\n"
        "Fill a form by refs, then look at the page:\n"
        "const page = await tools.browser.browser_execute({tab: \"signup\", operations: [\n"
        "  {type: \"navigate\", params: {url: \"https://example.com/signup\"}}, {type: \"readPage\"}]});\n"
        "// page.results[1].result.tree is the outline: lines like 'textbox \"Email\" [ref_3]'\n"
        "const shot = await tools.browser.browser_execute({tab: \"signup\", operations: [\n"
        "  {type: \"formInput\", params: {ref: \"ref_3\", value: \"a@b.c\"}}, {type: \"click\", params: {selector: \"text=Sign up\"}},\n"
        "  {type: \"screenshot\"}]});\n"
        "const step = shot.results[2];  // narrow the union by operation to read a step's result\n"
        "if (step.operation === \"screenshot\") artifact(shot.images![step.result.image_index]);  // the model sees it\n"
        "A native window, by its accessibility refs (no pixels): desktop_execute operations "
        "[{type: \"accessibility.find\", params: {name: \"Save\"}}] give refs like a_12; then "
        "{type: \"accessibility.act\", params: {ref: \"a_12\", action: \"press\"}}.",
        "Declarations of the servers' tools:\n"
        "// Each field's documentation: await mcp.describe(server, tool).\n"
        + declared,
    ])


def run_py_description(servers: Sequence[str], tools: ToolsByServer, builtin: Collection[str] = (),
                       brief: Collection[str] = ()) -> str:
    """The description of run_py for these configured servers and known tools (as run_js's)."""
    declared = _servers_text(
        servers, tools, builtin, lambda listing: declarations.python_stubs(listing, docs=False),
        lambda tool: signatures.python(tool["name"], tool.get("inputSchema")),
        'mcp.describe("{server}")', brief)
    return "\n\n".join([
        "Run a Python script (CPython in a WebAssembly sandbox, with numpy, pandas and scipy); it acts "
        "on a Linux desktop through capability servers. The result is what the script prints, then the "
        "value of its last expression (strings as they are, other values as JSON); images attached with "
        "artifact() follow as image blocks. Tool results go to your script, not to you. The desktop, "
        "its files, what persists between runs and which capability to use: as run_js's description says.",
        "Guest API (as run_js's, in Python, blocking):\n"
        "- tools.<server>.<tool>(**args) -> the structured result (a dict); a failed call raises "
        "ToolError (.kind, .message, .step, .field, .hint, .result).\n"
        "- tools.exec.run(bin=..., args=[...], timeout=60) -> {\"id\", \"status\", \"logs\"}.\n"
        "- mcp.call_tool(server, tool, args) -> the raw result dict; mcp.call_tools([(server, tool, args), "
        "...]) runs calls concurrently; mcp.list_tools(server=None); mcp.describe(server, tool=None).\n"
        "- print(...) and sys.stderr for output; artifact(x) attaches an image block or text to the result.\n"
        "Nothing else reaches out: no network, no host filesystem, no subprocesses.",
        _limits_text("memory_max_mb", MEMORY_MAX_MB_RANGE, "the interpreter's memory"),
        "Example: r = tools.exec.run(bin=\"ls\", args=[\"-la\", \"/data/chrome/Downloads\"], timeout=60); "
        "print(r[\"status\"], r[\"logs\"])",
        "Declarations of the servers' tools:\n"
        "# The keyword arguments' types and each result's fields are those of run_js's TypeScript "
        "declarations; mcp.describe(server, tool) gives the full Python stub, documented.\n" + declared,
    ])
