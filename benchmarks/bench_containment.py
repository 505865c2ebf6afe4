"""Benchmark containment: what tracking a command's processes costs, and how fast a dead
capability server is replaced. Figures are printed beside baselines measured in the same run.

- exec of `true`, from the exec call to stream_logs reporting `completed:0`: with the command in
  control groups of its own (this machine delegates them to a root server), beside the same
  server in its fallback (`CODEDESK_EXEC_CONTAINMENT=rlimit`: processes found in /proc, caps as
  rlimits), beside a bare subprocess.Popen of `true` in this process. Goal: groups/fallback ≤ 1.1.
- a dead server's replacement: SIGKILL the exec server, then time the next call through the
  runtime's bridge until it answers (the bridge saw the death and started a successor), beside
  one call to a live server. Goal ≤ 1 s.

Usage: .venv/bin/python benchmarks/bench_containment.py [--quick]   (as root, for the groups)
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import psutil
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runtime.bridge import Bridge  # noqa: E402
from runtime.config import StdioServer  # noqa: E402


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def exec_config(data: Path, mode: str | None) -> StdioServer:
    env = {"CODEDESK_DATA": str(data)}
    if mode:
        env["CODEDESK_EXEC_CONTAINMENT"] = mode
    return StdioServer(command=sys.executable, args=("-m", "capabilities.exec"), env=env, cwd=str(REPO))


async def exec_true(session: ClientSession) -> float:
    started = time.perf_counter()
    answer = await session.call_tool("exec", {"bin": "true", "timeout": 10})
    command_id = answer.structured_content["id"]
    while True:
        logs = await session.call_tool("stream_logs", {"id": command_id, "offset": 0})
        if logs.structured_content["status"] != "running":
            assert logs.structured_content["status"] == "completed:0", logs
            return time.perf_counter() - started


async def tracking(rounds: int) -> None:
    figures = {}
    for label, mode in (("control groups", None), ("fallback (rlimit)", "rlimit")):
        data = Path(tempfile.mkdtemp(prefix="codedesk-bench-"))
        # This process's own user runs the server (root makes its own groups; see the module).
        params = StdioServerParameters(command=sys.executable, args=["-m", "capabilities.exec"], cwd=str(REPO),
                                       env={**exec_config(data, mode).env, "PATH": os.environ["PATH"]})
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                for _ in range(5):
                    await exec_true(session)
                figures[label] = ms([await exec_true(session) for _ in range(rounds)])
    popen = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.Popen(["true"]).wait()
        popen.append(time.perf_counter() - started)
    groups, fallback = figures["control groups"], figures["fallback (rlimit)"]
    print(f"exec of true to completed:0, median of {rounds}:")
    print(f"  in control groups   {groups:7.2f} ms")
    print(f"  fallback (rlimit)   {fallback:7.2f} ms")
    print(f"  bare Popen (floor)  {ms(popen):7.2f} ms")
    print(f"  ratio groups/fallback {groups / fallback:.2f} (goal <= 1.1)")


def exec_server_pid(data: Path) -> int:
    for proc in psutil.Process().children():
        if "capabilities.exec" in proc.cmdline():
            return proc.pid
    raise LookupError(f"no exec server for {data}")


async def replacement(rounds: int) -> None:
    data = Path(tempfile.mkdtemp(prefix="codedesk-bench-"))
    data.chmod(0o777)  # the bridge starts the server as the desktop user when this runs as root
    args = {"id": "20990101-000000-00000000", "offset": 0}  # answered (not found) at once
    async with Bridge({"exec": exec_config(data, None)}) as bridge:
        await bridge.call_tool("exec", "stream_logs", args)
        live, back = [], []
        for _ in range(rounds):
            started = time.perf_counter()
            await bridge.call_tool("exec", "stream_logs", args)
            live.append(time.perf_counter() - started)
            pid = exec_server_pid(data)
            pidfd = os.pidfd_open(pid)
            os.kill(pid, signal.SIGKILL)
            select.select([pidfd], [], [], 10)
            os.close(pidfd)
            started = time.perf_counter()
            answer = await bridge.call_tool("exec", "stream_logs", args)
            assert answer["structuredContent"]["error"]["kind"] == "not_found", answer
            back.append(time.perf_counter() - started)
            await anyio.sleep(0.5)
            await bridge.call_tool("exec", "stream_logs", args)  # answered: the deaths were no loop
    print(f"a dead exec server's replacement answering, median of {rounds}:")
    print(f"  death to the next answer  {ms(back):7.1f} ms (goal <= 1000)")
    print(f"  one call to a live server {ms(live):7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (CI's smoke mode)")
    quick = parser.parse_args().quick
    anyio.run(tracking, 10 if quick else 50)
    anyio.run(replacement, 2 if quick else 5)


if __name__ == "__main__":
    main()
