"""The session's timeline through the real runtime, servers and desktop: one ordered record of a
run across servers with its screenshots, intact after a SIGKILL, exported as HTML that Chromium
shows, replayed by calls and by script, and holding no secret."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from capabilities.session_server.store import TimelineReader
from tests.desktop.conftest import wait_until
from tests.fixtures.runtime import CODEDESK, start_runtime

pytestmark = pytest.mark.desktop

TOKEN = "tl-http-token-" + "x7Qp2" * 4
PASSWORD = "pw-Correct-Horse-42"
FORM_V1 = """<!doctype html><title>signup</title><form action="/done.html"><input id="name" name="name">
<button id="go">Send</button></form>"""
FORM_V2 = """<!doctype html><title>signup</title><form action="/done.html"><input id="fullname" name="name">
<button id="go">Send</button></form>"""
DONE = "<!doctype html><title>done</title><p id='msg'>Thanks</p>"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def end_headers(self) -> None:
        # Pages a test changes between a run and its replay: never from Chromium's cache (with
        # only Last-Modified, a page written minutes ago counts as fresh for a while).
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A local site whose pages a test may change between a run and its replay."""
    root = tmp_path_factory.mktemp("site")
    (root / "form.html").write_text(FORM_V1)
    (root / "done.html").write_text(DONE)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
def rt(desktop_session):
    """A runtime over HTTP with a known token, recording into the session's timeline."""
    with start_runtime(dict(desktop_session.env), transport="http", token=TOKEN) as client:
        yield client


def _timeline(desktop_session) -> TimelineReader:
    return TimelineReader(Path(desktop_session.data_dir) / "timeline")


_started = [0.0]
"""When `_js` last started a run: `_last_run` waits for that run's record."""


def _js(rt, code: str, timeout: int = 90) -> object:
    _started[0] = time.time()
    out = rt.run_js(code, timeout_seconds=timeout)
    assert not out.is_error, out.text
    return json.loads(out.text)


def _last_run(desktop_session) -> str:
    """The run `_js` made last, once its end is on disk (the writer commits within moments)."""
    def ended() -> str | None:
        with _timeline(desktop_session) as reader:
            entries = reader.entries(since=_started[0], limit=100_000)
        starts = [e["run"] for e in entries if e["kind"] == "run_start"]
        return starts[-1] if starts and any(e["kind"] == "run_end" and e["run"] == starts[-1] for e in entries) \
            else None

    return wait_until(ended, timeout=30, what="the last run's record")


def _fill(url: str, name: str = "Ada") -> str:
    return f"""
const b = (ops) => mcp.callTool("browser", "browser_execute", {{tab: "timeline", operations: ops}});
await b([{{type: "navigate", params: {{url: "{url}/form.html"}}}}]);
await b([{{type: "type", params: {{selector: "#name", text: "{name}"}}}}]);
await b([{{type: "click", params: {{selector: "#go"}}}}, {{type: "wait", params: {{selector: "#msg"}}}}]);
const t = await b([{{type: "getText"}}]);
JSON.stringify(t.structuredContent.results[0].result.text)
"""


def test_a_run_across_servers_leaves_one_ordered_timeline_with_its_screenshots(rt, desktop_session, site, tmp_path):
    """Every call of a run, browser, exec and documents, is on the timeline in order, with the
    browser's screenshot saved beside it; the HTML export shows them in Chromium."""
    _, url = site
    _js(rt, f"""
await mcp.callTool("browser", "browser_execute", {{tab: "timeline", operations: [
  {{type: "navigate", params: {{url: "{url}/form.html"}}}}, {{type: "screenshot"}}]}});
await tools.exec.run({{bin: "sh", args: ["-c", "echo hello > $HOME/timeline-note.txt"], timeout: 10}});
const home = await tools.exec.run({{bin: "sh", args: ["-c", "echo -n $HOME"], timeout: 10}});
const h = home.logs.trim();
await mcp.callTool("documents", "get_file_overview", {{path: h + "/timeline-note.txt"}});
JSON.stringify(1)
""")
    run = _last_run(desktop_session)
    entries = _js(rt, f'JSON.stringify((await tools.session.timeline_query({{run: "{run}"}})).entries)')
    calls = [e for e in entries if e["kind"] == "call"]
    assert entries[0]["kind"] == "run_start" and entries[-1]["kind"] == "run_end"
    assert [c["seq"] for c in calls] == list(range(1, len(calls) + 1))
    servers = [c["server"] for c in calls]
    assert servers[0] == "browser" and servers[-1] == "documents" and set(servers[1:-1]) == {"exec"}
    assert all(c["status"] == "ok" and c["controls"] == "agent" for c in calls), calls
    assert entries[-1]["detail"]["outcome"] == "ok"
    # each call says the script's line that made it
    assert (calls[0]["detail"]["line"], calls[1]["detail"]["line"], calls[-1]["detail"]["line"]) == (2, 4, 7)
    shots = calls[0]["screenshots"]
    assert shots and (Path(desktop_session.data_dir) / "timeline" / shots[0]).stat().st_size > 1000

    exported = _js(rt, f'JSON.stringify(await tools.session.timeline_export({{format: "html", run: "{run}"}}))')
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(Path(exported["path"]).as_uri())
        assert page.locator(".step").count() == len(calls)
        assert page.locator(".step").nth(0).locator(".tool").inner_text() == "browser.browser_execute"
        assert "line 2 of the script" in page.locator(".step").nth(0).locator(".time").inner_text()
        assert page.evaluate("Array.from(document.images).filter(i => i.naturalWidth > 100).length") >= 1
        page.screenshot(path=str(tmp_path / "report.png"))
        browser.close()

    printed = subprocess.run([CODEDESK, "timeline", "--run", run], env=desktop_session.env, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert [json.loads(line)["kind"] for line in printed.splitlines()] == [e["kind"] for e in entries]


def test_replay_by_calls_matches_on_a_fresh_page_and_names_the_step_on_a_changed_one(rt, desktop_session, site):
    """A recorded form-filling run replays cleanly; after the page changed, the replay stops at
    the first step that differs and says why."""
    root, url = site
    assert _js(rt, _fill(url)) == "Thanks"
    run = _last_run(desktop_session)
    _js(rt, f'await tools.browser.browser_execute({{tab: "timeline", operations: [{{type: "navigate", params: {{url: "about:blank"}}}}]}}); 1')
    replay = rt.run_js(f'JSON.stringify((await mcp.callTool("session", "timeline_replay", {{run: "{run}", mode: "calls"}})).structuredContent)',
                       timeout_seconds=120)
    report = json.loads(replay.text)
    assert report["status"] == "matched", report
    assert [s["outcome"] for s in report["steps"]] == ["matched"] * 4

    (root / "form.html").write_text(FORM_V2)
    try:
        report = json.loads(rt.run_js(f'JSON.stringify((await mcp.callTool("session", "timeline_replay", '
                                      f'{{run: "{run}", mode: "calls"}})).structuredContent)', timeout_seconds=120).text)
    finally:
        (root / "form.html").write_text(FORM_V1)
    assert report["status"] == "diverged" and report["error"]["kind"] == "replay_divergence"
    assert report["divergence"]["seq"] == 2 and "failed now" in report["divergence"]["reason"], report
    assert [s["outcome"] for s in report["steps"]] == ["matched", "diverged"]


def test_replay_of_a_changed_script_stops_with_replay_divergence(rt, desktop_session, site):
    """The same script replays from its record; an edited one stops at its first different call."""
    _, url = site
    _js(rt, _fill(url, "Grace"))
    run = _last_run(desktop_session)
    same = json.loads(rt.run_js(f'JSON.stringify((await mcp.callTool("session", "timeline_replay", '
                                f'{{run: "{run}", mode: "script"}})).structuredContent)', timeout_seconds=120).text)
    assert same["status"] == "matched" and len(same["steps"]) == 4, same
    edited = _fill(url, "Linus")
    changed = json.loads(rt.run_js(f'JSON.stringify((await mcp.callTool("session", "timeline_replay", '
                                   f'{{run: "{run}", mode: "script", script: {json.dumps(edited)}}})).structuredContent)',
                                   timeout_seconds=120).text)
    assert changed["error"]["kind"] == "replay_divergence", changed
    assert changed["divergence"]["seq"] == 2 and "Linus" in changed["divergence"]["reason"]


def test_a_replayed_script_cannot_start_a_replay(rt, desktop_session):
    """Replays do not nest: a script that replays a run whose script replays in turn would
    otherwise start runs without end. The replayed script's own replay is refused."""
    _js(rt, "1 + 1")
    run = _last_run(desktop_session)
    nested = f'await mcp.callTool("session", "timeline_replay", {{run: {json.dumps(run)}, mode: "calls"}})'
    out = rt.run_js(f'JSON.stringify((await mcp.callTool("session", "timeline_replay", {{run: {json.dumps(run)}, '
                    f'mode: "script", script: {json.dumps(nested)}}})).structuredContent)', timeout_seconds=60)
    assert not out.is_error, out.text
    assert "a replayed run cannot start a replay" in out.text, out.text


def test_secrets_in_arguments_appear_nowhere_in_the_timeline(rt, desktop_session):
    """The HTTP token and a field named password are redacted in the database, the screenshots'
    folder and both exports."""
    _js(rt, f"""
await tools.exec.run({{bin: "echo", args: ["{TOKEN}"], timeout: 10}});
await mcp.callTool("exec", "exec", {{bin: "true", password: "{PASSWORD}"}});
const pw = ["{PASSWORD[:6]}", "{PASSWORD[6:]}"].join("");
await mcp.callTool("browser", "browser_execute", {{tab: "timeline", operations: [
  {{type: "setContent", params: {{html: "<p>" + pw + "</p>"}}}}, {{type: "getText"}}], password: pw}});
JSON.stringify(1)
""")
    run = _last_run(desktop_session)
    jsonl = _js(rt, f'JSON.stringify(await tools.session.timeline_export({{format: "jsonl"}}))')
    html = _js(rt, f'JSON.stringify(await tools.session.timeline_export({{format: "html", run: "{run}"}}))')
    assert "jsonl" not in jsonl or "[redacted]" in jsonl["jsonl"]
    folder = Path(desktop_session.data_dir) / "timeline"
    files = [f for f in folder.rglob("*") if f.is_file()]
    assert Path(html["path"]) in files
    for file in files:
        data = file.read_bytes()
        assert TOKEN.encode() not in data, file
        assert PASSWORD.encode() not in data, file


def test_sigkill_mid_run_leaves_the_timeline_up_to_the_kill(desktop_session):
    """A runtime killed with SIGKILL in the middle of a run loses nothing it had recorded."""
    with start_runtime(dict(desktop_session.env), transport="http", token=TOKEN) as client:
        process = client._ensure().process
        assert process is not None
        code = """
for (let i = 0; i < 3; i++) await tools.exec.run({bin: "echo", args: ["step-" + i], timeout: 10});
await tools.exec.run({bin: "sleep", args: ["30"], timeout: 60});
"""
        worker = threading.Thread(target=lambda: _swallow(client.run_js, code, timeout_seconds=60), daemon=True)
        worker.start()
        deadline = time.monotonic() + 60
        run = None
        while time.monotonic() < deadline:
            with _timeline(desktop_session) as reader:
                entries = [e for e in reader.entries(limit=100_000) if "step-0" in json.dumps(e.get("arguments"))]
                if entries:
                    run = entries[0]["run"]
                    if any(e.get("arguments", {}).get("args") == ["30"] for e in reader.entries(run=run)):
                        break
            time.sleep(0.1)
        assert run is not None
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        worker.join(30)
    with _timeline(desktop_session) as reader:
        entries = reader.entries(run=run)
    kinds = [e["kind"] for e in entries]
    assert kinds[0] == "run_start" and "run_end" not in kinds and set(kinds[1:]) == {"call"}
    calls = entries[1:]
    assert [c["seq"] for c in calls] == list(range(1, len(calls) + 1))
    sleeping = next(i for i, c in enumerate(calls) if c["arguments"].get("args") == ["30"])
    assert [c["arguments"]["args"] for c in calls if c["tool"] == "exec"][:3] == [["step-0"], ["step-1"], ["step-2"]]
    assert all(c["status"] == "ok" for c in calls[:sleeping]), calls  # and no run_end: the run never ended


def _swallow(fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except Exception:
        pass
