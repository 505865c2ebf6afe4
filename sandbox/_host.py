"""Host-side machinery shared by both engines: the host-call core.

- `ConsoleCapture`: console lines within max_output_bytes, the rest counted for a marker;
- `ArtifactBox`: artifacts within their count and size limits;
- `ToolBridge`: tool calls and listings as asyncio tasks, timers as loop handles (one per due
  millisecond), the call budget enforced here (a guest bypassing its API still meets it),
  completions answered as JSON events, in batches: one guest wake-up per turn of the host's
  event loop, however many calls finished;
- `RunLimitErrors`: the error a run ends with at each limit, worded once, naming the limit,
  its value and its maximum from the ranges in `sandbox.result`.

Everything here is safe to use from the thread that runs the guest and from the caller's loop
in turn (never both at once); `ToolBridge` lives on the caller's loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from sandbox.result import (
    CALL_LINE,
    HEAP_MEMORY_MAX_MB_RANGE,
    MAX_OUTPUT_BYTES_RANGE,
    MAX_TOOL_CALLS_RANGE,
    TIMEOUT_SECONDS_RANGE,
    CallTool,
    ConsoleLine,
    JsLimits,
    ListTools,
    OnConsole,
    RunError,
    call_line,
    json_text,
    well_formed,
)

LEVELS = ("log", "info", "warn", "error", "debug")


class BridgeError(Exception):
    """A tool call could not be made (not a tool's own isError result)."""


STREAM_LINES = 500
STREAM_BYTES = 128 << 10
"""How much of a run's console goes to `on_console` live: each line becomes a notification to
the client, and a flood of them would keep the answer waiting. The result has every line."""

_STREAM_STOPPED = ("[console: later lines are not streamed live (more than {lines} lines or "
                   "{kib} KiB); they come with the result]")


class ConsoleCapture:
    """Console lines in order, at most `max_bytes` of text; the rest is counted, not kept.
    The first `STREAM_LINES` lines / `STREAM_BYTES` bytes also go to `on_console` as they come."""

    def __init__(self, max_bytes: int, on_console: OnConsole | None) -> None:
        self._max = max_bytes
        self._used = 0
        self._lines: list[ConsoleLine] = []
        self._cut_bytes = 0
        self._cut_lines = 0
        self._on_console = on_console
        self._streamed_lines = 0
        self._streamed_bytes = 0
        self._held: list[tuple[str, str]] | None = None

    def hold(self) -> None:
        """Keep what would go to `on_console` until `release()`: the lines of a step that may
        yet be thrown away and run again."""
        self._held = []

    def release(self) -> None:
        """Send on what was held, and stream from now on."""
        held, self._held = self._held or [], None
        for level, text in held:
            self._tell(level, text)

    @property
    def truncated(self) -> bool:
        return self._cut_bytes > 0

    def add(self, level: str, text: str) -> None:
        if level not in LEVELS:
            level = "log"
        text = well_formed(text)  # streamed live from here: valid Unicode before it goes
        size = len(text.encode("utf-8", "replace")) + 1  # the newline between lines
        room = self._max - self._used
        if self._cut_bytes or size > room:
            if not self._cut_bytes and room > 1:
                # keep the head of the line that crosses the cap, cut at a character boundary
                head = text.encode("utf-8", "replace")[: room - 1].decode("utf-8", "ignore")
                self._keep(level, head)
                size -= len(head.encode("utf-8")) + 1
            else:
                self._cut_lines += 1
            self._cut_bytes += size
            return
        self._keep(level, text)

    def add_cut(self, cut_bytes: int, cut_lines: int) -> None:
        """Count output the guest already dropped at the limit, for the marker."""
        if cut_bytes > 0:
            self._cut_bytes += int(cut_bytes)
            self._cut_lines += int(cut_lines)

    def _keep(self, level: str, text: str) -> None:
        size = len(text.encode("utf-8", "replace")) + 1
        self._used += size
        self._lines.append(ConsoleLine(level, text))
        if self._on_console is None or self._streamed_lines > STREAM_LINES:
            return
        self._streamed_lines += 1
        self._streamed_bytes += size
        if self._streamed_lines > STREAM_LINES or self._streamed_bytes > STREAM_BYTES:
            self._streamed_lines = STREAM_LINES + 1
            level, text = "warn", _STREAM_STOPPED.format(lines=STREAM_LINES, kib=STREAM_BYTES >> 10)
        self._tell(level, text)

    def _tell(self, level: str, text: str) -> None:
        if self._held is not None:
            self._held.append((level, text))
            return
        try:
            self._on_console(level, text)  # type: ignore[misc]
        except Exception:  # a failing listener must not fail the run
            pass

    def lines(self, notes: list[str] = ()) -> list[ConsoleLine]:  # type: ignore[assignment]
        """The lines kept, then the truncation marker if any, then `notes` (as "warn" lines):
        facts about the run the model must see, outside the output limit."""
        extra = [ConsoleLine("warn", note) for note in notes]
        if not self._cut_bytes:
            return [*self._lines, *extra]
        marker = (
            f"[output truncated: {self._cut_bytes} more bytes"
            f"{f' in {self._cut_lines} more lines' if self._cut_lines else ''} were cut; the "
            f"limit is max_output_bytes={self._max}. Print less, or return a summary value]"
        )
        return [*self._lines, ConsoleLine("warn", marker), *extra]


class ArtifactBox:
    """The artifacts a run attaches, within a count and a total size of payload bytes."""

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self._max_count = max_count
        self._max_bytes = max_bytes
        self._bytes = 0
        self.blocks: list[dict] = []
        self.limit_hit = False

    def add(self, item: Any) -> str | None:
        """Attach `item`; return None, or a message saying why it was refused."""
        block, size, problem = _artifact_block(item)
        if problem is not None:
            return problem
        if len(self.blocks) >= self._max_count:
            self.limit_hit = True
            return (f"artifact limit reached: at most {self._max_count} artifacts per run "
                    f"(max_artifacts); attach fewer, e.g. only the final screenshot")
        if self._bytes + size > self._max_bytes:
            self.limit_hit = True
            return (f"artifact size limit reached: {self._bytes + size} bytes would pass "
                    f"max_artifact_bytes={self._max_bytes}; attach fewer or smaller images")
        self._bytes += size
        self.blocks.append(block)
        return None


def _artifact_block(item: Any) -> tuple[dict, int, str | None]:
    if isinstance(item, str):
        return {"type": "text", "text": item}, len(item.encode("utf-8", "replace")), None
    if isinstance(item, dict):
        kind = item.get("type")
        if kind == "text" and isinstance(item.get("text"), str):
            text = item["text"]
            return {"type": "text", "text": text}, len(text.encode("utf-8", "replace")), None
        if kind == "image":
            data, mime = item.get("data"), item.get("mimeType")
            if not isinstance(data, str) or not isinstance(mime, str) or not mime.startswith(
                "image/"
            ):
                return {}, 0, ('artifact(): an image needs {type: "image", data: <base64 '
                               'string>, mimeType: "image/png" or another image/* type}')
            try:
                size = len(base64.b64decode(data, validate=True))
            except (binascii.Error, ValueError):
                return {}, 0, "artifact(): the image's data is not valid base64"
            return {"type": "image", "data": data, "mimeType": mime}, size, None
    return {}, 0, ("artifact() takes a string (text), {type: \"text\", text}, or an image "
                   "block {type: \"image\", data, mimeType} such as result.content[1] of a "
                   "screenshot")


class _JsonText:
    """A value already serialized (well-formed JSON text), to hand the guest as it is."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_last_listing: tuple[Any, _JsonText] | None = None


def _listing_text(listing: Any) -> _JsonText:
    """A tool listing as JSON text, serialized once per listing: the runtime answers the same
    object until the tools change, and a script calling listTools in a loop must not make the
    shared event loop serialize half a megabyte each time."""
    global _last_listing
    if _last_listing is None or _last_listing[0] is not listing:
        text = json_text(listing)
        _last_listing = (listing, _JsonText(text))  # holds the listing, so `is` stays meaningful
    return _last_listing[1]


DELIVERY_CHARS = 8 << 20
"""Completions handed to the guest in one step, in characters of JSON (past one, the rest wait for
the next step): 160 listings of half a megabyte at once were one 77 MB string, more than the
guest's memory could take, and the deadline is checked only between steps."""


class ToolBridge:
    """The tool calls, tool listings and timers of one run.

    Each call or listing becomes a task, timers a handle on the loop per due millisecond; a
    completion becomes an event the guest collects with `next_events()`. `close()` cancels
    whatever is still running and waits for it, so a run that ends (or times out) leaves no
    call behind.
    """

    def __init__(self, call_tool: CallTool, list_tools: ListTools, max_tool_calls: int) -> None:
        self._call_tool = call_tool
        self._list_tools = list_tools
        self._max_calls = max_tool_calls
        self.tool_calls = 0
        self.refused_calls = 0  # calls refused because the budget was spent
        self.budget_hit = False
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._calls: dict[int, str] = {}  # the tool calls among the tasks: "server.tool"
        self._due: dict[int, dict[Any, None]] = {}  # due millisecond -> the timers due then
        self._handles: dict[int, asyncio.TimerHandle] = {}  # due millisecond -> its handle
        self._timer_due: dict[Any, int] = {}  # timer -> its due millisecond
        self._events: list[str] = []  # each event already JSON, so one bad result fails alone
        self._ready = asyncio.Event()

    def _emit(self, event: dict) -> None:
        if isinstance(event.get("ok"), _JsonText):
            self._events.append(f'{{"id": {int(event["id"])}, "ok": {event["ok"].text}}}')
            self._ready.set()
            return
        try:
            # into the guest as UTF-8: a lone surrogate in a result (a bridge error's text, a
            # listing) would fail the crossing, so it becomes U+FFFD
            text = json_text(event)
        except (TypeError, ValueError) as exc:
            text = json.dumps({"id": event["id"], "name": "BridgeError",
                               "error": f"the result is not JSON-serialisable: {exc}"})
        self._events.append(text)
        self._ready.set()

    def _start(self, rid: int, work: Callable[[], Any]) -> None:
        task = asyncio.get_running_loop().create_task(self._settle(rid, work))
        self._tasks[rid] = task

    async def _settle(self, rid: int, work: Callable[[], Any]) -> None:
        try:
            value = await work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bridge failure: the guest gets an Error with this text
            self._emit({"id": rid, "error": str(exc) or type(exc).__name__,
                        "name": "BridgeError"})
        else:
            self._emit({"id": rid, "ok": value})
        finally:
            self._tasks.pop(rid, None)
            self._calls.pop(rid, None)

    def call(self, rid: int, server: Any, tool: Any, args: Any, line: Any = None) -> None:
        """Start a tool call, or refuse it at once when the run's call budget is spent. `line`
        is the script's line the guest says made it (`CALL_LINE` in the call's task)."""
        if not isinstance(server, str) or not isinstance(tool, str):
            self._emit({"id": rid, "name": "TypeError",
                        "error": "mcp.callTool(server, tool, args): server and tool must be "
                                 "strings"})
            return
        if args is None:
            args = {}
        if not isinstance(args, dict):
            self._emit({"id": rid, "name": "TypeError",
                        "error": "mcp.callTool(server, tool, args): args must be an object"})
            return
        # the guest's text goes on to a transport: valid Unicode from here
        server, tool, args = well_formed(server), well_formed(tool), well_formed(args)
        if self.tool_calls >= self._max_calls:
            self.budget_hit = True
            self.refused_calls += 1
            self._emit({"id": rid, "name": "CallBudgetError",
                        "error": f"tool call budget spent: at most {self._max_calls} calls "
                                 f"per run (max_tool_calls); batch work into fewer calls or "
                                 f"raise max_tool_calls"})
            return
        self.tool_calls += 1

        site = call_line(line)

        async def work() -> Any:
            CALL_LINE.set(site)  # this call's own task: its context is its own
            result = await self._call_tool(server, tool, args)
            if not isinstance(result, dict):
                raise BridgeError(f"{server}.{tool} returned {type(result).__name__}, "
                                  f"not a CallToolResult object")
            return result

        self._calls[rid] = f"{server}.{tool}"
        self._start(rid, work)

    def in_flight(self) -> list[str]:
        """The tool calls still running, as "server.tool"."""
        return list(self._calls.values())

    def list(self, rid: int, server: Any) -> None:
        if server is not None and not isinstance(server, str):
            self._emit({"id": rid, "name": "TypeError",
                        "error": "mcp.listTools(server?): server must be a string"})
            return
        async def work() -> _JsonText:
            return _listing_text(await self._list_tools(server))

        self._start(rid, work)

    def timer(self, rid: int, ms: Any) -> None:
        # Timers due in the same millisecond share one handle on the loop, and fire together
        # in the order they were armed: a script may arm tens of thousands, and each must cost
        # little to arm, fire and cancel (other runs share the loop; a run's answer waits for
        # the cancelling).
        delay = max(0.0, float(ms) / 1000.0) if isinstance(ms, (int, float)) else 0.0
        loop = asyncio.get_running_loop()
        due = math.ceil((loop.time() + delay) * 1000)
        bucket = self._due.get(due)
        if bucket is None:
            bucket = self._due[due] = {}
            self._handles[due] = loop.call_at(due / 1000, self._fire, due)
        bucket[rid] = None
        self._timer_due[rid] = due

    def _fire(self, due: int) -> None:
        self._handles.pop(due, None)
        for rid in self._due.pop(due, {}):
            self._timer_due.pop(rid, None)
            if type(rid) is int:
                self._events.append(f'{{"id":{rid},"ok":null}}')
            else:
                self._emit({"id": rid, "ok": None})
        self._ready.set()

    def clear(self, rid: int) -> None:
        due = self._timer_due.pop(rid, None)
        if due is not None:
            bucket = self._due.get(due, {})
            bucket.pop(rid, None)
            if not bucket:
                self._due.pop(due, None)
                handle = self._handles.pop(due, None)
                if handle is not None:
                    handle.cancel()
        task = self._tasks.pop(rid, None)
        if task is not None:
            task.cancel()

    async def next_events(self) -> str:
        """Wait for at least one completion, then take every completion ready in this turn,
        as one JSON array."""
        while not self._events:
            self._ready.clear()
            await self._ready.wait()
        # let calls finishing in this same turn of the loop join the batch
        await asyncio.sleep(0)
        taken = size = 0
        for text in self._events:  # at most DELIVERY_CHARS a step (one event at least)
            taken += 1
            size += len(text)
            if size >= DELIVERY_CHARS:
                break
        events, self._events = self._events[:taken], self._events[taken:]
        if not self._events:
            self._ready.clear()
        return "[" + ",".join(events) + "]"

    async def close(self) -> None:
        """Cancel every timer and task still running and wait until each task has stopped.

        Each task is cancelled once. A tool call being cancelled tells its server to stop it (the
        MCP client sends notifications/cancelled); a second cancel would cut that message short
        and leave the work running in the server. So when the run itself is cancelled meanwhile
        (its own client gave up on it), the tasks finish their cancelling unwaited-for, never
        cancelled again."""
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            handle.cancel()
        self._due.clear()
        self._timer_due.clear()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
        self._tasks.clear()



class RunLimitErrors:
    """The errors a run ends with at its limits, each naming the limit, its value and how far
    it may be raised (from the ranges in `sandbox.result`).

    `in_flight()` gives the tool calls still running (as "server.tool"), for the timeout's
    message: they are cancelled as the run ends."""

    def __init__(self, limits: Any, in_flight: Callable[[], Sequence[str]] | None = None) -> None:
        self._limits = limits
        self._in_flight = in_flight

    def timeout(self, in_flight: Sequence[str] | None = None) -> RunError:
        """`in_flight`: the calls still running when the run stopped (default: ask `in_flight()`)."""
        if in_flight is None:
            in_flight = self._in_flight() if self._in_flight is not None else ()
        return RunError(
            kind="timeout",
            message=f"the run took longer than timeout_seconds={self._limits.timeout_seconds:g}; "
            f"{_cancelled_calls(in_flight)}. Do less per run, or raise timeout_seconds "
            f"(at most {TIMEOUT_SECONDS_RANGE[2]:g})",
        )

    def memory(self) -> RunError:
        limits = self._limits
        if isinstance(limits, JsLimits):
            return RunError(
                kind="memory",
                message=f"the script ran out of memory: heap_memory_max_mb="
                f"{limits.heap_memory_max_mb} bounds the JS heap and every string, array and "
                f"buffer in it. Keep less in memory (process in pieces, return a summary), or "
                f"raise heap_memory_max_mb (at most {HEAP_MEMORY_MAX_MB_RANGE[2]})",
            )
        return RunError(
            kind="memory",
            message=f"the script ran out of memory: memory_max_mb={limits.memory_max_mb}. Keep "
            f"less in memory, or raise memory_max_mb",
        )

    def output_value(self) -> RunError:
        cap = self._limits.max_output_bytes
        return RunError(
            kind="output",
            message=f"the returned value is larger than max_output_bytes={cap}; return a "
            f"smaller value (a summary, a count, the first items), or raise max_output_bytes "
            f"(at most {MAX_OUTPUT_BYTES_RANGE[2]})",
        )

    def call_budget_note(self, refused: int) -> str:
        """Said in the result of a run that went on after its call budget was spent."""
        return (
            f"[call budget spent: {refused} tool call(s) were refused with CallBudgetError "
            f"after the first {self._limits.max_tool_calls} (max_tool_calls; at most "
            f"{MAX_TOOL_CALLS_RANGE[2]}). Their results are missing from this run]"
        )


def _cancelled_calls(in_flight: Sequence[str]) -> str:
    """What a timeout did to the calls still running, and what it could not undo."""
    if not in_flight:
        return "no tool call was running then"
    counts = Counter(in_flight)
    names = ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())
    one = len(in_flight) == 1
    return (f"{'the tool call' if one else f'the {len(in_flight)} tool calls'} still running ({names}) "
            f"{'was' if one else 'were'} cancelled: {'its server was' if one else 'their servers were'} told "
            f"to stop {'it' if one else 'them'} where {'it' if one else 'they'} stood, and what "
            f"{'it' if one else 'they'} had already done is not undone (steps already run, programs "
            f"already started, files already written): check the state before doing it again")
