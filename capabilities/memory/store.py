"""The session's memory: entries kept in SQLite (WAL) with an FTS5 index, on the session's disk.

One database, `<data>/memory/memory.db`, owned by the desktop user (the session prepares the
folder). An entry is a key (given, or made up), a text and tags; the index covers the text, the
tags and the key, and is kept in step by triggers. `recall` ranks by bm25.

Words are stemmed (porter: "deploys" finds "deploy"). A query is never handed to FTS5 as syntax: its words are taken out (`_words`) and each is
quoted, so `"a" OR *`, `NEAR(`, `col:` or a lone quote are searched as the words they contain,
never parsed as operators. Keys and tags are bound parameters.

Errors: `errors.py` (`NotFound`, `StoreUnavailable`).
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import NotFound, StoreUnavailable

DB_NAME = "memory.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_updated ON entries(updated);
CREATE TABLE IF NOT EXISTS entry_tags (
    entry INTEGER NOT NULL REFERENCES entries(id) ON DELETE CASCADE,
    tag TEXT NOT NULL,
    PRIMARY KEY (tag, entry)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(
    text, tags, key, content='entries', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS entries_ai AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts(rowid, text, tags, key) VALUES (new.id, new.text, new.tags, new.key);
END;
CREATE TRIGGER IF NOT EXISTS entries_ad AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts(entries_fts, rowid, text, tags, key) VALUES ('delete', old.id, old.text, old.tags, old.key);
END;
CREATE TRIGGER IF NOT EXISTS entries_au AFTER UPDATE ON entries BEGIN
    INSERT INTO entries_fts(entries_fts, rowid, text, tags, key) VALUES ('delete', old.id, old.text, old.tags, old.key);
    INSERT INTO entries_fts(rowid, text, tags, key) VALUES (new.id, new.text, new.tags, new.key);
END;
"""

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_WORDS = 32


@dataclass(frozen=True, kw_only=True)
class Entry:
    key: str
    text: str
    tags: list[str]
    created: float
    updated: float
    score: float | None = None


class MemoryStore:
    """The entries of one session. Thread-safe (one connection, one lock): tools call it from
    worker threads."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / DB_NAME
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(
                f"the memory store {self.path} cannot be used ({exc}); start the desktop session with "
                f"`codedesk desktop up` (it prepares {folder} for the desktop user), or set CODEDESK_DATA "
                "to its data directory") from exc
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def remember(self, text: str, key: str | None, tags: Sequence[str]) -> tuple[Entry, bool]:
        """Store `text` under `key` (a new key when None; an existing key is replaced).
        Returns the entry and whether it replaced one."""
        now = time.time()
        tags = sorted(set(tags))
        with self._transaction() as db:
            if key is None:
                key = _new_key(db)
            row = db.execute("SELECT id, created FROM entries WHERE key = ?", (key,)).fetchone()
            if row is None:
                entry_id = db.execute("INSERT INTO entries(key, text, tags, created, updated) VALUES (?, ?, ?, ?, ?)",
                                      (key, text, json.dumps(tags), now, now)).lastrowid
                created = now
            else:
                entry_id, created = row
                db.execute("UPDATE entries SET text = ?, tags = ?, updated = ? WHERE id = ?",
                           (text, json.dumps(tags), now, entry_id))
                db.execute("DELETE FROM entry_tags WHERE entry = ?", (entry_id,))
            db.executemany("INSERT INTO entry_tags(entry, tag) VALUES (?, ?)", [(entry_id, tag) for tag in tags])
        return Entry(key=key, text=text, tags=tags, created=created, updated=now), row is not None

    def recall(self, query: str, tags: Sequence[str], limit: int) -> list[Entry]:
        """The entries best matching the words of `query` (bm25, best first), having every tag."""
        match = fts_query(query)
        if match is None:
            return []
        tag_filter, params = _tag_filter(tags)
        sql = ("SELECT e.key, e.text, e.tags, e.created, e.updated, bm25(entries_fts, 1.0, 0.5, 0.5) AS score "
               "FROM entries_fts JOIN entries e ON e.id = entries_fts.rowid "
               f"WHERE entries_fts MATCH ? {tag_filter} ORDER BY score LIMIT ?")
        with self._lock:
            rows = self._db.execute(sql, (match, *params, limit)).fetchall()
        return [_entry(row[:5], score=-row[5]) for row in rows]

    def get(self, key: str) -> Entry:
        with self._lock:
            row = self._db.execute("SELECT key, text, tags, created, updated FROM entries WHERE key = ?",
                                   (key,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has the key {key!r}", hint="list shows the keys")
        return _entry(row)

    def forget(self, key: str) -> None:
        with self._transaction() as db:
            if db.execute("DELETE FROM entries WHERE key = ?", (key,)).rowcount == 0:
                raise NotFound(f"no memory has the key {key!r}; nothing was forgotten", hint="list shows the keys")

    def list(self, tags: Sequence[str], limit: int, offset: int) -> tuple[list[Entry], int]:
        """Entries having every tag, most recently updated first; and how many there are."""
        tag_filter, params = _tag_filter(tags, alias="entries")
        where = f"WHERE 1 {tag_filter}"
        with self._lock:
            total = self._db.execute(f"SELECT count(*) FROM entries {where}", params).fetchone()[0]
            rows = self._db.execute(f"SELECT key, text, tags, created, updated FROM entries {where} "
                                    "ORDER BY updated DESC, id DESC LIMIT ? OFFSET ?",
                                    (*params, limit, offset)).fetchall()
        return [_entry(row) for row in rows], total

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM entries").fetchone()[0]


def fts_query(query: str) -> str | None:
    """An FTS5 query matching any of the words of `query`, each a quoted string (never syntax);
    None when it has no words."""
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(query)))[:MAX_QUERY_WORDS]
    return " OR ".join(f'"{word}"' for word in words) if words else None


def _tag_filter(tags: Sequence[str], alias: str = "e") -> tuple[str, list[str]]:
    wanted = sorted(set(tags))
    if not wanted:
        return "", []
    marks = ", ".join("?" * len(wanted))
    return (f"AND {alias}.id IN (SELECT entry FROM entry_tags WHERE tag IN ({marks}) "
            f"GROUP BY entry HAVING count(*) = {len(wanted)})", wanted)


def _new_key(db: sqlite3.Connection) -> str:
    while True:
        key = "m-" + secrets.token_hex(4)
        if db.execute("SELECT 1 FROM entries WHERE key = ?", (key,)).fetchone() is None:
            return key


def _entry(row: Sequence, score: float | None = None) -> Entry:
    key, text, tags, created, updated = row
    return Entry(key=key, text=text, tags=json.loads(tags), created=created, updated=updated, score=score)
