"""The `session` server's tools: `timeline_query`, `timeline_export`, `timeline_replay`,
`screen_video`.

Reading is done here, on a read-only connection to the timeline (`store.TimelineReader`).
Replaying needs the other capability servers and the sandbox, which only the runtime has: the
runtime serves this server in its own process and hands it its replayer (`SessionState.replayer`);
run standalone (`python -m capabilities.session_server`), the server reads the timeline but
answers `timeline_replay` with `unavailable`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field

from capabilities import contract
from capabilities.contract import OutputModel, ToolError, ToolSpec
from capabilities.session import data_dir

from . import export
from .store import TimelineReader, TimelineUnavailable, events_iter, timeline_dir

INLINE_JSONL_CHARS = 32 * 1024
"""`timeline_export` returns the JSON Lines inline too when they are at most this long."""

Replayer = Callable[[str, str, "int | None", "str | None"], Awaitable[types.CallToolResult]]
Video = Callable[[str, "int | None"], Awaitable[dict[str, Any]]]


@dataclass
class SessionState:
    """The server's state: where the timeline is, its reader (opened at first use: the runtime
    makes the database at its first run), and the runtime's replayer when served in-process."""

    folder: Path = field(default_factory=timeline_dir)
    replayer: Replayer | None = None
    flush: Callable[[], None] | None = None
    """Waits until the events queued so far are written (the runtime's writer, in-process)."""
    video: Video | None = None
    """The session's screen recorder, through the runtime's oversight relay (in-process)."""
    _reader: TimelineReader | None = None

    def reader(self) -> TimelineReader:
        """The reader, opened at first use; every event recorded so far is on disk when it answers."""
        if self.flush is not None:
            self.flush()
        if self._reader is None:
            try:
                self._reader = TimelineReader(self.folder)
            except TimelineUnavailable as exc:
                raise ToolError("unavailable", str(exc), hint="run a script first; the timeline starts with it") \
                    from exc
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


Since = float | str


class QueryArgs(Args):
    since: Since | None = Field(None, description="Only entries at or after this time: epoch seconds, or ISO 8601 "
                                "(2026-05-09T10:00:00Z).")
    run: str | None = Field(None, description="Only this run (the `run` of an entry).")
    server: str | None = Field(None, description="Only calls to this capability server.")
    limit: int = Field(50, ge=1, le=500, description="At most this many entries.")
    offset: int = Field(0, ge=0, description="Skip this many entries (the `next_offset` of the last page).")


class ExportArgs(Args):
    format: Literal["jsonl", "html"] = Field(description="jsonl: one entry a line; html: a self-contained report "
                                             "with the screenshots inline.")
    run: str | None = Field(None, description="Only this run (default: the whole timeline).")
    since: Since | None = Field(None, description="Only entries at or after this time (as in timeline_query).")


class ReplayArgs(Args):
    run: str = Field(min_length=1, description="The run to replay (the `run` of its entries).")
    mode: Literal["calls", "script"] = Field(description="calls: re-issue the run's capability calls in order and "
                                             "compare each answer with its record; script: run its script again, "
                                             "read-only calls that match their record answered from it.")
    until: int | None = Field(None, ge=1, description="Check calls up to this sequence number only; later ones "
                              "are sent unchecked (script) or not at all (calls).")
    script: str | None = Field(None, description="mode script only: run this version of the script instead of the "
                               "recorded one, checked against the record call by call.")


class VideoArgs(Args):
    action: Literal["start", "stop", "status"] = Field(description="start or stop recording the screen, or read "
                                                       "the recorder's state and segments.")
    segmentSeconds: int | None = Field(None, ge=2, le=600, description="start: the length of each file (default 60).")


class QueryOutput(OutputModel):
    entries: list[dict[str, Any]] = Field(description="Oldest first: run_start, call (merged with its answer: "
                                          "status ok|error|pending, summary, error_kind, error_message, screenshots "
                                          "paths, duration_ms), run_end. Each has run, seq, time, controls.")
    count: int
    next_offset: int | None = Field(None, description="The offset of the next page, when there may be more.")


class ExportOutput(OutputModel):
    path: str = Field(description="The file written (in the timeline's folder, the runtime's own).")
    format: str
    entries: int
    jsonl: str | None = Field(None, description="The JSON Lines themselves, when short enough.")


REPLAY_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run": {"type": "string"}, "mode": {"type": "string"},
        "replay_run": {"type": "string", "description": "The replay's own run on the timeline."},
        "status": {"type": "string", "enum": ["matched"]},
        "steps": {"type": "array", "items": {"type": "object"},
                  "description": "Per call: seq, server, tool, outcome (matched, answered_from_record, diverged, "
                                 "skipped) and reason."},
    },
    "required": ["run", "mode", "status", "steps"],
}


VIDEO_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "recording": {"type": "boolean"},
        "startedBy": {"type": ["string", "null"], "description": "operator or script"},
        "error": {"type": ["string", "null"], "description": "Why recording stopped by itself."},
        "folder": {"type": "string"},
        "segmentSeconds": {"type": "integer"},
        "keep": {"type": "object", "description": "The retention limit: megabytes, hours."},
        "segments": {"type": "array", "items": {"type": "object"},
                     "description": "Oldest first: name, bytes, end (epoch seconds); the name is its start."},
    },
    "required": ["recording", "folder", "segments"],
}


def parse_since(value: Since | None) -> float | None:
    if value is None or isinstance(value, float | int):
        return value
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise ToolError("invalid_arguments", f"since {value!r} is neither epoch seconds nor an ISO 8601 time",
                        field="since") from exc


async def query(state: SessionState, args: QueryArgs) -> types.CallToolResult:
    since = parse_since(args.since)

    def read() -> list[dict[str, Any]]:
        return state.reader().entries(since=since, run=args.run, server=args.server, limit=args.limit,
                                      offset=args.offset)

    entries = await anyio.to_thread.run_sync(read)
    for entry in entries:
        entry.pop("result", None)  # the summary says it; the export has it whole
    more = len(entries) == args.limit
    out = QueryOutput(entries=entries, count=len(entries), next_offset=args.offset + len(entries) if more else None)
    return contract.success(out.model_dump(mode="json"), f"{len(entries)} timeline entries")


async def export_timeline(state: SessionState, args: ExportArgs) -> types.CallToolResult:
    since = parse_since(args.since)

    def write() -> ExportOutput:
        reader = state.reader()
        entries = list(events_iter(reader, since=since, run=args.run))
        if args.run is not None and not entries:
            raise ToolError("not_found", f"no run {args.run!r} on the timeline",
                            hint="timeline_query lists the runs (kind run_start)")
        stamp = time.strftime("%Y%m%dT%H%M%S")
        name = f"timeline-{args.run or 'all'}-{stamp}.{args.format}".replace("/", "_")
        if args.format == "jsonl":
            text = export.jsonl(entries)
            path = reader.write_export(name, text.encode())
            return ExportOutput(path=str(path), format="jsonl", entries=len(entries),
                                jsonl=text if len(text) <= INLINE_JSONL_CHARS else None)
        title = f"codedesk timeline — {'run ' + args.run if args.run else 'session'}"
        path = reader.write_export(name, export.html_report(reader, entries, title, _videos(entries)).encode())
        return ExportOutput(path=str(path), format="html", entries=len(entries))

    out = await anyio.to_thread.run_sync(write)
    return contract.success(out.model_dump(mode="json"), f"{out.entries} entries written to {out.path}")


def _videos(entries: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """The screen video's segments (`<data>/video`) that overlap the entries' time: (path, start, end)."""
    if not entries:
        return []
    from runtime.desktop.video import segment_times

    first, last = entries[0]["time"], entries[-1]["time"]
    return [(path, start, end) for path, start, end in segment_times(data_dir() / "video")
            if start <= last and end >= first]


async def replay(state: SessionState, args: ReplayArgs) -> types.CallToolResult:
    if state.replayer is None:
        raise ToolError("unavailable", "replay runs inside the runtime, which calls the other capability servers; "
                        "this session server runs on its own", hint="call timeline_replay from a run_js / run_py script")
    if args.script is not None and args.mode != "script":
        raise ToolError("invalid_arguments", "script is for mode 'script' only", field="script")
    if state.flush is not None:
        await anyio.to_thread.run_sync(state.flush)
    return await state.replayer(args.run, args.mode, args.until, args.script)


async def screen_video(state: SessionState, args: VideoArgs) -> types.CallToolResult:
    if state.video is None:
        raise ToolError("unavailable", "the screen recorder is reached through the runtime; this session server runs "
                        "on its own", hint="call screen_video from a run_js / run_py script")
    if args.segmentSeconds is not None and args.action != "start":
        raise ToolError("invalid_arguments", "segmentSeconds is for action 'start' only", field="segmentSeconds")
    from runtime.oversight import VideoUnavailable

    try:
        video = await state.video(args.action, args.segmentSeconds)
    except VideoUnavailable as exc:
        raise ToolError(exc.kind, str(exc), hint="the operator records with `codedesk desktop up --video`") from exc
    said = "recording" if video["recording"] else "not recording"
    return contract.success(video, f"screen video: {said}, {len(video['segments'])} segment(s) in {video['folder']}")


READ_ONLY = {"read_only_hint": True, "open_world_hint": False}

TOOLS: list[ToolSpec[SessionState]] = [
    ToolSpec(name="timeline_query", args=QueryArgs, output=QueryOutput, run=query, annotations=READ_ONLY,
             description="The session's timeline: every run_js / run_py run and each capability call it made "
                         "(arguments with secrets redacted, a summary of the answer, the error, screenshots taken, "
                         "who had the controls), oldest first. Filter by since, run, server; page with limit/offset."),
    ToolSpec(name="timeline_export", args=ExportArgs, output=ExportOutput, run=export_timeline,
             annotations={"read_only_hint": False, "destructive_hint": False, "open_world_hint": False},
             description="Write the timeline (or one run) to a file: jsonl, or a self-contained HTML report with the "
                         "screenshots inline. Returns its path, and the JSON Lines inline when short."),
    ToolSpec(name="timeline_replay", args=ReplayArgs, output=REPLAY_OUTPUT, run=replay,
             annotations={"read_only_hint": False, "destructive_hint": True, "open_world_hint": True},
             description="Re-run a recorded run against the session now. mode calls: re-issue its capability calls in "
                         "order, each answer compared with its record (status, URL, text); mode script: run its script "
                         "again, read-only calls that match the record answered from it. Fails with kind "
                         "replay_divergence at the first call that differs, saying which and why."),
    ToolSpec(name="screen_video", args=VideoArgs, output=VIDEO_OUTPUT, run=screen_video,
             annotations={"read_only_hint": False, "destructive_hint": False, "open_world_hint": False},
             description="Record the screen to video files (mp4 segments in <data>/video, kept within the "
                         "operator's retention limit), stop, or list them. A recording the operator started cannot "
                         "be stopped here."),
]
