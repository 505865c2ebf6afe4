"""The guest-side API of run_py. This file runs INSIDE the wasm CPython, never on the host.

`py.py` executes it once per interpreter, as the body of a module `__codedesk__` with a
private copy of the builtins (so a script that replaces `builtins.len` or `print` does not
break it), and registers that module in `sys.modules`; each run is then the one-line turn
`__codedesk__.run(<code>, ...)`. Everything the API needs from other modules is bound here, at
install time, for the same reason.

During a run the guest talks to the host through the single host tool `codedesk`, one JSON
frame each way: console lines ride along with every frame (and are flushed every few KB), so
the host sees output in order, with its level, as it is produced. The host tool takes frames
of at most 1 MiB, so a larger frame (a long printed line, large tool arguments) is sent as
base64 parts the host joins. The run's outcome is written to the real stdout (file descriptor
1) after a marker the host chose.

The guest is not trusted: the host enforces every limit again. What this file does is make a
well-behaved outcome out of whatever the script did, inside the run's deadline: the final
value's conversion, error texts and console are cut to size here.
"""

import ast
import base64
import json
import linecache
import os
import re
import sys
import time
import traceback

import host as _host
from host import tools as _tools

FILENAME = "<code>"
_FLUSH_BYTES = 8192  # console lines go to the host at least this often,
_FLUSH_SECONDS = 0.25  # or this often, when there is no tool call to ride along
_DIRECT_CHARS = 150_000  # a frame this long or shorter always fits the host tool's 1 MiB
_PART_BYTES = 600_000  # raw bytes per part; as base64, 800 KB
_MAX_FRAME_BYTES = 64 << 20  # the largest frame the host joins from parts (py.py says so too)
_OUTCOME_CONSOLE_BYTES = 64 << 10  # console lines left at the end ride in the outcome up to this
_TEXT_CHARS = 8000  # an error message or traceback is cut to this many characters

# Bound now: the script may replace any of these in its own modules.
_encode_compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False,
                                   separators=(",", ":")).encode
_encode_value = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
_decode = json.JSONDecoder().decode
_b64encode = base64.b64encode
_write_fd = os.write
_monotonic = time.monotonic
_sleep = time.sleep
_parse = ast.parse
_extract_tb = traceback.extract_tb
_format_list = traceback.format_list
_format_exception_only = traceback.format_exception_only
_linecache = linecache.cache
_door = _tools.codedesk
_ToolTooLarge = _host.ToolTooLarge
_ToolError = _host.ToolError
_real_stdout = sys.__stdout__
_getframe = sys._getframe  # taken now: a script may replace sys._getframe (a call's line uses it)
_real_stderr = sys.__stderr__
_sys = sys
_surrogates = re.compile("[\ud800-\udfff]")

# Freed when the run ran out of memory, so its outcome can still be made and sent.
_reserve = bytearray(1 << 20)


class BridgeError(Exception):
    """A tool call could not be made (unknown server or tool, server down, bad arguments)."""


class CallBudgetError(Exception):
    """The run has made as many tool calls as max_tool_calls allows."""


class ArtifactLimitError(Exception):
    """An artifact was refused: too many, too large, or not an image or text."""


# shown as plain "BridgeError: ..." in messages and tracebacks, as the builtin errors are
BridgeError.__module__ = CallBudgetError.__module__ = ArtifactLimitError.__module__ = "builtins"

_ERRORS = {"BridgeError": BridgeError, "CallBudgetError": CallBudgetError,
           "TypeError": TypeError, "ArtifactLimitError": ArtifactLimitError}


def _utf8(text):
    """`text` as UTF-8 bytes; a lone surrogate (which UTF-8 cannot carry) becomes U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _clean(text).encode("utf-8")


def _clean(text):
    """`text` without lone surrogates (each becomes U+FFFD, as on the host), so it can cross
    to the host as UTF-8."""
    if _surrogates.search(text) is None:
        return text
    return _surrogates.sub("\ufffd", text)


def _cut(text, limit=_TEXT_CHARS):
    """`text` at most `limit` characters: its head and tail, and how much was left out."""
    if len(text) <= limit:
        return _clean(text)
    half = limit // 2
    return _clean(f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n"
                  f"{text[-half:]}")


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
        self.flushed = _monotonic()

    def write(self, level, text):
        buf = self.partial.get(level, "") + text
        *whole, rest = buf.split("\n")
        if len(rest) > self.max:
            # an endless line without a newline: past the limit it is cut anyway
            whole.append(rest)
            rest = ""
        self.partial[level] = rest
        for line in whole:
            self.add(level, line)
        if self.lines and (self.size >= _FLUSH_BYTES
                           or _monotonic() - self.flushed >= _FLUSH_SECONDS):
            _frame({"op": "console"})

    def add(self, level, line):
        if self.cut_bytes:
            self.cut_lines += 1
            self.cut_bytes += len(_utf8(line)) + 1
            return
        data = _utf8(line)
        n = len(data) + 1
        if self.sent + n > self.max:
            room = self.max - self.sent
            if room > 1:
                head = data[: room - 1].decode("utf-8", "ignore")
                self.lines.append([level, head])
                kept = len(head.encode("utf-8")) + 1
                self.sent += kept
                self.size += kept
                n -= kept
            else:
                self.cut_lines += 1
            self.cut_bytes += n
            return
        self.lines.append([level, _clean(line)])
        self.sent += n
        self.size += n

    def finish(self):
        for level, rest in list(self.partial.items()):
            if rest:
                self.add(level, rest)
        self.partial = {}

    def take(self):
        lines, self.lines, self.size = self.lines, [], 0
        self.flushed = _monotonic()
        return lines


_console = _Console()


class _Stream:
    """sys.stdout / sys.stderr: text goes to the host as console lines."""

    def __init__(self, level):
        self.level = level

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        _console.write(self.level, str.__str__(text))
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


def _send(text):
    """One frame to the host tool and its answer; a frame over what the tool takes goes as
    parts, each base64, that the host joins and then answers as one frame."""
    if len(text) <= _DIRECT_CHARS:
        return _door(_clean(text))
    data = _utf8(text)
    if len(data) > _MAX_FRAME_BYTES:
        raise BridgeError(f"the request is {len(data)} bytes as JSON; a Python run sends at "
                          f"most {_MAX_FRAME_BYTES >> 20} MiB per call: send less per call "
                          "(split the work, or pass a path instead of the content)")
    for start in range(0, len(data), _PART_BYTES):
        piece = _b64encode(data[start:start + _PART_BYTES]).decode("ascii")
        _door('{"op":"part","data":"' + piece + '"}')
    return _door('{"op":"parts"}')


def _frame(message):
    """Send one frame to the host (with the console lines waiting) and return its answer."""
    message["console"] = _console.take()
    try:
        reply = _send(_encode_compact(message))
    except _ToolTooLarge as exc:
        raise BridgeError(f"{exc}: a Python run receives at most 16 MiB per call; ask for "
                          "less (a smaller screenshot, a page range), or use run_js") from None
    except _ToolError as exc:
        raise BridgeError(str(exc)) from None
    answer = _decode(reply)
    if "error" in answer:
        raise _ERRORS.get(answer.get("name"), BridgeError)(answer["error"])
    return answer.get("ok")


def _plain(value, what):
    try:
        return _decode(_encode_compact(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable ({exc})") from None
    except RecursionError:
        raise TypeError(f"{what} must be JSON-serialisable (it nests too deeply)") from None


def _user_line():
    """The line of the user's script the current call comes from (its innermost frame there)."""
    frame = _getframe(1)
    while frame is not None and frame.f_code.co_filename != FILENAME:
        frame = frame.f_back
    return frame.f_lineno if frame is not None else None


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
                       "args": _plain(args, "args"), "line": _user_line()})

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
        return _frame({"op": "calls", "calls": batch, "line": _user_line()})

    def list_tools(self, server=None):
        """{server: [{name, description, inputSchema}, ...]} for one server or all."""
        if server is not None and not isinstance(server, str):
            raise TypeError("mcp.list_tools(server=None): server must be a string")
        return _frame({"op": "list", "server": server})

    def describe(self, server, tool=None):
        """The typed declaration (Python stub) of a server's tools, or of one tool, as text."""
        if not isinstance(server, str) or (tool is not None and not isinstance(tool, str)):
            raise TypeError("mcp.describe(server, tool=None): server and tool must be strings")
        listed = self.list_tools(server).get(server, [])
        chosen = [t for t in listed if tool is None or t.get("name") == tool]
        if not chosen:
            names = ", ".join(t.get("name", "?") for t in listed) or "(none)"
            raise BridgeError(f"server {server!r} has no tool {tool!r}; its tools: {names}")
        return "\n\n".join(t.get("declaration") or t.get("name", "") for t in chosen)

    # the JavaScript spellings, so a script ported from run_js still works
    callTool = call_tool
    listTools = list_tools


class ToolError(Exception):
    """A tool answered isError. `kind`, `message`, `step`, `field`, `hint` come from the
    server's error object; `result` is the raw result (a failed step's screenshot is there)."""

    def __init__(self, server, tool, result):
        error = (result.get("structuredContent") or {}).get("error") if isinstance(result, dict) else None
        if not isinstance(error, dict):
            texts = [b.get("text", "") for b in result.get("content", []) if isinstance(b, dict)]
            error = {"kind": "failed", "message": " ".join(texts).strip() or "the tool failed"}
        self.server, self.tool, self.result = server, tool, result
        self.kind = error.get("kind")
        self.message = error.get("message", "")
        self.step, self.field, self.hint = error.get("step"), error.get("field"), error.get("hint")
        hint = f" (hint: {self.hint})" if self.hint else ""
        super().__init__(f"{server}.{tool}: {self.kind}: {self.message}{hint}")


def _structured(server, tool, result):
    """What a typed call returns: the structured result, or the text parsed as JSON (servers
    without an output schema), else the text; ToolError for isError."""
    if result.get("isError"):
        raise ToolError(server, tool, result)
    if "structuredContent" in result:
        value = result["structuredContent"]
        images = [b for b in result.get("content", []) if isinstance(b, dict) and b.get("type") == "image"]
        # image blocks ride along, so a script can artifact(r["images"][r["shot"]["image_index"]])
        if images and isinstance(value, dict) and "images" not in value:
            value = {**value, "images": images}
        return value
    texts = [b.get("text", "") for b in result.get("content", []) if isinstance(b, dict) and b.get("type") == "text"]
    text = "".join(texts)
    try:
        return _decode(text)
    except ValueError:
        return text


class _Server:
    """`tools.<server>`: its tools as functions taking keyword arguments."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, tool):
        if tool.startswith("__"):
            raise AttributeError(tool)
        server = self._name

        def call(**args):
            return _structured(server, tool, mcp.call_tool(server, tool, args))

        call.__name__ = tool
        call.__doc__ = f"{server}.{tool}(**args): see mcp.describe({server!r}, {tool!r})"
        return call

    def __repr__(self):
        return f"<tools.{self._name}>"


class _Exec(_Server):
    def run(self, bin, args=(), timeout=60, cwd=None, env=None, poll_seconds=0.1):
        """Start a program and wait for it: {"id", "status", "logs"} (status "completed:0" on success)."""
        request = {"bin": bin, "args": list(args), "timeout": timeout}
        if cwd is not None:
            request["cwd"] = cwd
        if env is not None:
            request["env"] = env
        started = self.exec(**request)
        logs, offset, status = [], 0, "running"
        while True:
            r = self.stream_logs(id=started["id"], offset=offset)
            logs.append(r["logs"])
            offset, status = r["next_offset"], r["status"]
            if status != "running":
                return {"id": started["id"], "status": status, "logs": "".join(logs)}
            _sleep(poll_seconds)


class _Tools:
    """`tools.<server>.<tool>(**args)`: typed calls returning the structured result."""

    def __getattr__(self, server):
        if server.startswith("__"):
            raise AttributeError(server)
        return _Exec(server) if server == "exec" else _Server(server)

    def __repr__(self):
        return "<tools: tools.<server>.<tool>(**args); mcp.describe(server) for the declarations>"


def artifact(x):
    """Attach an image block ({"type": "image", "data", "mimeType"}, such as
    result["content"][1] of a screenshot) or text to the run's result."""
    _frame({"op": "artifact", "item": _plain(x, "artifact()")})


mcp = _Mcp()
tools = _Tools()


def _value_text(value, max_bytes):
    """The final value as JSON text, or (None, error) when it cannot be sent. A value JSON
    cannot hold (a cycle, an object) comes back as its repr."""
    if value is None:
        return "null", None
    try:
        text = _encode_value(value)
    except (TypeError, ValueError, RecursionError):
        try:
            described = repr(value)
            if not isinstance(described, str):
                raise TypeError("__repr__ returned a non-string")
            text = _encode_value(_clean(str.__str__(described)))
        except RecursionError:
            return None, {"kind": "output",
                          "message": "the returned value nests too deeply to be sent or "
                                     "described; return a flatter value"}
    size = len(_utf8(text))
    if size > max_bytes:
        return None, {"kind": "output",
                      "message": f"the returned value is {size} bytes, over max_output_bytes="
                                 f"{max_bytes}; return a smaller value"}
    if _surrogates.search(text) is not None:
        text = _clean(text)
    return text, None


def _place(exc):
    """(line, column, traceback text) of an exception, in the user's code only."""
    if isinstance(exc, SyntaxError) and exc.filename == FILENAME:
        text = "".join(_format_exception_only(type(exc), exc))
        return exc.lineno, exc.offset, text
    frames = [f for f in _extract_tb(exc.__traceback__) if f.filename == FILENAME]
    shown = frames if len(frames) <= 40 else frames[:20] + frames[-20:]
    text = "Traceback (most recent call last):\n" + "".join(_format_list(shown))
    if len(shown) < len(frames):
        text += f"  [... {len(frames) - len(shown)} more frames of the same code ...]\n"
    text += "".join(_format_exception_only(type(exc), exc))
    if not frames:
        return None, None, text
    last = frames[-1]
    column = last.colno + 1 if getattr(last, "colno", None) is not None else None
    return last.lineno, column, text


def _kind(exc):
    if isinstance(exc, SyntaxError):
        return "syntax"
    if isinstance(exc, MemoryError):
        # the parser's "stack overflowed" is about nesting, not memory
        return "thrown" if "stack" in str(exc) else "memory"
    if isinstance(exc, BridgeError):
        return "bridge"
    if isinstance(exc, CallBudgetError):
        return "call_budget"
    if isinstance(exc, ArtifactLimitError):
        return "output"
    return "thrown"


def _error_of(exc):
    """The outcome's error for an exception the script let out."""
    line, column, text = _place(exc)
    if isinstance(exc, SyntaxError):
        message = f"{type(exc).__name__}: {exc.msg}"
    else:
        message = "".join(_format_exception_only(type(exc), exc)).strip()
    return {"kind": _kind(exc), "message": _cut(message), "line": line, "column": column,
            "traceback": _cut(text)}


def _exit_error(exc):
    """SystemExit: None or 0 is a normal end; anything else an error naming the code."""
    code = exc.code
    if code is None or (type(code) is int and code == 0):
        return None
    if type(code) in (int, str):
        shown = str(code)
    else:
        shown = f"<{type(code).__name__} object>"
    return {"kind": "thrown", "message": _cut(f"SystemExit: {shown}")}


def _execute(code, namespace):
    _linecache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    tree = _parse(code, FILENAME, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, FILENAME, "exec"), namespace)
    if last is not None:
        return eval(compile(last, FILENAME, "eval"), namespace)
    return None


_namespace = None


def _failure(exc):
    """(value text, error) for an exception the script let out."""
    if isinstance(exc, SystemExit):
        return "null", _exit_error(exc)
    if isinstance(exc, MemoryError):
        _release_reserve()
    return None, _error_of(exc)


def _release_reserve():
    global _reserve
    _reserve = None


def _emit(marker, value, error):
    """The outcome, on file descriptor 1 after the marker (the host reads it from there)."""
    _console.finish()
    lines = _console.take()
    if sum(len(text) for _, text in lines) > _OUTCOME_CONSOLE_BYTES:
        _console.lines = lines
        try:
            _frame({"op": "console"})
            lines = []
        except Exception:
            lines = _console.take()
    parts = []
    if value is not None:
        parts.append('"value":' + value)
    if error is not None:
        parts.append('"error":' + _encode_compact(error))
    parts.append('"cut":' + _encode_compact([_console.cut_bytes, _console.cut_lines]))
    parts.append('"console":' + _encode_compact(lines))
    _write_all(_utf8("\n" + marker + "{" + ",".join(parts) + "}\n"))


def _write_all(data):
    view = memoryview(data)
    while view:
        written = _write_fd(1, view)
        view = view[written:]


# The builtins as they were at install: the stdlib code the API calls (json, traceback) looks
# names up there, so they are put back while the API makes the outcome, and the script's own
# replacements restored after.
_builtins = _sys.modules["builtins"].__dict__
_pristine = dict(_builtins)


def _swap_in():
    saved = dict(_builtins)
    _builtins.update(_pristine)
    return saved


def _swap_back(saved):
    _builtins.clear()
    _builtins.update(saved)


def run(code, max_output_bytes, marker):
    """Run one script in the session's namespace (made on first use). Its value or error,
    with the console lines not yet sent, goes to the host after `marker` on the real
    stdout: no tool round trip for a run that makes no call."""
    global _namespace, _reserve
    if _namespace is None:
        _namespace = {"__name__": "__main__", "__builtins__": _sys.modules["builtins"],
                      "mcp": mcp, "artifact": artifact, "tools": tools, "ToolError": ToolError}
    _console.reset(max_output_bytes)
    _sys.stdout, _sys.stderr = _Stream("log"), _Stream("error")
    value = caught = None
    try:
        value = _execute(code, _namespace)
    except BaseException as exc:  # KeyboardInterrupt and its kind are the script's too
        caught = exc
    saved = _swap_in()
    try:
        try:
            if caught is None:
                text, error = _value_text(value, max_output_bytes)
            else:
                text, error = _failure(caught)
        except BaseException as exc:  # the value's own __repr__ failed, or memory ran out
            text, error = _failure(exc)
        finally:
            # the value and the exception go now: finalizers they run print to the console
            value = caught = None
            _sys.stdout, _sys.stderr = _real_stdout, _real_stderr
        try:
            _real_stdout.flush()  # what the script wrote there goes before the outcome
        except BaseException:
            pass
        _emit(marker, text, error)
    except BaseException as exc:
        # Making or sending the outcome failed (memory, a script that broke what it needs):
        # a short outcome says so, made without anything the script can have replaced.
        _release_reserve()
        kind = "memory" if isinstance(exc, MemoryError) else "thrown"
        try:
            _write_all(("\n" + marker + '{"error":{"kind":"' + kind + '","message":"the '
                        'run\'s outcome could not be made or sent; the script may have broken '
                        'what the sandbox relies on (json, traceback, sys.stdout) or used up '
                        'its memory"},"cut":[0,0],"console":[]}\n').encode("ascii"))
        except BaseException:
            pass  # file descriptor 1 is closed: the host says the outcome never came
    finally:
        _swap_back(saved)
    if _reserve is None:
        try:
            _reserve = bytearray(1 << 20)
        except MemoryError:
            pass
