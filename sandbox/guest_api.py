"""The guest-side API of run_py. This file runs INSIDE the wasm CPython, never on the host.

It is sent as the source of the session's first turn and installs `__codedesk__` in
`sys.modules`; each run is then the one-line turn `__codedesk__.run(<code>, ...)`. During a
run the guest talks to the host through the single host tool `codedesk`, one JSON frame each
way: console lines ride along with every frame (and are flushed every few KB), so the host sees
output in order, with its level, as it is produced. The run's outcome is written to the real
stdout after a marker the host chose.
"""

import ast
import builtins
import json
import linecache
import sys
import time
import traceback
import types

import host as _host
from host import tools as _tools

FILENAME = "<code>"
_FLUSH_BYTES = 8192  # console lines go to the host at least this often,
_FLUSH_SECONDS = 0.25  # or this often, when there is no tool call to ride along


class BridgeError(Exception):
    """A tool call could not be made (unknown server or tool, server down, bad arguments)."""


class CallBudgetError(Exception):
    """The run has made as many tool calls as max_tool_calls allows."""


class ArtifactLimitError(Exception):
    """An artifact was refused: too many, too large, or not an image or text."""


_ERRORS = {"BridgeError": BridgeError, "CallBudgetError": CallBudgetError,
           "TypeError": TypeError, "ArtifactLimitError": ArtifactLimitError}


class _Console:
    """Collects whole lines per level, capped at the run's output limit."""

    def __init__(self):
        self.reset(1 << 20)

    def reset(self, max_bytes):
        self.lines = []
        self.size = 0
        self.sent = 0
        self.max = max_bytes
        self.cut_bytes = 0
        self.cut_lines = 0
        self.partial = {}
        self.flushed = time.monotonic()

    def write(self, level, text):
        buf = self.partial.get(level, "") + text
        *whole, rest = buf.split("\n")
        self.partial[level] = rest
        for line in whole:
            self.add(level, line)
        if self.lines and (self.size >= _FLUSH_BYTES
                           or time.monotonic() - self.flushed >= _FLUSH_SECONDS):
            _frame({"op": "console"})

    def add(self, level, line):
        n = len(line.encode("utf-8", "replace")) + 1
        if self.sent + n > self.max or self.cut_bytes:
            room = self.max - self.sent
            if not self.cut_bytes and room > 1:
                head = line.encode("utf-8", "replace")[: room - 1].decode("utf-8", "ignore")
                self.lines.append([level, head])
                self.sent += len(head.encode("utf-8")) + 1
                n -= len(head.encode("utf-8")) + 1
            else:
                self.cut_lines += 1
            self.cut_bytes += n
            return
        self.lines.append([level, line])
        self.sent += n
        self.size += n

    def finish(self):
        for level, rest in list(self.partial.items()):
            if rest:
                self.add(level, rest)
        self.partial = {}

    def take(self):
        lines, self.lines, self.size = self.lines, [], 0
        self.flushed = time.monotonic()
        return lines


_console = _Console()


class _Stream:
    """sys.stdout / sys.stderr: text goes to the host as console lines."""

    def __init__(self, level):
        self.level = level

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        _console.write(self.level, text)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass

    def isatty(self):
        return False

    @property
    def encoding(self):
        return "utf-8"


def _frame(message):
    """Send one frame to the host (with the console lines waiting) and return its answer."""
    message["console"] = _console.take()
    try:
        reply = _tools.codedesk(json.dumps(message))
    except _host.ToolTooLarge as exc:
        raise BridgeError(f"{exc}: a Python run receives at most 16 MiB per call; ask for "
                          "less (a smaller screenshot, a page range), or use run_js") from None
    except _host.ToolError as exc:
        raise BridgeError(str(exc)) from None
    answer = json.loads(reply)
    if "error" in answer:
        raise _ERRORS.get(answer.get("name"), BridgeError)(answer["error"])
    return answer.get("ok")


def _plain(value, what):
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable ({exc})") from None


class _Mcp:
    """Tool calls to the capability servers. Results are plain dicts (CallToolResult)."""

    def call_tool(self, server, tool, args=None):
        """Call one tool and wait for its result: {"content": [...], "isError"?, ...}."""
        if not isinstance(server, str) or not isinstance(tool, str):
            raise TypeError("mcp.call_tool(server, tool, args): server and tool must be strings")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise TypeError("mcp.call_tool(server, tool, args): args must be a dict")
        return _frame({"op": "call", "server": server, "tool": tool,
                       "args": _plain(args, "args")})

    def call_tools(self, calls):
        """Run several calls concurrently on the host: [(server, tool, args), ...] -> results
        in the same order. Raises the first failure once all have finished."""
        batch = []
        for item in calls:
            if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                raise TypeError("mcp.call_tools takes a list of (server, tool, args) tuples")
            server, tool, args = (*item, {}) if len(item) == 2 else item
            if not isinstance(server, str) or not isinstance(tool, str):
                raise TypeError("mcp.call_tools: server and tool must be strings")
            if args is None:
                args = {}
            if not isinstance(args, dict):
                raise TypeError("mcp.call_tools: args must be a dict")
            batch.append([server, tool, _plain(args, "args")])
        return _frame({"op": "calls", "calls": batch})

    def list_tools(self, server=None):
        """{server: [{name, description, inputSchema}, ...]} for one server or all."""
        if server is not None and not isinstance(server, str):
            raise TypeError("mcp.list_tools(server=None): server must be a string")
        return _frame({"op": "list", "server": server})

    # the JavaScript spellings, so a script ported from run_js still works
    callTool = call_tool
    listTools = list_tools


def artifact(x):
    """Attach an image block ({"type": "image", "data", "mimeType"}, such as
    result["content"][1] of a screenshot) or text to the run's result."""
    _frame({"op": "artifact", "item": _plain(x, "artifact()")})


mcp = _Mcp()


def _describe(value):
    if value is None:
        return None
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return repr(value)


def _place(exc):
    """(line, column, traceback text) of an exception, in the user's code only."""
    if isinstance(exc, SyntaxError) and exc.filename == FILENAME:
        text = "".join(traceback.format_exception_only(type(exc), exc))
        return exc.lineno, exc.offset, text
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == FILENAME]
    text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
    text += "".join(traceback.format_exception_only(type(exc), exc))
    if not frames:
        return None, None, text
    last = frames[-1]
    column = last.colno + 1 if getattr(last, "colno", None) is not None else None
    return last.lineno, column, text


def _kind(exc):
    if isinstance(exc, SyntaxError):
        return "syntax"
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, BridgeError):
        return "bridge"
    if isinstance(exc, CallBudgetError):
        return "call_budget"
    if isinstance(exc, ArtifactLimitError):
        return "output"
    return "thrown"


def _execute(code, namespace):
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    tree = ast.parse(code, FILENAME, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, FILENAME, "exec"), namespace)
    if last is not None:
        return eval(compile(last, FILENAME, "eval"), namespace)
    return None


_namespace = None


def run(code, max_output_bytes, marker):
    """Run one script in the session's namespace (made on first use). Its value or error,
    with the console lines not yet sent, goes to the host after `marker` on the real
    stdout: no tool round trip for a run that makes no call."""
    global _namespace
    if _namespace is None:
        _namespace = {"__name__": "__main__", "__builtins__": builtins, "mcp": mcp,
                      "artifact": artifact}
    namespace = _namespace
    _console.reset(max_output_bytes)
    sys.stdout, sys.stderr = _Stream("log"), _Stream("error")
    result = {}
    try:
        result["value"] = _describe(_execute(code, namespace))
    except SystemExit as exc:
        if exc.code not in (None, 0):
            result["error"] = {"kind": "thrown", "message": f"SystemExit: {exc.code}"}
    except BaseException as exc:
        line, column, text = _place(exc)
        if isinstance(exc, SyntaxError):
            message = f"{type(exc).__name__}: {exc.msg}"
        else:
            message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        result["error"] = {"kind": _kind(exc), "message": message, "line": line,
                           "column": column, "traceback": text}
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    _console.finish()
    result["cut"] = [_console.cut_bytes, _console.cut_lines]
    result["console"] = _console.take()
    sys.__stdout__.write("\n" + marker + json.dumps(result) + "\n")
    sys.__stdout__.flush()


_module = types.ModuleType("__codedesk__")
_module.run = run
sys.modules["__codedesk__"] = _module
