"""Replaying a recorded run against the session as it is now (`session.timeline_replay`).

Replay needs the capability servers and the sandbox, so it runs here, in the runtime; the
`session` server, which the runtime serves in its own process, is handed `Replay.replay`.

- `calls`: the run's capability calls are sent again, in order, with their recorded arguments;
  each answer is compared with its record (`replay_rules.compare`: status, then URL, title,
  text found, ...). The first that differs ends the replay: `replay_divergence`, naming the
  call, the step and what changed. A call whose recorded arguments held a secret (the timeline
  keeps `[redacted]` in its place) cannot be sent again: it diverges, saying so. Calls to
  `session` itself are skipped.
- `script`: the run's script runs again; each call it makes is checked against the record
  (same sequence number, server, tool and arguments, compared as recorded: redacted). A call
  that matches is answered from the record when its tool is read-only (`readOnlyHint`) and the
  record holds the answer whole, and sent for real otherwise. The first call that differs is
  refused (the script's `mcp.callTool` throws) and ends the replay with `replay_divergence`;
  so does a script that makes fewer calls than its record.
  With `until`, calls after that sequence number are sent for real, unchecked. `script` runs
  an edited version of the script instead, checked against the same record.

Either way the replay is itself a run on the timeline (`replay_of` names the original).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types

from capabilities import contract
from capabilities.contract import ToolError
from capabilities.session_server.redaction import REDACTED, Redactor, session_secrets
from capabilities.session_server.replay_rules import compare
from capabilities.session_server.store import TimelineReader, TimelineUnavailable, timeline_dir

from .bridge import BridgeError

SKIPPED_SERVERS = frozenset({"session"})


class Replay:
    """Replays for one runtime: `run_script(language, code, call_tool, replay_of, on_run)` runs a
    script through the runtime with `call_tool` as its bridge (returning its result)."""

    def __init__(self, call_tool: Callable[..., Awaitable[dict[str, Any]]], read_only: Callable[[str, str], bool],
                 run_script: Callable[..., Awaitable[types.CallToolResult]], timeline: Any,
                 known_secrets: tuple[str, ...] = ()) -> None:
        self._call_tool = call_tool
        self._read_only = read_only
        self._run_script = run_script
        self._timeline = timeline
        self._redactor = timeline.redactor if timeline is not None else Redactor(session_secrets(extra=known_secrets))

    async def replay(self, run: str, mode: str, until: int | None, script: str | None = None) -> types.CallToolResult:
        start, calls = await anyio.to_thread.run_sync(self._read, run)
        if until is not None:
            checked = [entry for entry in calls if entry["seq"] <= until]
        else:
            checked = calls
        if mode == "calls":
            return await self._replay_calls(run, checked)
        return await self._replay_script(run, start, calls, until, script)

    def _read(self, run: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        folder = self._timeline.folder if self._timeline is not None else timeline_dir()
        try:
            reader = TimelineReader(folder)
        except TimelineUnavailable as exc:
            raise ToolError("unavailable", str(exc)) from exc
        with reader:
            start = reader.run_start(run)
            if start is None:
                raise ToolError("not_found", f"no run {run!r} on the timeline",
                                hint="timeline_query lists the runs (entries of kind run_start)", field="run")
            return start, [self._with_images(reader, entry) for entry in reader.run_calls(run)]

    @staticmethod
    def _with_images(reader: TimelineReader, entry: dict[str, Any]) -> dict[str, Any]:
        """The recorded answer with its image blocks' data read back from their files."""
        result = entry.get("result")
        if not isinstance(result, dict):
            return entry
        content = []
        for block in result.get("content", []):
            if isinstance(block, dict) and block.get("type") == "image":
                data = reader.image_base64(block.get("path", ""))
                if data is None:
                    entry = {**entry, "result": None}  # not whole any more: never answered from
                    return entry
                block = {"type": "image", "mimeType": block.get("mimeType", "image/png"),
                         "data": data}
            content.append(block)
        return {**entry, "result": {**result, "content": content}}

    # -- calls ------------------------------------------------------------------------------

    async def _replay_calls(self, run: str, calls: list[dict[str, Any]]) -> types.CallToolResult:
        recorder = None
        call = self._call_tool
        if self._timeline is not None:
            recorder = self._timeline.start_run("replay", "", call, replay_of=run, mode="calls")
            call = recorder.call_tool
        steps: list[dict[str, Any]] = []
        divergence: dict[str, Any] | None = None
        for entry in calls:
            step = {"seq": entry["seq"], "server": entry.get("server"), "tool": entry.get("tool")}
            steps.append(step)
            if entry.get("server") in SKIPPED_SERVERS:
                step.update(outcome="skipped", reason="calls to the session server are not replayed")
                continue
            arguments = entry.get("arguments")
            if REDACTED in json.dumps(arguments, ensure_ascii=False):
                divergence = _diverged(step, "its recorded arguments held a secret, which the timeline does not "
                                             "keep; it cannot be sent again")
                break
            try:
                answer = await call(entry["server"], entry["tool"], arguments)
            except BridgeError as exc:
                answer = {"isError": True, "content": [{"type": "text", "text": str(exc)}],
                          "structuredContent": {"error": {"kind": "bridge", "message": str(exc)}}}
            if entry.get("status") == "pending":
                step.update(outcome="sent", reason="the record has no answer to compare with")
                continue
            reason = compare(entry["server"], entry["tool"], entry, answer)
            if reason is not None:
                divergence = _diverged(step, reason)
                break
            step["outcome"] = "matched"
        return self._report(run, "calls", recorder, steps, divergence)

    # -- script -----------------------------------------------------------------------------

    async def _replay_script(self, run: str, start: dict[str, Any], calls: list[dict[str, Any]],
                             until: int | None, script: str | None) -> types.CallToolResult:
        detail = start.get("detail") or {}
        language, code = detail.get("language"), script if script is not None else detail.get("script")
        if language not in ("js", "py") or not isinstance(code, str):
            raise ToolError("not_found", f"run {run!r} has no script to run again (it is a {language} run)",
                            hint="replay it with mode 'calls'")
        records = {entry["seq"]: entry for entry in calls}
        steps: list[dict[str, Any]] = []
        divergence: dict[str, Any] | None = None
        seq = 0

        async def answer(server: str, tool: str, args: Any) -> dict[str, Any]:
            nonlocal seq, divergence
            if divergence is not None:
                raise BridgeError(f"replay_divergence: {divergence['message']}")
            seq += 1
            step: dict[str, Any] = {"seq": seq, "server": server, "tool": tool}
            steps.append(step)
            if until is not None and seq > until:
                step["outcome"] = "sent"
                return await self._call_tool(server, tool, args)
            record = records.get(seq)
            reason = None
            if record is None:
                reason = f"the script made a call {seq} ({server}.{tool}); the recorded run made {len(records)}"
            elif (record.get("server"), record.get("tool")) != (server, tool):
                reason = f"it called {server}.{tool}; the record has {record.get('server')}.{record.get('tool')}"
            else:
                now = self._redactor.value(args if args is not None else {})
                if not _same(record.get("arguments") or {}, now):
                    reason = f"its arguments differ from the record: {_first_difference(record.get('arguments'), now)}"
            if reason is not None:
                divergence = _diverged(step, reason)
                raise BridgeError(f"replay_divergence: {divergence['message']}")
            assert record is not None
            if (self._read_only(server, tool) and isinstance(record.get("result"), dict)
                    and record.get("status") != "pending"):
                step["outcome"] = "answered_from_record"
                return record["result"]
            result = await self._call_tool(server, tool, args)
            step["outcome"] = "sent"
            if record.get("status") != "pending":
                differs = compare(server, tool, record, result)
                if differs:
                    step["answer_differs"] = differs
            return result

        run_ids: list[str] = []
        outcome = await self._run_script(language, code, answer, replay_of=run, on_run=run_ids.append,
                                         limits=detail.get("limits") or {})
        expected = max((s for s in records if until is None or s <= until), default=0)
        if divergence is None and seq < expected:
            step = {"seq": seq + 1, "server": records[seq + 1].get("server"), "tool": records[seq + 1].get("tool")}
            steps.append(step)
            divergence = _diverged(step, f"the script ended after {seq} calls; the record has {expected}")
        text = next((b.text for b in outcome.content if isinstance(b, types.TextContent)), "")
        return self._report(run, "script", run_ids[0] if run_ids else None, steps, divergence,
                            script={"outcome": "error" if outcome.is_error else "ok", "text": text[:2000]})

    # -- the answer -------------------------------------------------------------------------

    def _report(self, run: str, mode: str, recorder: Any, steps: list[dict[str, Any]],
                divergence: dict[str, Any] | None, **extra: Any) -> types.CallToolResult:
        replay_run = recorder if isinstance(recorder, str) or recorder is None else recorder.run
        body: dict[str, Any] = {"run": run, "mode": mode, "steps": steps, **extra}
        if replay_run is not None:
            body["replay_run"] = replay_run
        if divergence is None:
            result = contract.success({**body, "status": "matched"},
                                      f"replay of {run} ({mode}): {len(steps)} calls matched their record")
        else:
            result = contract.failure(ToolError("replay_divergence", divergence["message"], step=divergence["seq"],
                                                hint="timeline_query with this run shows what was recorded"),
                                      extra={**body, "status": "diverged", "divergence": divergence})
        if recorder is not None and not isinstance(recorder, str):
            recorder.end(result)
        return result


def _diverged(step: dict[str, Any], reason: str) -> dict[str, Any]:
    step.update(outcome="diverged", reason=reason)
    return {"seq": step["seq"], "server": step.get("server"), "tool": step.get("tool"), "reason": reason,
            "message": f"call {step['seq']} ({step.get('server')}.{step.get('tool')}) diverged from the record: "
                       f"{reason}"}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _same(recorded: Any, now: Any) -> bool:
    """`now` is what was recorded, where the record's `[redacted]` stands for any text: the writer
    hid secrets it learned in any run of the session, which this process does not all know."""
    if isinstance(recorded, str) and isinstance(now, str) and REDACTED in recorded:
        return _matches_redacted(recorded, now)
    if isinstance(recorded, dict) and isinstance(now, dict):
        return recorded.keys() == now.keys() and all(_same(recorded[key], now[key]) for key in recorded)
    if isinstance(recorded, list) and isinstance(now, list):
        return len(recorded) == len(now) and all(map(_same, recorded, now))
    return _canonical(recorded) == _canonical(now)


def _matches_redacted(recorded: str, now: str) -> bool:
    """`recorded`'s text around each `[redacted]` found in `now` in order, something in each gap.
    No regular expression: one built from a script's text with many markers would backtrack."""
    first, *middle, last = recorded.split(REDACTED)
    if not now.startswith(first):
        return False
    at = len(first)
    for part in middle:
        found = now.find(part, at + 1)
        if found < 0:
            return False
        at = found + len(part)
    return len(now) - len(last) > at and now.endswith(last)


def _first_difference(before: Any, now: Any, where: str = "") -> str:
    if isinstance(before, dict) and isinstance(now, dict):
        for key in sorted({*before, *now}):
            if not _same(before.get(key), now.get(key)):
                return _first_difference(before.get(key), now.get(key), f"{where}.{key}" if where else key)
    if isinstance(before, list) and isinstance(now, list):
        if len(before) != len(now):
            return f"{where or 'arguments'}: {len(now)} items now, {len(before)} recorded"
        for index, (a, b) in enumerate(zip(before, now, strict=True)):
            if not _same(a, b):
                return _first_difference(a, b, f"{where}[{index}]")
    shown = [json.dumps(v, ensure_ascii=False)[:100] for v in (now, before)]
    return f"{where or 'arguments'} is {shown[0]} now, {shown[1]} when recorded"
