"""Benchmark the exec capability server over stdio, against baselines measured in the same run.

- exec -> "started": latency of starting `true`, beside a bare MCP call over stdio with the
  same SDK (a baseline server in this file answering a tiny JSON text) and a bare
  subprocess.Popen of `true` in this process.
- stream_logs throughput: reading a 100 MB log from offset 0 to the end, beside the same SDK
  carrying the same number of same-sized JSON text results built by the baseline server (the
  floor without the disk), and beside reading the file directly in this process.
- exit -> completed visible: from the moment a program exits (it prints the time as its last
  act) to the moment stream_logs first reports `completed:0`, polling back to back; beside the
  round trip of one stream_logs call (the polling granularity).

Usage: .venv/bin/python benchmarks/bench_exec.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
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
sys.path.insert(0, str(REPO))

from capabilities.exec.log_store import CHUNK_BYTES  # noqa: E402

MB = 1 << 20


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def serve_baseline() -> None:
    """The baseline server: one tool, `chunk {size}`, answering JSON text shaped like stream_logs."""
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    line = "a line of log output, fifty bytes long, more or l\n"
    cache: dict[int, str] = {}

    async def list_tools(ctx, params) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]}
        return types.ListToolsResult(tools=[types.Tool(name="chunk", input_schema=schema)])

    async def call_tool(ctx, params) -> types.CallToolResult:
        size = int(params.arguments["size"])
        if size not in cache:
            cache[size] = (line * (size // len(line) + 1))[:size]
        # Encoded per call, as the exec server must: only the disk read is left out.
        text = json.dumps({"logs": cache[size], "next_offset": size, "status": "completed:0", "more": False})
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("baseline", on_list_tools=list_tools, on_call_tool=call_tool)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


async def bench(quick: bool) -> None:
    rounds = 20 if quick else 200
    log_mb = 10 if quick else 100
    exits = 5 if quick else 30
    data = Path(tempfile.mkdtemp(prefix="bench-exec-"))
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "capabilities.exec"], env={"CODEDESK_DATA": str(data)}, cwd=str(REPO)
    )
    baseline_params = StdioServerParameters(command=sys.executable, args=[__file__, "--baseline-server"], cwd=str(REPO))
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
        stdio_client(baseline_params) as (bread, bwrite),
        ClientSession(bread, bwrite) as baseline,
    ):
        await session.initialize()
        await baseline.initialize()

        async def call(tool: str, args: dict) -> dict:
            result = await session.call_tool(tool, args)
            assert not result.is_error, result.content[0].text
            return json.loads(result.content[0].text)

        async def finish(command_id: str) -> dict:
            while (r := await call("stream_logs", {"id": command_id, "offset": 0}))["status"] == "running":
                await anyio.sleep(0.01)
            return r

        # -- exec -> started ----------------------------------------------------------------
        done = (await call("exec", {"bin": "true", "timeout": 10}))["id"]
        await finish(done)
        round_trip, bare, started, popen = [], [], [], []
        for _ in range(rounds):
            t = time.perf_counter()
            await call("stream_logs", {"id": done, "offset": 0})
            round_trip.append(time.perf_counter() - t)
            t = time.perf_counter()
            await baseline.call_tool("chunk", {"size": 10})
            bare.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = await call("exec", {"bin": "true", "timeout": 10})
            started.append(time.perf_counter() - t)
            assert r["status"] == "started"
            t = time.perf_counter()
            subprocess.Popen(["true"], stdin=subprocess.DEVNULL, start_new_session=True).wait()
            popen.append(time.perf_counter() - t)
        print(f"exec -> started          median {median_ms(started):7.2f} ms  ({rounds} calls)")
        print(f"  baseline bare MCP call          {median_ms(bare):7.2f} ms   ratio {statistics.median(started) / statistics.median(bare):.2f}x")
        print(f"  baseline Popen(true).wait()     {median_ms(popen):7.2f} ms")
        print(f"  (stream_logs of a short log     {median_ms(round_trip):7.2f} ms)")

        # -- stream_logs throughput -------------------------------------------------------
        size = log_mb * 1000 * 1000
        big = (await call(
            "exec",
            {"bin": "sh", "args": ["-c", f"yes 'a line of log output, fifty bytes long, more or l' | head -c {size}"], "timeout": 300},
        ))["id"]
        await finish(big)
        t = time.perf_counter()
        offset, calls = 0, 0
        while True:
            r = await call("stream_logs", {"id": big, "offset": offset})
            offset, calls = r["next_offset"], calls + 1
            if not r["more"]:
                break
        streamed = time.perf_counter() - t
        assert offset == size
        path = data / "exec" / f"{big}.log"
        t = time.perf_counter()
        with open(path, "rb") as log:
            while log.read(CHUNK_BYTES):
                pass
        direct = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(calls):
            await baseline.call_tool("chunk", {"size": CHUNK_BYTES})
        carried = time.perf_counter() - t
        print(f"stream_logs {log_mb} MB        {size / MB / streamed:7.1f} MB/s ({calls} calls, {streamed:.2f} s)")
        print(f"  baseline SDK carrying {calls} x 1 MiB {calls * CHUNK_BYTES / MB / carried:7.1f} MB/s   ratio {streamed / carried:.2f}x")
        print(f"  baseline direct file read       {size / MB / direct:7.1f} MB/s")

        # -- exit -> completed visible ------------------------------------------------------
        delays = []
        for _ in range(exits):
            command_id = (await call(
                "exec", {"bin": "sh", "args": ["-c", "sleep 0.2; date +%s.%N"], "timeout": 10}
            ))["id"]
            while (r := await call("stream_logs", {"id": command_id, "offset": 0}))["status"] == "running":
                pass
            seen = time.time()
            assert r["status"] == "completed:0", r
            delays.append(seen - float(r["logs"]))
        print(f"exit -> completed visible median {median_ms(delays):7.2f} ms  ({exits} runs, polling back to back)")
        print(f"  baseline stream_logs round trip {median_ms(round_trip):7.2f} ms   ratio {statistics.median(delays) / statistics.median(round_trip):.2f}x")
        print(f"  baseline bare MCP call          {median_ms(bare):7.2f} ms")
    for item in (data / "exec").iterdir():
        item.unlink()
    (data / "exec").rmdir()
    data.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (10 MB log, fewer rounds)")
    parser.add_argument("--baseline-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_server:
        return serve_baseline()
    os.chdir(REPO)
    anyio.run(bench, args.quick)


if __name__ == "__main__":
    main()
