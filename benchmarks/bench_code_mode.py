"""What code mode costs the model, beside one tool call per action with a page snapshot per answer.

    .venv/bin/python benchmarks/bench_code_mode.py [--quick] [--data DIR]

Figures:
1. Sizes of what the model reads before it acts: the `tools/list` answer (its JSON), run_js's and
   run_py's descriptions, and per built-in tool its full TypeScript declaration (`mcp.listTools()`'s
   `declaration`, what `mcp.describe` gives), its compact form as run_js's description carries it,
   and its JSON schemas as a server listing the tool itself would send them (name, description,
   inputSchema, outputSchema).
2. Six tasks (a form, a table, pagination, a download, a desktop app, documents), each done twice
   against the real session, and its outcome checked both times:
   - code mode: ONE run_js script on the typed API that does every step and returns only the answer;
   - one call per action: each action its own tool call whose whole result the model reads, as a
     classic browser MCP server answers: a browser action followed by a `readPage {filter: "all"}`
     snapshot, a desktop action followed by a `screen.grab` screenshot, an exec or documents call
     with its own result (a program's output is read with stream_logs, each poll a call). Each such
     call is made through run_js with exactly one tool call in it; the script hands the tool's
     result back whole (its images as artifacts), and the bench counts that tool result, not the
     run_js wrapper.
   Per task and style: tool calls the model makes, bytes that reach the model (the result's content:
   text as UTF-8, images as their base64 data, as they travel in the MCP result; structuredContent
   is not counted), images among them, wall time, and ok/failed; then the ratios.

The bench plays the model in the second style: it reads refs, table cells and window ids from
the results it is given, as a model would from the text.

Repetitions: medians of 3 runs of each task and style (1 with --quick).

The session: `--data DIR` of a running session, else a fresh one started with
`python -m runtime.desktop up` in a temporary directory under /tmp (and stopped at the end). The
pages come from tests/pages/ through a local HTTP server in a thread (the internet is not
reachable). The runtime is `codedesk serve` over stdio with CODEDESK_DATA set to the session.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runtime.declarations import typescript_tool  # noqa: E402
from runtime.descriptions import DOC_CHARS  # noqa: E402
from tests.fixtures.pages import PAGES, PagesServer  # noqa: E402

CODEDESK = str(Path(sys.executable).with_name("codedesk"))
BUILTIN = ("browser", "exec", "documents")
RUN_TIMEOUT = 120  # seconds per run_js: the machine is shared and may be slow
HEAP_MB = 64  # a full-screen screenshot passes through the script's heap
SNAPSHOT = {"type": "readPage", "params": {"filter": "all"}}
GRAB = {"type": "screen.grab"}
SETTLE = {"type": "wait", "params": {"ms": 500}}  # after an action that navigates, before the snapshot

FORM = {"customer": "Ada Lovelace", "email": "ada@example.com", "size": "l", "gift": "yes", "speed": "fast",
        "note": "Leave it at the door"}
NOTE_LINE = "Shopping list: two willow baskets, one picnic hamper"
DOC_TEXT = "Quarterly notes\nBaskets sold: 36\nAll good.\n"


class TaskFailed(Exception):
    """A task did not reach its outcome; the message says where."""


# -- the runtime and what reaches the model -----------------------------------------------------


def content_bytes(content: list[Any]) -> tuple[int, int]:
    """(bytes, images) of a result's content as it reaches the model."""
    size = images = 0
    for block in content:
        if block.type == "text":
            size += len(block.text.encode())
        elif block.type == "image":
            size += len(block.data)
            images += 1
        else:  # resources and the like: as JSON
            size += len(block.model_dump_json(by_alias=True, exclude_none=True).encode())
    return size, images


class Runtime:
    """One `codedesk serve` over stdio."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def run_js(self, code: str) -> Any:
        return await self.session.call_tool(
            "run_js", {"code": code, "timeout_seconds": RUN_TIMEOUT, "heap_memory_max_mb": HEAP_MB},
            read_timeout_seconds=RUN_TIMEOUT + 60)


def _text(result: Any) -> str:
    return next((block.text for block in result.content if block.type == "text"), "")


# One tool call, its result handed back whole: text blocks in the JSON, images as artifacts.
ONE_CALL = """\
const [server, tool, args] = __CALL__;
const r = await mcp.callTool(server, tool, args);
for (const c of r.content) if (c.type === "image") artifact(c);
JSON.stringify({isError: !!r.isError, structured: r.structuredContent ?? null,
  texts: r.content.filter((c) => c.type === "text").map((c) => c.text),
  others: r.content.filter((c) => c.type !== "text" && c.type !== "image")})"""


@dataclass
class Meter:
    """What one attempt at a task made the model read: tool calls, bytes, images."""

    runtime: Runtime
    calls: int = 0
    bytes: int = 0
    images: int = 0
    written: int = 0  # what the model writes: the script, or each call's arguments

    async def script(self, code: str) -> str:
        """Code mode: one run_js call; the model reads its result."""
        result = await self.runtime.run_js(code)
        self.calls += 1
        self.written += len(code.encode())
        size, images = content_bytes(result.content)
        self.bytes += size
        self.images += images
        if result.is_error:
            raise TaskFailed(f"run_js failed: {_text(result)[:600]}")
        return _text(result)

    async def tool(self, server: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """One call per action: one tool call; the model reads the tool's whole result."""
        result = await self.runtime.run_js(ONE_CALL.replace("__CALL__", json.dumps([server, tool, args])))
        if result.is_error:
            raise TaskFailed(f"run_js wrapping {server}.{tool} failed: {_text(result)[:600]}")
        answer = json.loads(_text(result))
        self.calls += 1
        self.written += len(json.dumps({"name": tool, "arguments": args}).encode())
        images = [block for block in result.content if block.type == "image"]
        self.bytes += (sum(len(text.encode()) for text in answer["texts"]) + sum(len(i.data) for i in images)
                       + sum(len(json.dumps(other).encode()) for other in answer["others"]))
        self.images += len(images)
        if answer["isError"]:
            raise TaskFailed(f"{server}.{tool} failed: {' '.join(answer['texts'])[:600]}")
        if answer["structured"] is None:
            raise TaskFailed(f"{server}.{tool} gave no structured result")
        return answer["structured"]

    # The classic shapes of one action.

    async def browse(self, tab: str, *operations: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """A browser action and the page snapshot after it: (the result, the snapshot: title, url, tree)."""
        result = await self.tool("browser", "browser_execute", {"tab": tab, "operations": [*operations, SNAPSHOT]})
        return result, result["results"][-1]["result"]

    async def desk(self, *operations: dict[str, Any]) -> dict[str, Any]:
        """A desktop action and the screenshot after it."""
        return await self.tool("browser", "desktop_execute", {"operations": [*operations, GRAB]})

    async def shell(self, bin: str, args: list[str]) -> tuple[str, str]:
        """A program through the exec tools: exec, then stream_logs until it ends (each poll a call)."""
        started = await self.tool("exec", "exec", {"bin": bin, "args": args, "timeout": 60})
        logs, offset = "", 0
        while True:
            read = await self.tool("exec", "stream_logs", {"id": started["id"], "offset": offset})
            logs += read["logs"]
            offset = read["next_offset"]
            if read["status"] != "running":
                return read["status"], logs
            await anyio.sleep(0.25)


# -- what each task must produce ----------------------------------------------------------------


@dataclass
class Context:
    pages: str  # the pages server's base URL
    stamp: str  # makes each attempt's file names its own
    downloads: list[str] = field(default_factory=list)  # files to remove at the end
    home_files: list[str] = field(default_factory=list)


def table_page(page: int) -> tuple[list[str], list[list[str]]]:
    """(columns, rows) of tests/pages/bench_table_<page>.html, read from the file itself."""
    source = (PAGES / f"bench_table_{page}.html").read_text()
    columns = re.findall(r"<th>(.*?)</th>", source)
    rows = [re.findall(r"<td>(.*?)</td>", line) for line in source.splitlines() if "<td>" in line]
    return columns, rows


def ref(tree: str, role: str, name: str) -> str:
    """The ref of the element with this role and name in a readPage tree."""
    match = re.search(rf'- {re.escape(role)} "{re.escape(name)}" \[(ref_\d+)\]', tree)
    if not match:
        raise TaskFailed(f"no {role} {name!r} in the snapshot:\n{tree[:400]}")
    return match.group(1)


def rows_from_snapshot(tree: str, columns: list[str]) -> list[list[str]]:
    """The table's rows as a model reads them from a snapshot: the cells after the header, by row."""
    names = re.findall(r'^\s*- text "(.*)" \[ref_\d+\]', tree, re.M)
    for start in range(len(names) - len(columns) + 1):
        if names[start:start + len(columns)] == columns:
            cells = names[start + len(columns):]
            return [cells[i:i + len(columns)] for i in range(0, len(cells) - len(columns) + 1, len(columns))]
    raise TaskFailed(f"no table header {columns} in the snapshot")


def check_order(text: str) -> None:
    match = re.search(r"customer=[^\s\"]*", text)
    sent = {key: values[0] for key, values in parse_qs(match.group(0)).items()} if match else {}
    if sent != FORM:
        raise TaskFailed(f"the confirmation shows {sent or text[:300]!r}, not {FORM}")


def check_rows(got: Any, columns: list[str], rows: list[list[str]]) -> None:
    if got != {"columns": columns, "rows": rows}:
        raise TaskFailed(f"rows read {json.dumps(got)[:300]} differ from the page's {len(rows)} rows")


# -- the tasks, each in both styles -------------------------------------------------------------

FORM_SCRIPT = """\
const tab = "bench-form";
const page = await tools.browser.browser_execute({tab, operations: [
  {type: "navigate", params: {url: "__PAGES__/browser_reading.html"}}, {type: "readPage"}]});
const tree = page.results[1].result.tree;
const ref = (role, name) => {
  const m = tree.match(new RegExp("- " + role + ' "' + name + '" \\\\[(ref_\\\\d+)\\\\]'));
  if (!m) throw new Error("no " + role + " " + name + " on the page");
  return m[1];
};
const sent = await tools.browser.browser_execute({tab, operations: [
  {type: "formInput", params: {ref: ref("textbox", "Full name"), value: "Ada Lovelace"}},
  {type: "formInput", params: {ref: ref("textbox", "Email address"), value: "ada@example.com"}},
  {type: "formInput", params: {ref: ref("combobox", "Basket size"), value: "Large"}},
  {type: "formInput", params: {ref: ref("checkbox", "Gift wrap"), value: true}},
  {type: "formInput", params: {ref: ref("radio", "Fast delivery"), value: true}},
  {type: "formInput", params: {ref: ref("textbox", "Note for the courier"), value: "Leave it at the door"}},
  {type: "click", params: {ref: ref("button", "Place order")}},
  {type: "wait", params: {ms: 500}},
  {type: "getText"},
]});
let text = sent.results[8].result.text;
for (let i = 0; i < 20 && !text.includes("customer="); i++) {  // the answer page may still be loading
  await new Promise((resolve) => setTimeout(resolve, 250));
  text = (await tools.browser.browser_execute({tab, operations: [{type: "getText"}]})).results[0].result.text;
}
JSON.stringify({confirmation: text})"""


async def form_code(m: Meter, ctx: Context) -> None:
    answer = json.loads(await m.script(FORM_SCRIPT.replace("__PAGES__", ctx.pages)))
    check_order(answer["confirmation"])


async def form_classic(m: Meter, ctx: Context) -> None:
    tab = "bench-form-classic"
    _, page = await m.browse(tab, {"type": "navigate", "params": {"url": f"{ctx.pages}/browser_reading.html"}})
    for role, name, value in (("textbox", "Full name", "Ada Lovelace"), ("textbox", "Email address", "ada@example.com"),
                              ("combobox", "Basket size", "Large"), ("checkbox", "Gift wrap", True),
                              ("radio", "Fast delivery", True), ("textbox", "Note for the courier", "Leave it at the door")):
        _, page = await m.browse(tab, {"type": "formInput", "params": {"ref": ref(page["tree"], role, name), "value": value}})
    _, page = await m.browse(tab, {"type": "click", "params": {"ref": ref(page["tree"], "button", "Place order")}}, SETTLE)
    seen = page["tree"]
    for _ in range(5):  # the answer is not in the snapshot (or not yet): read the page's text, as a model would
        if "customer=" in seen:
            break
        read = await m.tool("browser", "browser_execute", {"tab": tab, "operations": [{"type": "getText"}]})
        seen = read["results"][0]["result"]["text"]
    check_order(seen)


EXTRACT = """() => ({
  columns: [...document.querySelectorAll("table thead th")].map((c) => c.textContent.trim()),
  rows: [...document.querySelectorAll("table tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent.trim())),
  next: document.querySelector("a[rel=next]")?.href ?? null,
})"""

TABLE_SCRIPT = """\
const r = await tools.browser.browser_execute({tab: "bench-table", operations: [
  {type: "navigate", params: {url: "__PAGES__/bench_table_1.html"}},
  {type: "evaluate", params: {script: __EXTRACT__}}]});
const {columns, rows} = r.results[1].result;
JSON.stringify({columns, rows})"""


async def table_code(m: Meter, ctx: Context) -> None:
    code = TABLE_SCRIPT.replace("__PAGES__", ctx.pages).replace("__EXTRACT__", json.dumps(EXTRACT))
    check_rows(json.loads(await m.script(code)), *table_page(1))


async def table_classic(m: Meter, ctx: Context) -> None:
    columns, rows = table_page(1)
    _, page = await m.browse("bench-table-classic", {"type": "navigate", "params": {"url": f"{ctx.pages}/bench_table_1.html"}})
    check_rows({"columns": columns, "rows": rows_from_snapshot(page["tree"], columns)}, columns, rows)


PAGINATION_SCRIPT = """\
const tab = "bench-pages";
let url = "__PAGES__/bench_table_1.html", columns = [], pages = 0;
const rows = [];
while (url && pages < 10) {
  const r = await tools.browser.browser_execute({tab, operations: [
    {type: "navigate", params: {url}}, {type: "evaluate", params: {script: __EXTRACT__}}]});
  const page = r.results[1].result;
  columns = page.columns;
  rows.push(...page.rows);
  url = page.next;
  pages++;
}
JSON.stringify({columns, rows})"""


def all_pages() -> tuple[list[str], list[list[str]]]:
    columns, _ = table_page(1)
    return columns, [row for page in (1, 2, 3) for row in table_page(page)[1]]


async def pagination_code(m: Meter, ctx: Context) -> None:
    code = PAGINATION_SCRIPT.replace("__PAGES__", ctx.pages).replace("__EXTRACT__", json.dumps(EXTRACT))
    check_rows(json.loads(await m.script(code)), *all_pages())


async def pagination_classic(m: Meter, ctx: Context) -> None:
    tab = "bench-pages-classic"
    columns, expected = all_pages()
    _, page = await m.browse(tab, {"type": "navigate", "params": {"url": f"{ctx.pages}/bench_table_1.html"}})
    rows = rows_from_snapshot(page["tree"], columns)
    for number in (2, 3):
        _, page = await m.browse(tab, {"type": "click", "params": {"ref": ref(page["tree"], "link", "Next")}}, SETTLE)
        for _ in range(5):  # the next page may still be loading: look again
            if page["title"] == f"Orders, page {number} of 3":
                break
            _, page = await m.browse(tab)
        rows += rows_from_snapshot(page["tree"], columns)
    check_rows({"columns": columns, "rows": rows}, columns, expected)


DOWNLOAD_SCRIPT = """\
const r = await tools.browser.browser_execute({tab: "bench-shop", operations: [
  {type: "navigate", params: {url: "__PAGES__/browser_shop.html"}},
  {type: "download", params: {selector: "text=Get the invoice"}}]});
const file = r.results[1].result;
const read = await tools.exec.run({bin: "cat", args: [file.path], timeout: 30});
JSON.stringify({path: file.path, size: file.size, status: read.status, content: read.logs})"""


def check_invoice(status: str, content: str) -> None:
    expected = (PAGES / "browser_download.txt").read_text()
    if status != "completed:0" or content != expected:
        raise TaskFailed(f"cat of the invoice: {status}, {content[:200]!r}; expected {expected!r}")


async def download_code(m: Meter, ctx: Context) -> None:
    answer = json.loads(await m.script(DOWNLOAD_SCRIPT.replace("__PAGES__", ctx.pages)))
    ctx.downloads.append(answer["path"])
    check_invoice(answer["status"], answer["content"])


async def download_classic(m: Meter, ctx: Context) -> None:
    tab = "bench-shop-classic"
    _, page = await m.browse(tab, {"type": "navigate", "params": {"url": f"{ctx.pages}/browser_shop.html"}})
    result, _ = await m.browse(tab, {"type": "download", "params": {"ref": ref(page["tree"], "link", "Get the invoice")}})
    path = result["results"][0]["result"]["path"]
    ctx.downloads.append(path)
    check_invoice(*await m.shell("cat", [path]))


DESKTOP_SCRIPT = """\
const file = "__FILE__";
const started = await tools.exec.exec({bin: "mousepad", args: [file], timeout: 300});
let win;
for (let i = 0; i < 300 && !win; i++) {  // wait for its window
  const listed = await tools.browser.desktop_execute({operations: [{type: "getWindows"}]});
  win = listed.results[0].result.find((w) => w.title.includes(file));
  if (!win) await new Promise((resolve) => setTimeout(resolve, 200));
}
if (!win) throw new Error("no Mousepad window for " + file);
const typed = await tools.browser.desktop_execute({operations: [
  {type: "window.focus", params: {id: win.id}},
  {type: "keyboard.type", params: {text: __LINE__}},
  {type: "keyboard.type", params: {keys: ["LeftControl", "S"]}},
  {type: "screen.grab"},
]});
artifact(typed.images[typed.results[3].result.image_index]);
let saved = "";
for (let i = 0; i < 20 && !saved; i++) {  // saving may take a moment
  saved = (await tools.exec.run({bin: "cat", args: [file], timeout: 30})).logs;
  if (!saved) await new Promise((resolve) => setTimeout(resolve, 250));
}
await tools.browser.desktop_execute({operations: [
  {type: "window.close", params: {id: win.id}},
  {type: "window.waitFor", params: {title: file, state: "closed", timeout: 30000}}]});
JSON.stringify({window: win.title, saved})"""


def check_note(saved: str) -> None:
    if saved.strip() != NOTE_LINE:
        raise TaskFailed(f"the saved file holds {saved[:200]!r}, not {NOTE_LINE!r}")


async def desktop_code(m: Meter, ctx: Context) -> None:
    name = f"bench-note-{ctx.stamp}-code.txt"
    ctx.home_files.append(name)
    code = DESKTOP_SCRIPT.replace("__FILE__", name).replace("__LINE__", json.dumps(NOTE_LINE))
    check_note(json.loads(await m.script(code))["saved"])


async def desktop_classic(m: Meter, ctx: Context) -> None:
    name = f"bench-note-{ctx.stamp}-classic.txt"
    ctx.home_files.append(name)
    await m.tool("exec", "exec", {"bin": "mousepad", "args": [name], "timeout": 300})
    opened = await m.desk({"type": "window.waitFor", "params": {"title": name, "timeout": 60000}})
    window = opened["results"][0]["result"]
    if not window:
        raise TaskFailed(f"no Mousepad window for {name}")
    await m.desk({"type": "window.focus", "params": {"id": window["id"]}})
    await m.desk({"type": "keyboard.type", "params": {"text": NOTE_LINE}})
    await m.desk({"type": "keyboard.type", "params": {"keys": ["LeftControl", "S"]}})
    saved = ""
    for _ in range(5):  # saving may take a moment: read again
        status, saved = await m.shell("cat", [name])
        if saved:
            break
        await anyio.sleep(0.25)
    await m.desk({"type": "window.close", "params": {"id": window["id"]}},
                 {"type": "window.waitFor", "params": {"title": name, "state": "closed", "timeout": 30000}})
    check_note(saved)


DOCUMENTS_SCRIPT = """\
const written = await tools.exec.run({bin: "sh", timeout: 30, args: ["-c", 'printf "%s" "$1" > "$2"', "sh", __TEXT__, "__FILE__"]});
if (written.status !== "completed:0") throw new Error(written.logs);
const pdf = await tools.documents.convert_document({path: "~/__FILE__", to: "pdf"});
const read = await tools.documents.read_pdf({path: pdf.output_files[0]});
JSON.stringify({pdf: pdf.output_files[0], pages: read.page_count, text: read.pages.map((p) => p.text).join("\\n")})"""


def check_pdf_text(text: str) -> None:
    if [line.strip() for line in text.splitlines() if line.strip()] != DOC_TEXT.splitlines():
        raise TaskFailed(f"the PDF reads {text[:300]!r}, not {DOC_TEXT!r}")


async def documents_code(m: Meter, ctx: Context) -> None:
    name = f"bench-doc-{ctx.stamp}-code.txt"
    ctx.home_files += [name, name.replace(".txt", ".pdf")]
    code = DOCUMENTS_SCRIPT.replace("__FILE__", name).replace("__TEXT__", json.dumps(DOC_TEXT))
    check_pdf_text(json.loads(await m.script(code))["text"])


async def documents_classic(m: Meter, ctx: Context) -> None:
    name = f"bench-doc-{ctx.stamp}-classic.txt"
    ctx.home_files += [name, name.replace(".txt", ".pdf")]
    status, logs = await m.shell("sh", ["-c", 'printf "%s" "$1" > "$2"', "sh", DOC_TEXT, name])
    if status != "completed:0":
        raise TaskFailed(f"writing {name}: {status} {logs[:200]}")
    pdf = await m.tool("documents", "convert_document", {"path": f"~/{name}", "to": "pdf"})
    read = await m.tool("documents", "read_pdf", {"path": pdf["output_files"][0]})
    check_pdf_text("\n".join(page["text"] for page in read["pages"]))


Attempt = Callable[[Meter, Context], Awaitable[None]]
TASKS: list[tuple[str, Attempt, Attempt]] = [
    ("form: fill, submit, read the answer", form_code, form_classic),
    ("table: one page's rows as JSON", table_code, table_classic),
    ("pagination: rows of 3 pages", pagination_code, pagination_classic),
    ("download: invoice, read with cat", download_code, download_classic),
    ("desktop: mousepad, type, save, shot", desktop_code, desktop_classic),
    ("documents: text -> PDF -> text", documents_code, documents_classic),
]


# -- measuring ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    calls: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    images: list[int] = field(default_factory=list)
    written: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.calls) and not self.failures

    def median(self, name: str) -> float:
        return statistics.median(getattr(self, name)) if getattr(self, name) else float("nan")


async def attempt(runtime: Runtime, task: Attempt, ctx: Context, outcome: Outcome) -> None:
    meter = Meter(runtime)
    started = time.perf_counter()
    try:
        await task(meter, ctx)
    except TaskFailed as exc:
        outcome.failures.append(str(exc))
    except Exception as exc:  # a broken session or runtime: say so, go on with the next task
        outcome.failures.append(f"{type(exc).__name__}: {exc}")
    outcome.seconds.append(time.perf_counter() - started)
    outcome.calls.append(meter.calls)
    outcome.bytes.append(meter.bytes)
    outcome.images.append(meter.images)
    outcome.written.append(meter.written)


async def sizes(runtime: Runtime) -> None:
    """Part 1: what the model reads before it acts."""
    first = await runtime.session.list_tools()
    listed = await runtime.run_js("JSON.stringify(await mcp.listTools())")
    if listed.is_error:
        raise SystemExit(f"mcp.listTools() failed: {_text(listed)[:600]}")
    servers = json.loads(_text(listed))
    # After listTools every built-in server's tools are known, and the descriptions carry them.
    answer = await runtime.session.list_tools()
    tools = {tool.name: tool for tool in answer.tools}
    total = len(answer.model_dump_json(by_alias=True, exclude_none=True).encode())
    print("1. What the model reads before it acts (bytes)")
    print(f"  tools/list answer (JSON)                     {total:8d}")
    at_start = len(first.model_dump_json(by_alias=True, exclude_none=True).encode())
    if at_start != total:
        print(f"  tools/list answer at start, before every server's tools were known {at_start:8d}")
    for name in ("run_js", "run_py"):
        print(f"  {name} description                          {len((tools[name].description or '').encode()):8d}")
    print(f"  {'built-in tool':<42} {'declaration':>11} {'compact':>8} {'JSON schemas':>13}")
    sums = [0, 0, 0]
    for server in BUILTIN:
        for tool in servers.get(server, []):
            full = len(tool["declaration"].encode())
            compact = len(typescript_tool(tool, DOC_CHARS).encode())
            schemas = len(json.dumps({key: tool.get(key) for key in ("name", "description", "inputSchema", "outputSchema")
                                      if tool.get(key) is not None}).encode())
            for i, value in enumerate((full, compact, schemas)):
                sums[i] += value
            print(f"  {server + '.' + tool['name']:<42} {full:11d} {compact:8d} {schemas:13d}")
    print(f"  {'all built-in tools':<42} {sums[0]:11d} {sums[1]:8d} {sums[2]:13d}")
    print("  (declaration: mcp.describe's full TypeScript; compact: as run_js's description carries it;")
    print("   JSON schemas: name, description, inputSchema, outputSchema as a server's own tools/list sends them)")
    missing = [server for server in BUILTIN if not servers.get(server)]
    if missing:
        print(f"  (no tools listed for {', '.join(missing)}: is that server failing to start?)")


async def cleanup(runtime: Runtime, ctx: Context) -> None:
    """Close the bench's tabs and remove the files it made (not counted)."""
    tabs = ["bench-form", "bench-form-classic", "bench-table", "bench-table-classic", "bench-pages",
            "bench-pages-classic", "bench-shop", "bench-shop-classic"]
    paths = [*ctx.downloads, *ctx.home_files]
    code = (f"for (const tab of {json.dumps(tabs)}) await tools.browser.browser_execute("
            "{tab, operations: [{type: \"url\"}], close: true}).catch(() => null);\n"
            f"await tools.exec.run({{bin: \"rm\", args: [\"-f\", ...{json.dumps(paths)}], timeout: 30}});")
    result = await runtime.run_js(code)
    if result.is_error:
        print(f"(cleanup failed: {_text(result)[:300]})")


async def bench(data: Path, quick: bool) -> None:
    runs = 1 if quick else 3
    env = {**os.environ, "CODEDESK_DATA": str(data)}
    env.pop("CODEDESK_CONFIG", None)
    with PagesServer() as pages:
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(
                stdio_client(StdioServerParameters(command=CODEDESK, args=["serve"], env=env)))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            runtime = Runtime(session)
            await sizes(runtime)

            results: list[tuple[str, Outcome, Outcome]] = []
            ctx = Context(pages=pages.base, stamp="")
            for name, code_mode, classic in TASKS:
                code_outcome, classic_outcome = Outcome(), Outcome()
                for run in range(runs):  # the styles interleaved, so both see the same machine
                    ctx.stamp = f"{os.getpid()}-{run}"
                    await attempt(runtime, code_mode, ctx, code_outcome)
                    await attempt(runtime, classic, ctx, classic_outcome)
                results.append((name, code_outcome, classic_outcome))
            await cleanup(runtime, ctx)
    report(results, runs)


def report(results: list[tuple[str, Outcome, Outcome]], runs: int) -> None:
    print()
    print(f"2-3. Six tasks: code mode (one run_js) vs one call per action with a snapshot per answer"
          f" (median of {runs} run{'s' if runs > 1 else ''})")
    print("  calls: tool calls the model makes; bytes: what reaches the model (text + image data);")
    print("  written: what the model writes (the script, or each call's name and arguments)")
    header = f"  {'task':<38}{'style':<10}{'calls':>6}{'bytes':>10}{'images':>7}{'written':>8}{'seconds':>8}  outcome"
    print(header)
    totals = {"code": [0.0, 0.0, 0.0], "per-call": [0.0, 0.0, 0.0]}
    for name, code_mode, classic in results:
        for style, outcome in (("code", code_mode), ("per-call", classic)):
            figures = [outcome.median(key) for key in ("calls", "bytes", "written")]
            totals[style] = [a + b for a, b in zip(totals[style], figures, strict=True)]
            print(f"  {name if style == 'code' else '':<38}{style:<10}{figures[0]:6.0f}{figures[1]:10.0f}"
                  f"{outcome.median('images'):7.0f}{figures[2]:8.0f}{outcome.median('seconds'):8.1f}"
                  f"  {'ok' if outcome.ok else 'failed'}")
        print(f"  {'':<38}{'ratio':<10}{_ratio(classic, code_mode, 'calls'):>6}{_ratio(classic, code_mode, 'bytes'):>10}"
              f"{'':>7}{_ratio(classic, code_mode, 'written'):>8}  (per-call / code)")
    for style in ("code", "per-call"):
        calls, size, written = totals[style]
        print(f"  {'all six tasks' if style == 'code' else '':<38}{style:<10}{calls:6.0f}{size:10.0f}{'':>7}{written:8.0f}")
    (cc, cb, cw), (pc, pb, pw) = totals["code"], totals["per-call"]
    print(f"  {'':<38}{'ratio':<10}{pc / cc:5.1f}x{pb / cb:9.1f}x{'':>7}{pw / cw:7.1f}x")
    failures = [(name, style, text) for name, code_mode, classic in results
                for style, outcome in (("code", code_mode), ("per-call", classic)) for text in outcome.failures]
    for name, style, text in failures:
        print(f"  FAILED {name} ({style}): {text}")


def _ratio(classic: Outcome, code_mode: Outcome, key: str) -> str:
    base = code_mode.median(key)
    return f"{classic.median(key) / base:.1f}x" if base else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one run of each task (a smoke run)")
    parser.add_argument("--data", type=Path, help="data dir of a running session (default: start one)")
    args = parser.parse_args()
    if args.data is not None:
        anyio.run(bench, args.data, args.quick)
        return
    data = Path(tempfile.mkdtemp(prefix="bench-code-mode-", dir="/tmp"))
    data.chmod(0o755)  # the desktop user must reach it
    try:
        subprocess.run([sys.executable, "-m", "runtime.desktop", "up", "--data", str(data)], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL)
        anyio.run(bench, data, args.quick)
    finally:
        subprocess.run([sys.executable, "-m", "runtime.desktop", "down", "--data", str(data)], cwd=REPO, check=False,
                       stdout=subprocess.DEVNULL)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
