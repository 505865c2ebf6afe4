"""Benchmark memory.recall on 100,000 entries (goal: a median of 20 ms or less).

- `recall` of a few words through the real server over stdio, beside a bare MCP round trip to
  the same server (`list` of one entry), so the search's own cost shows;
- the store's `recall` called directly (SQLite FTS5 with bm25, no MCP);
- the same FTS5 query run with sqlite3 alone on the same database (the floor).

The 100,000 entries are sentences of a few hundred words drawn from a fixed vocabulary
(seeded), so some words are common and some rare, as notes are.

Usage: .venv/bin/python benchmarks/bench_memory.py [--quick] [--entries N]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from capabilities.memory.store import MemoryStore, fts_query  # noqa: E402

GOAL_MS = 20.0
QUERIES = ["deploy key vault", "printer jams paper", "quarterly revenue north region", "garden tomatoes"]


def fill(store: MemoryStore, entries: int) -> None:
    rng = random.Random(20)
    common = [f"word{n}" for n in range(2000)]
    rare = ["deploy", "key", "vault", "printer", "jams", "paper", "quarterly", "revenue", "north", "region",
            "garden", "tomatoes"]
    db = sqlite3.connect(store.path)
    db.execute("BEGIN")
    now = time.time()
    for n in range(entries):
        words = rng.choices(common, k=rng.randint(20, 60))
        if rng.random() < 0.02:
            words += rng.sample(rare, 3)
        db.execute("INSERT INTO entries(key, text, tags, created, updated) VALUES (?, ?, '[]', ?, ?)",
                   (f"k{n}", " ".join(words), now, now))
    db.execute("COMMIT")
    db.execute("INSERT INTO entries_fts(entries_fts) VALUES ('optimize')")
    db.close()


def report(name: str, ours: list[float], base: list[float], base_name: str) -> None:
    a, b = statistics.median(ours), statistics.median(base)
    print(f"{name:<32} {a * 1000:8.2f} ms   {base_name:<30} {b * 1000:8.2f} ms   ratio {a / b:5.2f}x")


async def main(quick: bool, entries: int) -> None:
    runs = 5 if quick else 25
    with tempfile.TemporaryDirectory() as data:
        folder = Path(data) / "memory"
        store = MemoryStore(folder)
        started = time.perf_counter()
        fill(store, entries)
        print(f"memory: {store.count():,} entries stored in {time.perf_counter() - started:.1f} s")
        floor_db = sqlite3.connect(store.path)
        sql = ("SELECT e.key, e.text, bm25(entries_fts, 1.0, 0.5, 0.5) AS s FROM entries_fts "
               "JOIN entries e ON e.id = entries_fts.rowid WHERE entries_fts MATCH ? ORDER BY s LIMIT 5")
        direct, floor = [], []
        for _ in range(runs):
            for query in QUERIES:
                t = time.perf_counter()
                store.recall(query, [], 5)
                direct.append(time.perf_counter() - t)
                t = time.perf_counter()
                floor_db.execute(sql, (fts_query(query),)).fetchall()
                floor.append(time.perf_counter() - t)
        floor_db.close()
        store.close()
        env = {**os.environ, "CODEDESK_DATA": data}
        params = StdioServerParameters(command=sys.executable, args=["-m", "capabilities.memory"], env=env,
                                       cwd=str(REPO))
        served, bare = [], []
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("recall", {"query": QUERIES[0]})
            for _ in range(runs):
                for query in QUERIES:
                    t = time.perf_counter()
                    result = await session.call_tool("recall", {"query": query, "limit": 5})
                    served.append(time.perf_counter() - t)
                    assert not result.is_error, result.content[0].text
                    t = time.perf_counter()
                    await session.call_tool("list", {"limit": 1})
                    bare.append(time.perf_counter() - t)
    print(f"medians of {len(served)} recalls of {len(QUERIES)} queries (limit 5)")
    report("memory.recall over stdio", served, bare, "memory.list of 1 over stdio")
    report("MemoryStore.recall (no MCP)", direct, floor, "the FTS5 query, sqlite3 alone")
    verdict = "meets" if statistics.median(served) * 1000 <= GOAL_MS else "misses"
    print(f"goal: recall on {entries:,} entries <= {GOAL_MS:g} ms through MCP: {verdict} it "
          f"({statistics.median(served) * 1000:.1f} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (CI's smoke mode)")
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args()
    anyio.run(main, args.quick, args.entries)
