"""The hub's state: one SQLite database (WAL) in the hub's data directory.

It holds the sessions (their state, settings, token hash, the runtime token the hub forwards
with, and where the backend keeps them), the viewer links (so a revocation survives a restart)
and the timeline of every state change. The backend is the truth about what runs; this store
is the truth about what was asked for, and the hub reconciles the two at start.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY,
  state TEXT NOT NULL,
  image TEXT NOT NULL,
  resources TEXT NOT NULL,
  idle_timeout_s INTEGER,
  ttl_s INTEGER,
  metadata TEXT NOT NULL,
  token_hash TEXT,
  runtime_token TEXT NOT NULL,
  backend_ref TEXT NOT NULL,
  error TEXT,
  created_at REAL NOT NULL,
  claimed_at REAL,
  last_activity REAL NOT NULL,
  state_since REAL NOT NULL,
  ended_reason TEXT
);
CREATE TABLE IF NOT EXISTS viewer_links (
  id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL,
  mode TEXT NOT NULL,
  created_at REAL NOT NULL,
  expires_at REAL NOT NULL,
  revoked_at REAL
);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  ts REAL NOT NULL,
  session_id TEXT,
  event TEXT NOT NULL,
  detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, seq);
"""


@dataclass
class SessionRecord:
    """One session as the hub knows it."""

    id: str
    state: str
    image: str
    resources: dict[str, Any]
    idle_timeout_s: int | None
    ttl_s: int | None
    metadata: dict[str, str]
    token_hash: str | None
    runtime_token: str
    backend_ref: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    created_at: float = 0.0
    claimed_at: float | None = None
    last_activity: float = 0.0
    state_since: float = 0.0
    ended_reason: str | None = None

    def public(self, now: float | None = None) -> dict[str, Any]:
        """What the API shows of the session (never a token)."""
        now = time.time() if now is None else now
        start = self.claimed_at or self.created_at
        return {
            "id": self.id, "state": self.state, "image": self.image, "resources": self.resources,
            "idle_timeout_s": self.idle_timeout_s, "ttl_s": self.ttl_s, "metadata": self.metadata,
            "created_at": _iso(start), "last_activity": _iso(self.last_activity),
            "age_s": round(now - start, 1), "idle_s": round(now - self.last_activity, 1),
            "state_since": _iso(self.state_since), "error": self.error, "ended_reason": self.ended_reason,
            "backend_object": {k: v for k, v in self.backend_ref.items() if k != "ports"},
        }


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


_JSON_COLUMNS = ("resources", "metadata", "backend_ref")


class Store:
    """The SQLite database, shared by the hub's event loop and its worker threads."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = data_dir / "hub.sqlite3"
        fresh = not path.exists()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10)
        if fresh:
            os.chmod(path, 0o600)  # it holds the sessions' runtime tokens
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
        self.path = path

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- meta
    def meta(self, key: str, default_factory=lambda: secrets.token_hex(16)) -> str:
        """A persistent value of the hub (its id, its link-signing key), made once."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            if row:
                return row[0]
            value = default_factory()
            self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))
            return value

    # -- sessions
    def insert(self, rec: SessionRecord) -> None:
        row = self._row(rec)
        with self._lock:
            self._db.execute(f"INSERT INTO sessions ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                             tuple(row.values()))

    def update(self, rec: SessionRecord) -> None:
        row = self._row(rec)
        row.pop("id")
        with self._lock:
            self._db.execute(f"UPDATE sessions SET {', '.join(f'{k} = ?' for k in row)} WHERE id = ?",
                             (*row.values(), rec.id))

    def get(self, session_id: str) -> SessionRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return self._record(row) if row else None

    def all(self, include_deleted: bool = False) -> list[SessionRecord]:
        query = "SELECT * FROM sessions" + ("" if include_deleted else " WHERE state != 'deleted'")
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created_at").fetchall()
        return [self._record(r) for r in rows]

    def touch_many(self, activity: dict[str, float]) -> None:
        with self._lock:
            self._db.executemany("UPDATE sessions SET last_activity = ? WHERE id = ? AND last_activity < ?",
                                 [(ts, sid, ts) for sid, ts in activity.items()])

    @staticmethod
    def _row(rec: SessionRecord) -> dict[str, Any]:
        row = dict(rec.__dict__)
        for key in _JSON_COLUMNS:
            row[key] = json.dumps(row[key])
        return row

    @staticmethod
    def _record(row: sqlite3.Row) -> SessionRecord:
        data = dict(row)
        for key in _JSON_COLUMNS:
            data[key] = json.loads(data[key])
        return SessionRecord(**data)

    # -- viewer links
    def add_link(self, link_id: str, session_id: str, mode: str, expires_at: float) -> None:
        with self._lock:
            self._db.execute("INSERT INTO viewer_links (id, session_id, mode, created_at, expires_at) "
                             "VALUES (?, ?, ?, ?, ?)", (link_id, session_id, mode, time.time(), expires_at))

    def link(self, link_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM viewer_links WHERE id = ?", (link_id,)).fetchone()
        return dict(row) if row else None

    def revoke_link(self, link_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE viewer_links SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                             (time.time(), link_id))

    def revoke_links_of(self, session_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE viewer_links SET revoked_at = ? WHERE session_id = ? AND revoked_at IS NULL",
                             (time.time(), session_id))

    # -- timeline
    def event(self, session_id: str | None, event: str, detail: str = "") -> None:
        with self._lock:
            self._db.execute("INSERT INTO events (ts, session_id, event, detail) VALUES (?, ?, ?, ?)",
                             (time.time(), session_id, event, detail))

    def events(self, session_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT ts, event, detail FROM events WHERE session_id = ? ORDER BY seq",
                                    (session_id,)).fetchall()
        return [{"at": _iso(r["ts"]), "event": r["event"], "detail": r["detail"]} for r in rows]
