"""The session's timeline on disk: one SQLite database (WAL, append-only), and the screenshots
of its calls as files beside it.

    <timeline>/timeline.db      the events table (schema below)
    <timeline>/shots/           image blocks of results, <run>-<seq>-<n>.png.b64, referenced by path:
                                the base64 text the server sent, kept as it came (decoding 200 KB
                                took 0.8 ms holding the GIL, on every screenshot of every run;
                                what reads them wants base64 again), checked when read
    <timeline>/exports/         what timeline_export writes

`<timeline>` is `<data>/timeline` (`timeline_dir`), made by the runtime, the one writer, mode
0700 and owned by the runtime's user: root in a session started as root, so neither the desktop
user nor the programs scripts start can read it; the runtime reads it for the `session` server,
which it serves in its own process. The folder is opened once, without following links, and
checked to be a folder of the opening user's; every path under it is then reached through
that descriptor (`/proc/self/fd/N/...`), so renaming or replacing the folder later changes
nothing for the open store.

One event a row, never changed or deleted (triggers refuse it). Kinds:

    run_start   a run_js / run_py call began: detail {language, script, limits, replay_of?}
    call        a capability call of the run was sent: server, tool, arguments
    result      its answer: summary, result (whole when small), error_kind/message,
                screenshots, duration_ms
    run_end     the run ended: detail {outcome: ok|error, calls}, error_kind/message, summary
    approval    a person was asked to approve the call `seq` (the operator's policy): detail
                {rule, answer: accept|decline|cancel|timeout|unasked}; controls "person" when
                someone answered
    input       a person's pointer and key input at a control viewer, coalesced (about one
                event a second of input): run "", detail {inputs, since, until}; controls "person"

`controls` says who had the controls at that moment: "person" while someone held the screen
from the viewer (the input lease), else "agent"; an approval answered by a person is "person". `seq` is the call's
number within its run (1, 2, ...), 0 for the run's own events.

Writing (`TimelineWriter`): `write` redacts a batch of events, saves their images and inserts
them in one transaction. The runtime runs it in a process of its own (`writer_process.py`),
which commits what the runtime handed it even when the runtime is killed with SIGKILL. Reading: `TimelineReader`, a read-only
connection.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capabilities.session import data_dir

from .redaction import Redactor

log = logging.getLogger("codedesk.timeline")

DB_NAME = "timeline.db"
SHOTS = "shots"
EXPORTS = "exports"
ENABLED_ENV = "CODEDESK_TIMELINE"
"""`off` (or `0`, `false`, `no`) turns recording off."""
SHOTS_BUDGET_ENV = "CODEDESK_TIMELINE_SHOTS_MB"
SHOTS_BUDGET_MB = 1024
"""The screenshots kept, in MiB; past it a result's images are named in the record, not kept."""
BASE64_SUFFIX = ".b64"
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
IMAGES_PER_CALL = 8
SUMMARY_CHARS = 2000
RESULT_CHARS = 64 * 1024
"""A result whose JSON (images as paths) is longer is kept as its summary only."""
SCRIPT_CHARS = 256 * 1024

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    run TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    server TEXT,
    tool TEXT,
    arguments TEXT,
    summary TEXT,
    result TEXT,
    error_kind TEXT,
    error_message TEXT,
    screenshots TEXT NOT NULL DEFAULT '[]',
    controls TEXT NOT NULL DEFAULT 'agent',
    duration_ms REAL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_run ON events(run, seq);
CREATE INDEX IF NOT EXISTS events_time ON events(time);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'the timeline is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'the timeline is append-only'); END;
"""
COLUMNS = ("id", "time", "run", "seq", "kind", "server", "tool", "arguments", "summary", "result",
           "error_kind", "error_message", "screenshots", "controls", "duration_ms", "detail")
JSON_COLUMNS = ("arguments", "result", "screenshots", "detail")


class TimelineUnavailable(RuntimeError):
    """The timeline's folder or database cannot be opened; the message says why."""


def recording_enabled() -> bool:
    return os.environ.get(ENABLED_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def timeline_dir() -> Path:
    """`<data>/timeline`; or, for a runtime that may not write the data directory (a container's
    runtime that does not own /data), a folder of its own user's, named for the data directory."""
    data = data_dir()
    folder = data / "timeline"
    existing = data
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if folder.exists() or os.access(existing, os.W_OK):
        return folder
    digest = hashlib.sha256(str(data).encode()).hexdigest()[:12]
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return state / "codedesk" / f"timeline-{digest}"


def open_folder(path: Path, *, create: bool) -> int:
    """A descriptor of the timeline folder: made 0700 when `create`, never through a link,
    refused unless it is a folder of this process's user that no one else may write."""
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise TimelineUnavailable(f"cannot open the timeline folder {path}: {exc.strerror or exc}") from exc
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        os.close(fd)
        raise TimelineUnavailable(f"the timeline folder {path} is not this user's own (owner uid {info.st_uid}, "
                                  f"mode {info.st_mode & 0o777:o}); refusing to use it")
    if create:
        for sub in (SHOTS, EXPORTS):
            try:
                os.mkdir(sub, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
    return fd


def fd_path(fd: int, *parts: str) -> str:
    return os.path.join(f"/proc/self/fd/{fd}", *parts)


@dataclass(frozen=True)
class Event:
    """One event as the writer is handed it, before redaction."""

    time: float
    run: str
    seq: int
    kind: str
    server: str | None = None
    tool: str | None = None
    arguments: Any = None
    result: Any = None
    """A call's answer, the CallToolResult as scripts see it (camelCase dict)."""
    error_kind: str | None = None
    error_message: str | None = None
    controls: str = "agent"
    duration_ms: float | None = None
    detail: dict[str, Any] | None = None


_INSERT = f"INSERT INTO events ({', '.join(COLUMNS[1:])}) VALUES ({', '.join('?' * 15)})"


class TimelineWriter:
    """The one writer of a session's timeline (the runtime runs it in `writer_process`):
    `write` redacts a batch of events, saves their images and commits them together."""

    def __init__(self, folder: Path, redactor: Redactor) -> None:
        self.folder = folder
        self.redactor = redactor
        self._fd = open_folder(folder, create=True)
        self._db = sqlite3.connect(fd_path(self._fd, DB_NAME), isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # a commit survives the process, not the power
            self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            self._db.close()
            os.close(self._fd)
            raise TimelineUnavailable(f"cannot open the timeline database in {folder}: {exc}") from exc
        os.chmod(DB_NAME, 0o600, dir_fd=self._fd, follow_symlinks=False)
        self._shots_budget = int(os.environ.get(SHOTS_BUDGET_ENV, SHOTS_BUDGET_MB)) * 1024 * 1024
        self._shots_used = sum(entry.stat().st_size for entry in os.scandir(fd_path(self._fd, SHOTS)))

    def write(self, events: Iterable[Event]) -> None:
        """Record `events` in one transaction (an event that cannot be is logged and left out)."""
        rows = []
        for event in events:
            try:
                rows.append((event, self._row(event)))
            except Exception:
                log.exception("timeline: event %s %s/%s not recorded", event.kind, event.run, event.seq)
        self._insert(_INSERT, rows)

    def close(self) -> None:
        self._db.close()
        os.close(self._fd)

    def _insert(self, insert: str, rows: list[tuple[Event, tuple[Any, ...]]]) -> None:
        if not rows:
            return
        try:
            self._db.execute("BEGIN")
            self._db.executemany(insert, [row for _, row in rows])
            self._db.execute("COMMIT")
            return
        except sqlite3.Error:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        for event, row in rows:  # one by one: a full disk must not stop the runs; say what was lost
            try:
                self._db.execute(insert, row)
            except sqlite3.Error:
                log.exception("timeline: event %s %s/%s not recorded", event.kind, event.run, event.seq)

    def _row(self, event: Event) -> tuple[Any, ...]:
        redact = self.redactor
        # The arguments first: the secrets their fields carry are hidden in all that follows.
        arguments_json = redact.value_and_json(event.arguments)[1] if event.arguments is not None else None
        detail = dict(event.detail or {})
        if "script" in detail:
            detail["script"] = redact.script(detail["script"])[:SCRIPT_CHARS]
        detail, detail_json = redact.value_and_json(detail)
        summary = result_json = None
        shots: list[str] = []
        if event.result is not None:
            result, shots = self._without_images(event)
            result, text = redact.value_and_json(result)
            summary = _summary(result)
            result_json = text if len(text) <= RESULT_CHARS else None
        elif "summary" in detail:
            summary = str(detail.pop("summary"))[:SUMMARY_CHARS]
            detail_json = json.dumps(detail, ensure_ascii=False)  # without the summary now
        error_kind, message = event.error_kind, event.error_message
        if error_kind is None and isinstance(event.result, dict) and event.result.get("isError"):
            error_kind, message = _error_of(event.result)
        message = redact.text(message)[:SUMMARY_CHARS] if message else None
        return (event.time, event.run, event.seq, event.kind, event.server, event.tool, arguments_json,
                summary, result_json, error_kind, message, json.dumps(shots), event.controls,
                event.duration_ms, detail_json)

    def _without_images(self, event: Event) -> tuple[dict[str, Any], list[str]]:
        """The result with each image block's data replaced by the path of its saved file."""
        result = event.result
        blocks = result.get("content") if isinstance(result, dict) else None
        if not isinstance(blocks, list) or not any(isinstance(b, dict) and b.get("type") == "image" for b in blocks):
            return result, []
        shots: list[str] = []
        content = []
        for block in blocks:
            if not (isinstance(block, dict) and block.get("type") == "image"):
                content.append(block)
                continue
            kept = {"type": "image", "mimeType": block.get("mimeType", "image/png")}
            path = self._save_image(event, len(shots) + 1, block) if len(shots) < IMAGES_PER_CALL else None
            if path is not None:
                shots.append(path)
                kept["path"] = path
            else:
                kept["omitted"] = "past the timeline's image limits"
            content.append(kept)
        return {**result, "content": content}, shots

    def _save_image(self, event: Event, n: int, block: dict[str, Any]) -> str | None:
        text = block.get("data")
        try:
            data = text.encode("ascii") if isinstance(text, str) else b""
        except UnicodeEncodeError:  # not base64; the alphabet is checked when it is read
            return None
        if not data or self._shots_used + len(data) > self._shots_budget:
            return None
        ext = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}.get(block.get("mimeType"), "bin")
        name = f"{_safe(event.run)}-{event.seq}-{n}.{ext}{BASE64_SUFFIX}"
        try:
            fd = os.open(f"{SHOTS}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=self._fd)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        except OSError:
            log.exception("timeline: screenshot %s not saved", name)
            return None
        self._shots_used += len(data)
        return f"{SHOTS}/{name}"


def _error_of(result: dict[str, Any]) -> tuple[str, str]:
    """The kind and message of a failed result (the contract's error object, else its text)."""
    structured = result.get("structuredContent")
    error = structured.get("error") if isinstance(structured, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error.get("kind") or "failed"), error["message"]
    text = " ".join(b.get("text", "") for b in result.get("content", ()) if isinstance(b, dict) and b.get("type") == "text")
    return "failed", text or "the call failed"


def _safe(run: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in run)[:64]


def _summary(result: Any) -> str:
    if not isinstance(result, dict):
        return json.dumps(result, ensure_ascii=False)[:SUMMARY_CHARS]
    if "structuredContent" in result:
        text = json.dumps(result["structuredContent"], ensure_ascii=False)
    else:
        text = " ".join(b.get("text", "") for b in result.get("content", ()) if isinstance(b, dict)
                        and b.get("type") == "text")
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1] + "…"


class TimelineReader:
    """Read-only access to a timeline folder (its database and screenshots)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else timeline_dir()
        if not (self.folder / DB_NAME).exists():
            raise TimelineUnavailable(f"no timeline at {self.folder}: nothing was recorded yet, or recording is "
                                      f"off (${ENABLED_ENV}=off)")
        self._fd = open_folder(self.folder, create=False)
        try:
            self._db = sqlite3.connect(f"file:{fd_path(self._fd, DB_NAME)}?mode=ro", uri=True,
                                       check_same_thread=False)
            self._db.execute("SELECT 1 FROM events LIMIT 1")
        except sqlite3.Error as exc:
            os.close(self._fd)
            raise TimelineUnavailable(f"cannot read the timeline database in {self.folder}: {exc}") from exc
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()
        os.close(self._fd)

    def __enter__(self) -> TimelineReader:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _rows(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        out = []
        for row in rows:
            item = dict(zip(COLUMNS, row, strict=True))
            for column in JSON_COLUMNS:
                if item[column] is not None:
                    item[column] = json.loads(item[column])
            out.append(item)
        return out

    def entries(self, *, since: float | None = None, run: str | None = None, server: str | None = None,
                limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """Runs' starts and ends and their calls (each merged with its result), oldest first."""
        where, params = ["kind != 'result'"], []
        if since is not None:
            where.append("time >= ?")
            params.append(since)
        if run is not None:
            where.append("run = ?")
            params.append(run)
        if server is not None:
            where.append("server = ?")
            params.append(server)
        rows = self._rows(f"SELECT {', '.join(COLUMNS)} FROM events WHERE {' AND '.join(where)} "
                          f"ORDER BY id LIMIT ? OFFSET ?", [*params, limit, offset])
        calls = [(row["run"], row["seq"]) for row in rows if row["kind"] == "call"]
        results: dict[tuple[str, int], dict[str, Any]] = {}
        for chunk in range(0, len(calls), 400):
            part = calls[chunk:chunk + 400]
            clause = " OR ".join("(run = ? AND seq = ?)" for _ in part)
            for row in self._rows(f"SELECT {', '.join(COLUMNS)} FROM events WHERE kind = 'result' AND ({clause})",
                                  [value for pair in part for value in pair]):
                results[(row["run"], row["seq"])] = row
        return [_entry(row, results.get((row["run"], row["seq"]))) for row in rows]

    def run_calls(self, run: str) -> list[dict[str, Any]]:
        """Every call of `run`, in order, merged with its result."""
        return [entry for entry in self.entries(run=run, limit=1_000_000) if entry["kind"] == "call"]

    def run_start(self, run: str) -> dict[str, Any] | None:
        rows = self._rows(f"SELECT {', '.join(COLUMNS)} FROM events WHERE run = ? AND kind = 'run_start' LIMIT 1",
                          [run])
        return rows[0] if rows else None

    def image(self, path: str) -> bytes | None:
        """A screenshot's bytes by its recorded path (`shots/...`), None if it is not there."""
        text = self.image_base64(path)
        return None if text is None else base64.b64decode(text)

    def image_base64(self, path: str) -> str | None:
        """A screenshot as base64 text (nothing but its alphabet: an export puts it in a `data:`
        URL), None if it is not there or is not base64. Files saved before screenshots were kept
        as base64 hold the bytes themselves."""
        name = path.removeprefix(f"{SHOTS}/")
        if "/" in name or name.startswith("."):
            return None
        try:
            fd = os.open(f"{SHOTS}/{name}", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._fd)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        if not name.endswith(BASE64_SUFFIX):
            return base64.b64encode(data).decode("ascii")
        if data.translate(None, _BASE64_ALPHABET) or len(data) % 4:
            try:  # what the server sent, as it sent it: whitespace or stray characters are decoded away
                data = base64.b64encode(base64.b64decode(data, validate=False))
            except ValueError:
                return None
        return data.decode("ascii") if data else None

    def write_export(self, name: str, data: bytes) -> Path:
        """Write an export file under `<timeline>/exports/` (the runtime's reader only)."""
        fd = os.open(f"{EXPORTS}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=self._fd)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return self.folder / EXPORTS / name


def _entry(row: dict[str, Any], result: dict[str, Any] | None) -> dict[str, Any]:
    """One timeline entry as tools and exports show it: absent fields left out."""
    entry: dict[str, Any] = {"id": row["id"], "time": row["time"], "iso_time": iso(row["time"]), "run": row["run"],
                             "seq": row["seq"], "kind": row["kind"], "controls": row["controls"]}
    for key in ("server", "tool", "arguments", "summary", "error_kind", "error_message", "duration_ms"):
        if row[key] is not None:
            entry[key] = row[key]
    if row["detail"]:
        entry["detail"] = row["detail"]
    if row["kind"] == "call":
        if result is None:
            entry["status"] = "pending"  # no answer recorded: still running, or the runtime stopped
        else:
            entry["status"] = "error" if result["error_kind"] or result["error_message"] else "ok"
            for key in ("summary", "error_kind", "error_message", "duration_ms"):
                if result[key] is not None:
                    entry[key] = result[key]
            entry["screenshots"] = result["screenshots"]
            if result["result"] is not None:
                entry["result"] = result["result"]
            entry["answered"] = result["time"]
    return entry


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def events_iter(reader: TimelineReader, **filters: Any) -> Iterator[dict[str, Any]]:
    """Every entry matching `filters` (as `entries`), page by page."""
    offset = 0
    while True:
        page = reader.entries(**filters, limit=500, offset=offset)
        yield from page
        if len(page) < 500:
            return
        offset += 500
