"""Oversight at the viewer, end to end: a real session, `codedesk serve` with a policy that asks
about `exec` and about desktop clicks, and the viewer page driven by Playwright in Chromium.

The call waits and the viewer shows the request; Approve lets it run, Deny fails it with
`denied`, and a target changed between showing and approving fails it with `approval_stale`.
Before an approved click the viewer marks the agent's target on the screen, and a person's input
in the veto window cancels the step; the side panel shows the run's steps; a person's input at
the viewer goes on the timeline."""

from __future__ import annotations

import io
import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image

from capabilities.session_server.store import TimelineReader
from tests.desktop.conftest import wait_until
from tests.fixtures.runtime import start_runtime, write_test_server_config

VETO_SECONDS = 3  # this module's runtime holds each pointer batch that long while a person watches
POLICY = {"rules": {"exec.exec": "ask", "browser.desktop_execute.mouse.click": "ask",
                    "browser.browser_execute.click": "ask"}, "askTimeoutSeconds": 90}


@pytest.fixture(scope="module")
def overseen(desktop_session, tmp_path_factory):
    """`codedesk serve` on the session, under a policy that asks."""
    config = write_test_server_config(tmp_path_factory.mktemp("oversight") / "servers.json", policy=POLICY)
    env = {**desktop_session.env, "CODEDESK_VETO_SECONDS": str(VETO_SECONDS)}
    with start_runtime(env, config=config) as client:
        yield client


@pytest.fixture
def watching(overseen, control_viewer):
    """The viewer page once it shows the runtime's runs (the runtime connects within seconds)."""
    page = control_viewer

    def shown() -> bool:
        marker = secrets.token_hex(4)
        overseen.run_js(f"'{marker}'")
        return page.evaluate("(m) => window.codedesk.oversight.events.some(e => e.kind === 'run_start' "
                             "&& e.script.includes(m))", marker)

    wait_until(shown, timeout=60, what="the runtime's runs shown in the viewer")
    with ThreadPoolExecutor(1) as pool:
        yield page, pool


def _asked(page, tool: str) -> None:
    page.wait_for_selector("#approval", state="visible", timeout=30000)
    assert page.inner_text("#approvaltool") == tool


def test_an_exec_waits_for_the_person_at_the_viewer_who_approves_or_denies(overseen, watching, desktop_session) -> None:
    page, pool = watching
    started = time.time()
    run = pool.submit(overseen.run_js, 'JSON.stringify(await tools.exec.run({bin: "sh", args: ["-c", '
                      '"echo approved-$((6*7))"], timeout: 30}))', timeout_seconds=120)
    _asked(page, "exec.exec")
    assert page.inner_text("#approvalrule") == "exec.exec"
    assert "echo approved-$((6*7))" in page.inner_text("#approvalargs")
    time.sleep(1)
    assert not run.done(), "the call ran before anybody approved it"
    page.click("#approve")
    outcome = run.result(timeout=120)
    assert not outcome.is_error and "approved-42" in outcome.text, outcome.text
    page.wait_for_selector("#approval", state="hidden", timeout=10000)

    run = pool.submit(overseen.run_js, 'const r = await mcp.callTool("exec", "exec", {bin: "sh", args: ["-c", '
                      '"echo never"], timeout: 30}); JSON.stringify(r.structuredContent.error)', timeout_seconds=120)
    _asked(page, "exec.exec")
    page.click("#deny")
    error = json.loads(run.result(timeout=120).text)
    assert error["kind"] == "denied" and "declined by the person asked" in error["message"]

    def approvals() -> list[dict]:  # the writer commits within moments of the answer
        found = [e for e in _timeline(desktop_session.data_dir, started) if e["kind"] == "approval"]
        return found if len(found) >= 2 else []

    found = wait_until(approvals, timeout=30, what="both approvals on the timeline")
    assert [e["detail"]["answer"] for e in found] == ["accept", "decline"]
    assert all(e["controls"] == "person" for e in found)


def test_a_program_changed_after_it_was_shown_is_not_run_on_the_old_yes(overseen, watching, desktop_session) -> None:
    page, pool = watching
    script = desktop_session.data_dir / "home" / f"approved-{secrets.token_hex(3)}.sh"
    script.write_text("echo as-shown\n")
    script.chmod(0o644)
    try:
        run = pool.submit(overseen.run_js, f'const r = await mcp.callTool("exec", "exec", {{bin: "sh", args: '
                          f'["{script.name}"], timeout: 30}}); JSON.stringify(r.structuredContent)', timeout_seconds=120)
        _asked(page, "exec.exec")
        assert script.name in page.inner_text("#approvalfiles")
        script.write_text("echo something-else\n")  # after the person saw the request
        page.click("#approve")
        answer = json.loads(run.result(timeout=120).text)
        assert answer["error"]["kind"] == "approval_stale", answer
        assert f"the file {script.name} changed after it was shown" in answer["error"]["message"]
        assert "call it again" in answer["error"]["hint"]
    finally:
        script.unlink(missing_ok=True)


def test_the_viewer_marks_the_agents_target_and_shows_its_steps(overseen, watching) -> None:
    page, pool = watching
    page.click("#paneltoggle")
    run = pool.submit(overseen.run_js, 'const r = await mcp.callTool("browser", "desktop_execute", {operations: '
                      '[{type: "mouse.click", params: {x: 400, y: 300}}]}); JSON.stringify(r.structuredContent)',
                      timeout_seconds=120)
    _asked(page, "browser.desktop_execute")
    assert page.inner_text("#approvalstep") == "mouse.click"
    assert page.inner_text("#approvalwhere") == "from line 1 of the script"
    # the screen around the target as it was when asked, the target boxed on it
    page.wait_for_function("document.querySelector('#approvalimg').naturalWidth > 0", timeout=10000)
    assert page.evaluate("[approvalimg.naturalWidth, approvalimg.naturalHeight]") == [480, 300]
    mark, img = page.locator("#approvalshot .mark"), page.locator("#approvalimg").bounding_box()
    assert mark.count() == 1
    scale = img["width"] / 480
    center = mark.bounding_box()
    assert abs(center["x"] + center["width"] / 2 - (img["x"] + 240 * scale)) <= 3  # (400, 300) is the shot's centre
    assert abs(center["y"] + center["height"] / 2 - (img["y"] + 150 * scale)) <= 3
    # the agent's pointer: a box on the target, on the screen as the viewer shows it
    aim = page.locator(".aim")
    assert aim.count() == 1 and "mouse.click" in aim.inner_text()
    box, canvas = aim.bounding_box(), page.locator("#screen canvas").bounding_box()
    assert abs(box["x"] + box["width"] / 2 - (canvas["x"] + 400)) <= 3
    assert abs(box["y"] + box["height"] / 2 - (canvas["y"] + 300)) <= 3
    shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    edge = shot.getpixel((round(box["x"] + 1), round(box["y"] + box["height"] / 2)))
    assert edge[0] > 200 and edge[1] < 60 and edge[2] > 200, f"no magenta box edge on the screenshot: {edge}"
    page.click("#approve")
    answer = json.loads(run.result(timeout=120).text)
    assert answer["results"][0]["result"]["x"] == 400, answer
    assert answer["lease"]["holder"] == "agent"
    # the side panel: the run and its step, with how it went
    page.wait_for_function("document.querySelector('#steps li') && "
                           "/browser.desktop_execute mouse.click \\(line 1\\) ok/.test(document.querySelector('#steps li').textContent)",
                           timeout=10000)
    assert "ended ok" in page.inner_text("#run")
    page.wait_for_selector(".aim", state="detached", timeout=10000)


def test_a_browser_click_is_bound_to_its_element_as_the_person_saw_it(overseen, watching) -> None:
    """The dialog shows the element a browser click targets, boxed on the tab's screenshot; the
    element changed after it was shown fails the click with approval_stale, unchanged it lands."""
    page, pool = watching
    tab = f"approval-{secrets.token_hex(3)}"
    html = '<body style="margin:0"><button id="go" style="position:absolute;left:40px;top:60px;width:120px;height:40px">Go</button>'
    opened = overseen.run_js(f'JSON.stringify(await tools.browser.browser_execute({{tab: "{tab}", operations: '
                             f'[{{type: "setContent", params: {{html: {json.dumps(html)}}}}}]}}))')
    assert not opened.is_error, opened.text
    click = (f'const r = await mcp.callTool("browser", "browser_execute", {{tab: "{tab}", operations: '
             '[{type: "click", params: {selector: "#go"}}]}); JSON.stringify(r.structuredContent)')

    run = pool.submit(overseen.run_js, click, timeout_seconds=120)
    _asked(page, "browser.browser_execute")
    assert page.inner_text("#approvalfiles") == 'bound to the elements: #go (button "Go")'
    page.wait_for_function("document.querySelector('#approvalimg').naturalWidth > 0", timeout=10000)
    mark, img = page.locator("#approvalshot .mark").bounding_box(), page.locator("#approvalimg").bounding_box()
    scale = img["width"] / page.evaluate("approvalimg.naturalWidth")
    assert abs(mark["x"] - (img["x"] + 40 * scale)) <= 3 and abs(mark["y"] - (img["y"] + 60 * scale)) <= 3
    rename = json.dumps("document.querySelector('#go').textContent = 'Delete all'")
    changed = overseen.run_js(f'(await tools.browser.browser_execute({{tab: "{tab}", operations: [{{type: "evaluate", '
                              f'params: {{script: {rename}}}}}]}})).url')
    assert not changed.is_error, changed.text
    page.click("#approve")
    answer = json.loads(run.result(timeout=120).text)
    assert answer["error"]["kind"] == "approval_stale", answer
    assert "the element '#go' changed after it was shown (its text)" in answer["error"]["message"]

    run = pool.submit(overseen.run_js, click, timeout_seconds=120)
    _asked(page, "browser.browser_execute")
    assert page.inner_text("#approvalfiles") == 'bound to the elements: #go (button "Delete all")'
    page.click("#approve")
    answer = json.loads(run.result(timeout=120).text)
    assert answer["results"][0]["result"]["clicked"] == "#go", answer


def test_a_persons_input_in_the_veto_window_cancels_the_agents_step(overseen, watching) -> None:
    page, pool = watching
    run = pool.submit(overseen.run_js, 'const r = await mcp.callTool("browser", "desktop_execute", {operations: '
                      '[{type: "mouse.move", params: {x: 600, y: 420}}]}); JSON.stringify(r.structuredContent)',
                      timeout_seconds=120)
    page.wait_for_selector(".aim", state="attached", timeout=30000)  # the target, marked before the step runs
    canvas = page.locator("#screen canvas").bounding_box()
    page.mouse.move(canvas["x"] + 100, canvas["y"] + 100)
    page.mouse.move(canvas["x"] + 110, canvas["y"] + 105)
    answer = json.loads(run.result(timeout=120).text)
    assert answer["error"]["kind"] == "human_has_control", answer
    assert f"within the {VETO_SECONDS} s veto window" in answer["error"]["message"]
    assert "no step ran" in answer["error"]["message"]


def test_a_persons_input_at_the_viewer_goes_on_the_timeline(watching, desktop_session) -> None:
    page, _ = watching
    started = time.time()
    canvas = page.locator("#screen canvas").bounding_box()
    for i in range(5):
        page.mouse.move(canvas["x"] + 200 + 10 * i, canvas["y"] + 200)

    def recorded() -> list[dict]:
        return [e for e in _timeline(desktop_session.data_dir, started) if e["kind"] == "input"]

    wait_until(lambda: recorded(), timeout=30, what="the person's input on the timeline")
    event = recorded()[0]
    assert event["controls"] == "person" and event["run"] == ""
    assert event["detail"]["inputs"] >= 1 and event["detail"]["since"] >= started - 1


def _timeline(data, since: float) -> list[dict]:
    """The session's timeline since `since`, as the runtimes on it wrote it."""
    return TimelineReader(data / "timeline").entries(since=since, limit=1000)
