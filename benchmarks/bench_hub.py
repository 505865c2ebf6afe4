"""Benchmark the session hub on the local Docker engine, side by side in one run:

- create -> first run_js answer: cold (a new container), and from the warm pool (goal <= 0.5 s);
- resume from pause -> first answer (goal <= 0.3 s), on the MCP session opened before the pause;
- wake from sleep -> first answer (goal <= 4 s), on a new MCP session (the runtime restarted),
  timed once the pool's refill has started its session (not beside it);
- the hub's added latency on an empty run_js: the same MCP client shape through the hub and
  straight to the session's runtime (its published port and runtime token), both sessions open
  at once and their calls alternated; medians, and the median of paired differences (goal <= 1 ms);
- N sessions started at once, each running a browser task: time until all answered, failures
  (goal 0), and memory per session (the containers' cgroup memory, docker stats).

Usage: .venv/bin/python benchmarks/bench_hub.py [--image codedesk:latest] [--sessions 10] [--calls 200] [--quick] [--no-fleet]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import docker  # noqa: E402

from tests.hub.conftest import HubProcess  # noqa: E402


async def _mcp(url: str, token: str, body):  # noqa: ANN001, ANN202
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(60.0, read=300)) as client:
        async with streamable_http_client(url, http_client=client) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


def first_answer(url: str, token: str, code: str = "1 + 1") -> str:
    async def body(session):  # noqa: ANN001, ANN202
        result = await session.call_tool("run_js", {"code": code, "timeout_seconds": 120})
        return "".join(getattr(b, "text", "") for b in result.content)

    return anyio.run(_mcp, url, token, body)


def created(hub: HubProcess, **fields) -> dict:
    r = hub.api("POST", "/v1/sessions", json=fields)
    r.raise_for_status()
    return r.json()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", default="codedesk:latest")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="3 sessions at once, 50 calls")
    parser.add_argument("--no-fleet", action="store_true", help="leave out the N sessions at once")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.calls = 3, 50
    engine = docker.from_env(timeout=120)
    data = Path(tempfile.mkdtemp(prefix="bench-hub-"))
    hub = HubProcess(data, "bench-admin", "--image", args.image, "--warm", "1", "--max-sessions", "50")
    rows: list[tuple[str, str, str]] = []
    try:
        # cold: resources other than the pool's, so a new container is made
        started = time.monotonic()
        cold = created(hub, resources={"cpus": 1.5})
        assert first_answer(cold["mcp_url"], cold["token"]) == "2"
        cold_s = time.monotonic() - started
        # warm: wait for the pool, then claim from it
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not hub.api("GET", "/v1/sessions?state=warm").json()["sessions"]:
            time.sleep(0.5)
        started = time.monotonic()
        warm = created(hub)
        assert first_answer(warm["mcp_url"], warm["token"]) == "2"
        warm_s = time.monotonic() - started
        rows.append(("create -> first run_js, cold", f"{cold_s:.2f} s", ""))
        rows.append(("create -> first run_js, warm pool", f"{warm_s:.2f} s", "goal <= 0.5 s"))

        # resume from pause, on the MCP session opened before it
        async def resume(session):  # noqa: ANN001, ANN202
            await session.call_tool("run_js", {"code": "1"})
            hub.api("POST", f"/v1/sessions/{warm['id']}/pause")
            t = time.monotonic()
            await session.call_tool("run_js", {"code": "1"})
            return time.monotonic() - t

        resume_s = anyio.run(_mcp, warm["mcp_url"], warm["token"], resume)
        rows.append(("resume from pause -> first answer", f"{resume_s * 1000:.0f} ms", "goal <= 300 ms"))
        # The pool refills behind the claim: let that start finish, so the wake is timed alone.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not hub.api("GET", "/v1/sessions?state=warm").json()["sessions"]:
            time.sleep(0.5)
        hub.api("POST", f"/v1/sessions/{cold['id']}/sleep")
        started = time.monotonic()
        assert first_answer(cold["mcp_url"], cold["token"]) == "2"
        rows.append(("wake from sleep -> first answer", f"{time.monotonic() - started:.2f} s", "goal <= 4 s"))

        # the hub's added latency: same client shape, hub vs the runtime's own port
        with sqlite3.connect(data / "hub.sqlite3") as db:
            runtime_token = db.execute("SELECT runtime_token FROM sessions WHERE id = ?", (warm["id"],)).fetchone()[0]
        port = engine.containers.get(f"codedesk-{warm['id']}").ports["8765/tcp"][0]["HostPort"]

        async def paired() -> tuple[float, float, float]:
            """Both MCP sessions open at once, their calls alternated (which goes first alternating
            too), so load that comes and goes on a shared machine falls on both alike: the medians
            of each side and of the paired differences."""
            direct_url, hub_url = f"http://127.0.0.1:{port}/mcp", warm["mcp_url"]
            import httpx2
            from mcp import ClientSession
            from mcp.client.streamable_http import streamable_http_client

            async with contextlib.AsyncExitStack() as stack:
                sessions = []
                for url, token in ((direct_url, runtime_token), (hub_url, warm["token"])):
                    http = await stack.enter_async_context(httpx2.AsyncClient(
                        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60.0, read=300)))
                    read, write, *_ = await stack.enter_async_context(streamable_http_client(url, http_client=http))
                    session = await stack.enter_async_context(ClientSession(read, write))
                    await session.initialize()
                    sessions.append(session)
                for session in sessions:
                    for _ in range(10):
                        await session.call_tool("run_js", {"code": "1"})
                times: list[list[float]] = [[], []]
                for i in range(args.calls):
                    for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                        t = time.perf_counter()
                        await sessions[side].call_tool("run_js", {"code": "1"})
                        times[side].append(time.perf_counter() - t)
            diffs = [h - d for d, h in zip(*times)]
            return statistics.median(times[0]), statistics.median(times[1]), statistics.median(diffs)

        direct, via_hub, added = anyio.run(paired)
        rows.append(("empty run_js, direct to the runtime (baseline)", f"{direct * 1000:.2f} ms",
                     f"median of {args.calls}"))
        rows.append(("empty run_js, through the hub", f"{via_hub * 1000:.2f} ms",
                     f"adds {added * 1000:.2f} ms, median of paired differences (goal <= 1 ms)"))
        for s in (cold, warm):
            hub.api("DELETE", f"/v1/sessions/{s['id']}")

        if not args.no_fleet:
            # N sessions at once, each with a browser task
            task = ('const p = await tools.browser.browser_execute({operations: ['
                    '{type: "navigate", params: {url: "data:text/html,<p>fleet</p>"}}, {type: "getText"}]});'
                    'p.results[1].result.text')

            def one(_: int) -> str:
                s = created(hub, resources={"cpus": 1.0, "memory_mb": 2048})
                return first_answer(s["mcp_url"], s["token"], task)

            started = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(args.sessions) as pool:
                outcomes = list(pool.map(lambda i: _safe(one, i), range(args.sessions)))
            all_s = time.monotonic() - started
            failures = [o for o in outcomes if "fleet" not in o]
            time.sleep(5)
            label = {"label": f"codedesk.hub={hub.hub_id}"}
            mem = []
            for c in engine.containers.list(filters=label):
                stats = c.stats(stream=False)["memory_stats"]
                cache = stats.get("stats", {}).get("cache", 0) or stats.get("stats", {}).get("inactive_file", 0)
                mem.append((stats.get("usage", 0) - cache) / 2**20)
            rows.append((f"{args.sessions} sessions at once, browser task each: all answered", f"{all_s:.1f} s",
                         f"failures {len(failures)} (goal 0)"))
            if mem:
                rows.append(("memory per session (cgroup, minus page cache)", f"{statistics.median(mem):.0f} MiB",
                             f"median of {len(mem)}; max {max(mem):.0f} MiB"))
            for f in failures[:3]:
                print("failure:", f[:300])
    finally:
        for s in hub.api("GET", "/v1/sessions").json().get("sessions", []):
            hub.api("DELETE", f"/v1/sessions/{s['id']}")
        hub_id = hub.hub_id
        hub.stop()
        label = {"label": f"codedesk.hub={hub_id}"}
        for c in engine.containers.list(all=True, filters=label):
            c.remove(force=True)
        for v in engine.volumes.list(filters=label):
            v.remove(force=True)
        engine.close()
    width = max(len(r[0]) for r in rows)
    print(f"hub benchmark ({args.image}, {args.sessions} sessions at once)")
    for name, figure, note in rows:
        print(f"  {name:<{width}}  {figure:>10}  {note}")


def _safe(fn, arg) -> str:  # noqa: ANN001
    try:
        return fn(arg)
    except Exception as exc:  # noqa: BLE001 - a failure is a figure here
        return f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    main()
