"""Named tabs: created on first use, kept across calls, runs and server restarts; one call at a
time per tab, tabs side by side; `close`; real windows on the desktop."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid

from tests.fixtures.runtime import start_runtime


def ev(script: str) -> dict:
    return {"type": "evaluate", "params": {"script": script}}


def page_targets(info) -> list[dict]:
    """Chromium's open pages, from its DevTools endpoint."""
    with urllib.request.urlopen(info.devtools_url + "/json/list", timeout=10) as response:
        return [t for t in json.load(response) if t["type"] == "page"]


def test_named_tab_is_reused_by_later_calls(run_page):
    """A second call on the same name acts on the same document (its state is still there)."""
    first = run_page([{"type": "setContent", "params": {"html": "<title>kept</title>"}}, ev("window.__kept = 41")],
                     tab="persist")
    assert not first.is_error, first.summary
    second = run_page([ev("window.__kept + 1"), ev("document.title")], tab="persist")
    assert second.result(1) == 42 and second.result(2) == "kept"
    other = run_page([ev("window.__kept === undefined")], tab="persist-other")
    assert other.result(1) is True


def test_tabs_run_concurrently_and_one_tab_one_call_at_a_time(run_pages):
    """Two tabs' calls overlap in time, while two calls on one tab never do (times from the pages)."""
    batch = [ev("Date.now()"), {"type": "wait", "params": {"ms": 1200}}, ev("Date.now()")]
    a1, b, a2 = run_pages([
        {"operations": batch, "tab": "queue-a"},
        {"operations": batch, "tab": "queue-b"},
        {"operations": batch, "tab": "queue-a"},
    ])
    spans = {name: (run.result(1), run.result(3)) for name, run in (("a1", a1), ("b", b), ("a2", a2))}
    assert all(not r.is_error for r in (a1, b, a2))
    # different tabs: the spans overlap
    assert spans["b"][0] < spans["a1"][1] and spans["a1"][0] < spans["b"][1], spans
    # one tab: one span ends before the other starts, whichever ran first
    first, second = sorted([spans["a1"], spans["a2"]])
    assert first[1] <= second[0], spans


def test_close_closes_the_tab(run_page, browser_desktop):
    """close: true closes the tab's page after the steps; the name starts fresh next time."""
    title = f"closing-{uuid.uuid4().hex[:8]}"
    run = run_page([{"type": "setContent", "params": {"html": f"<title>{title}</title>"}}, ev("window.__x = 1")],
                   tab="closing", close=True)
    assert not run.is_error and run.summary.endswith("; tab closed")
    assert title not in [t["title"] for t in page_targets(browser_desktop.info)]
    again = run_page([ev("[document.title, window.__x === undefined]")], tab="closing")
    assert again.result(1) == ["", True]


def test_tab_window_is_on_the_desktop(run_page, browser_desktop):
    """The tab is a real Chromium window on the session's display: its title is in the window list
    and the window is maximised."""
    title = f"visible-{uuid.uuid4().hex[:8]}"
    run = run_page([{"type": "setContent", "params": {"html": f"<title>{title}</title>"}}], tab="visible")
    assert not run.is_error, run.summary
    env = browser_desktop.info.env
    deadline = time.monotonic() + 10
    while True:
        windows = subprocess.run(["wmctrl", "-l"], env=env, capture_output=True, text=True, timeout=10).stdout
        if f"{title} - Chromium" in windows or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert f"{title} - Chromium" in windows, windows
    (window_id,) = [line.split()[0] for line in windows.splitlines() if f"{title} - Chromium" in line]
    state = subprocess.run(["xprop", "-id", window_id, "_NET_WM_STATE"], env=env, capture_output=True, text=True,
                           timeout=10).stdout
    assert "_NET_WM_STATE_MAXIMIZED_VERT" in state and "_NET_WM_STATE_MAXIMIZED_HORZ" in state, state


def test_tab_is_found_again_after_a_server_restart(browser_desktop, browser_kit):
    """A new server process finds a named tab the previous one opened (same document, no copy)."""
    title = f"survivor-{uuid.uuid4().hex[:8]}"
    ops = [{"type": "setContent", "params": {"html": f"<title>{title}</title>"}}, ev("window.__survived = 'yes'")]
    with browser_kit.BrowserServer(browser_desktop.env) as server:
        assert not server.call("browser_execute", {"operations": ops, "tab": "survivor"}).is_error
    with browser_kit.BrowserServer(browser_desktop.env) as server:
        run = browser_kit.read(server.call("browser_execute", {"operations": [ev("window.__survived")], "tab": "survivor"}))
    assert run.result(1) == "yes"
    assert [t["title"] for t in page_targets(browser_desktop.info)].count(title) == 1


def test_named_tab_persists_across_two_run_js_calls(browser_desktop, pages_server):
    """Through the runtime: a script's tab is there for the next script, at the same page."""
    url = pages_server.url("/browser_form.html")
    with start_runtime(browser_desktop.env) as runtime:
        first = runtime.run_js(
            "const r = await mcp.callTool('browser', 'browser_execute', {tab: 'js', operations: ["
            f"{{type: 'navigate', params: {{url: '{url}'}}}},"
            "{type: 'type', params: {selector: '#name', text: 'from run 1'}}]});"
            "r.isError ? 'error: ' + r.content[0].text : 'ok'",
            timeout_seconds=60,
        )
        assert not first.is_error and "ok" in first.text, first.text
        second = runtime.run_js(
            "const r = await mcp.callTool('browser', 'browser_execute', {tab: 'js', operations: ["
            "{type: 'evaluate', params: {script: \"[location.pathname, document.querySelector('#name').value]\"}}]});"
            "JSON.stringify(JSON.parse(r.content[0].text.split('\\n')[1]).results[0].result)",
            timeout_seconds=60,
        )
    assert not second.is_error, second.text
    assert '["/browser_form.html","from run 1"]' in second.text


def test_two_servers_of_one_session_share_a_named_tab(run_page, browser_desktop, browser_kit):
    """A second server process on the same session finds the tab the first one opened (and the
    first keeps its own other tabs in tabs.json)."""
    assert not run_page([ev("window.__shared = 'from the first server'")], tab="shared").is_error
    with browser_kit.BrowserServer(browser_desktop.env) as second:
        run = browser_kit.read(second.call("browser_execute", {"operations": [ev("window.__shared")], "tab": "shared"}))
        assert not browser_kit.read(second.call("browser_execute", {"operations": [ev("1")], "tab": "second-only"})).is_error
    assert run.result(1) == "from the first server"
    saved = json.loads((browser_desktop.data_dir / "browser" / "tabs.json").read_text())["tabs"]
    assert {"shared", "second-only", "persist"} <= set(saved)
