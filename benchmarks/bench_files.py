"""Benchmark files.search: ripgrep through the files server, beside ripgrep run directly.

The same search on a tree of 10,000 small files (100 folders; one file in a hundred holds a
match, with a line of context around it): `files.search` called over stdio by the MCP SDK client
(the server runs ripgrep, reads its JSON, sorts and pages the matches), beside `rg` started from
this process with the same pattern and context, its whole output read (the floor: the walk and
the matching). The two are timed in turns. Goal: files.search / rg ≤ 1.3.

Usage: .venv/bin/python benchmarks/bench_files.py [--quick]   (the server acts as the desktop user
when started as root, so the tree is made in a folder that user owns)
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parent.parent
PATTERN = r"needle_\d+"
CONTEXT = 1


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def make_tree(root: Path) -> None:
    """10,000 files of five lines in 100 folders; every hundredth file holds a needle."""
    for d in range(100):
        folder = root / f"d{d:02d}"
        folder.mkdir(parents=True)
        for f in range(100):
            middle = f"needle_{d * 100 + f}" if f == 7 else "hay and more hay"
            (folder / f"f{f:03d}.txt").write_text(f"line one\nline two\n{middle}\nline four\nline five\n")
    if os.geteuid() == 0:
        user = pwd.getpwnam(os.environ.get("CODEDESK_DESKTOP_USER", "desktop"))
        for folder, dirs, files in os.walk(root):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(name, user.pw_uid, user.pw_gid)


def rg_direct(root: Path) -> float:
    started = time.perf_counter()
    out = subprocess.run(["rg", "--no-config", "--context", str(CONTEXT), "--regexp", PATTERN, "--", "."],
                         cwd=root, capture_output=True, check=True)
    assert out.stdout.count(b"needle_") == 100
    return time.perf_counter() - started


async def side_by_side(root: Path, rounds: int) -> tuple[list[float], list[float]]:
    """(files.search samples, rg samples), taken in turns so the machine's load drifts over both."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "capabilities.files"], cwd=str(REPO),
                                   env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                        "CODEDESK_DATA": str(root.parent / "data")})
    served, direct = [], []
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            arguments = {"pattern": PATTERN, "root": str(root), "context": CONTEXT, "max": 100}
            await session.call_tool("search", arguments)  # warm: the page cache, the server's imports
            rg_direct(root)
            for _ in range(rounds):
                started = time.perf_counter()
                answer = await session.call_tool("search", arguments)
                served.append(time.perf_counter() - started)
                assert not answer.is_error and answer.structured_content["total"] == 100, answer.content[0].text
                direct.append(rg_direct(root))
    return served, direct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (CI's smoke mode)")
    rounds = 5 if parser.parse_args().quick else 30
    if shutil.which("rg") is None:
        sys.exit("ripgrep (rg) is not installed: run make install")
    base = Path(tempfile.mkdtemp(prefix="codedesk-bench-files-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        root = base / "tree"
        make_tree(root)
        served, direct = anyio.run(side_by_side, root, rounds)
        print(f"search of 10,000 files ({PATTERN!r}, context {CONTEXT}, 100 matches), median of {rounds}:")
        print(f"  files.search over stdio  {ms(served):7.1f} ms")
        print(f"  rg run directly          {ms(direct):7.1f} ms")
        print(f"  ratio files.search/rg    {ms(served) / ms(direct):.2f} (goal <= 1.3)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
