"""A run that ends early stops its capability calls: when `run_js` times out, or when its own
client cancels it (notifications/cancelled for run_js), every call still running is cancelled in
its server, which is free for the next call at once; the timeout's message says what was
cancelled and that what was done stays done.

The real runtime over stdio, the real capability servers, the real desktop session.
"""

from __future__ import annotations

import json
import time
import uuid

import anyio
import psutil
import pytest

FREE_WITHIN_S = 1.5  # the goal is 0.1 s (benchmarks/bench_cancellation.py); this one includes a run_js

SCREEN_WIDTH = """
const r = await tools.browser.desktop_execute({operations: [{type: "screen.width"}]});
r.results[0].result;
"""


# A 20 s sleep on the desktop, in each language.
SLEEP = {
    "run_js": 'await tools.browser.desktop_execute({operations: [{type: "sleep", params: {ms: 20000}}]});',
    "run_py": 'tools.browser.desktop_execute(operations=[{"type": "sleep", "params": {"ms": 20000}}])',
}


def timed_run_js(rt, code: str, **limits) -> tuple[float, object]:
    began = time.monotonic()
    outcome = rt.run_js(code, **limits)
    return time.monotonic() - began, outcome


def run_cancelled_by_client(rt, tool: str, code: str, after: float) -> bool:
    """run_js or run_py, given up on after `after` seconds as an MCP client does; True if it was
    still running then."""

    async def go() -> bool:
        with anyio.move_on_after(after) as scope:
            await rt.session.call_tool(tool, {"code": code, "timeout_seconds": 60})
        return scope.cancelled_caught

    return rt.portal_call(go)


@pytest.fixture(scope="module")
def rt(desktop_runtime):
    """The runtime with its browser server started and connected to the display."""
    outcome = desktop_runtime.run_js(SCREEN_WIDTH, timeout_seconds=60)
    assert not outcome.is_error, outcome.text
    return desktop_runtime


@pytest.mark.parametrize("tool", list(SLEEP))
def test_a_timed_out_run_frees_the_desktop_and_says_what_was_cancelled(rt, tool):
    """The issue's case: a 20 s sleep in a run with a 2 s timeout must not hold the desktop for
    18 s more, and the model must read what was cancelled and that done steps stay done."""
    if tool == "run_py":
        assert not rt.run_py("1", timeout_seconds=60).is_error  # the interpreter loaded first
    outcome = rt.call(tool, {"code": SLEEP[tool], "timeout_seconds": 2})
    assert outcome.is_error
    assert "timeout_seconds=2" in outcome.text
    assert "browser.desktop_execute" in outcome.text and "was cancelled" in outcome.text
    assert "not undone" in outcome.text
    elapsed, after = timed_run_js(rt, SCREEN_WIDTH, timeout_seconds=30)
    assert not after.is_error, after.text
    assert elapsed < FREE_WITHIN_S, f"the next desktop call answered {elapsed:.2f} s after the timeout"


@pytest.mark.parametrize("tool", list(SLEEP))
def test_a_run_its_client_cancels_stops_its_calls(rt, tool):
    """A client that gives up on a run (notifications/cancelled) stops the run's capability
    calls the same way: the desktop is free for its next run."""
    if tool == "run_py":
        assert not rt.run_py("1", timeout_seconds=60).is_error  # the interpreter loaded first
    assert run_cancelled_by_client(rt, tool, SLEEP[tool], 2.0)
    elapsed, after = timed_run_js(rt, SCREEN_WIDTH, timeout_seconds=30)
    assert not after.is_error, after.text
    assert elapsed < FREE_WITHIN_S, f"the next desktop call answered {elapsed:.2f} s after the cancel"


def test_a_timed_out_conversion_leaves_no_libreoffice_running(rt, desktop_session):
    """A conversion cancelled with its run kills LibreOffice; the documents server answers the
    next call at once."""
    marker = f"cancel-{uuid.uuid4().hex[:8]}"
    source = desktop_session.data_dir / f"{marker}.csv"
    with source.open("w", encoding="utf-8") as out:
        for row in range(60_000):
            out.write(f"{row},name {row},{row * 3.5},lorem ipsum dolor sit amet\n")
    source.chmod(0o644)
    try:
        outcome = rt.run_js(f'await tools.documents.convert_document({{path: {json.dumps(str(source))}, to: "pdf"}});',
                            timeout_seconds=3)
        assert outcome.is_error and "documents.convert_document" in outcome.text, outcome.text
        deadline = time.monotonic() + 1.0
        while (left := [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == [], "LibreOffice is still running after its run timed out"
        elapsed, after = timed_run_js(rt, "await tools.documents.get_file_overview({path: %s});"
                                      % json.dumps(str(source)), timeout_seconds=30)
        assert not after.is_error, after.text
        assert elapsed < FREE_WITHIN_S, f"the documents server answered {elapsed:.2f} s after the timeout"
        assert not source.with_suffix(".pdf").exists()
    finally:
        source.unlink(missing_ok=True)


def test_a_timed_out_exec_run_returns_and_its_command_goes_on(rt):
    """tools.exec.run waits for its program; a timeout ends that wait (the run answers at its
    timeout), while the program goes on, as exec's spec says, until it is killed."""
    seconds = f"29.{uuid.uuid4().int % 10**6:06d}"  # a sleep this test can find among all
    began = time.monotonic()
    outcome = rt.run_js(f'await tools.exec.run({{bin: "sleep", args: ["{seconds}"], timeout: 60}});',
                        timeout_seconds=2)
    assert outcome.is_error and "timeout_seconds=2" in outcome.text, outcome.text
    assert time.monotonic() - began < 2 + FREE_WITHIN_S
    programs = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-1:] == [seconds]]
    try:
        assert len(programs) == 1 and programs[0].is_running()
        elapsed, after = timed_run_js(rt, 'await tools.exec.run({bin: "true", timeout: 30});', timeout_seconds=30)
        assert not after.is_error, after.text
        assert elapsed < FREE_WITHIN_S, f"exec answered {elapsed:.2f} s after the timeout"
    finally:
        for program in programs:
            program.kill()
