"""The input lease: a person using the screen from a control viewer (noVNC, driven by Playwright
in a real Chromium) makes the agent's mouse and keyboard steps wait, then fail with
`human_has_control`; the viewer's hand-back button gives the screen back and the agent's click
lands. The lease's sockets are out of the desktop user's reach."""

from __future__ import annotations

import json
import os
from pathlib import Path


from capabilities import input_lease
from tests.capabilities.browser.conftest import BrowserServer
from tests.desktop.conftest import wait_until


def _page(server: BrowserServer, operations: list[dict]) -> tuple[bool, dict]:
    raw = server.call("browser_execute", {"tab": "lease", "operations": operations})
    return bool(raw.is_error), raw.structured_content


def _desktop(server: BrowserServer, operations: list[dict], **config) -> tuple[bool, dict]:
    args: dict = {"operations": operations}
    if config:
        args["config"] = config
    raw = server.call("desktop_execute", args)
    return bool(raw.is_error), json.loads(raw.content[0].text)


def test_a_persons_input_in_the_viewer_holds_the_agents_input_until_handed_back(desktop_session, control_viewer):
    data = desktop_session.data_dir
    page = control_viewer
    with BrowserServer(desktop_session.env) as server:
        failed, body = _desktop(server, [{"type": "mouse.move", "params": {"x": 100, "y": 100}}])
        assert not failed, body
        assert body["lease"]["holder"] == "agent"
        # reading the screen needs no lease and reports none
        failed, body = _desktop(server, [{"type": "mouse.getPosition"}])
        assert not failed and "lease" not in body

        canvas = page.locator("#screen canvas").bounding_box()
        page.mouse.move(canvas["x"] + 300, canvas["y"] + 300)
        page.mouse.move(canvas["x"] + 320, canvas["y"] + 310)
        wait_until(lambda: input_lease.read(data).person_holds(), what="the lease taken by the person")
        page.wait_for_function("window.codedesk.lease === 'person'", timeout=10000)
        assert page.locator("#handback").is_visible()

        failed, body = _desktop(server, [{"type": "mouse.click", "params": {"x": 200, "y": 200}}], humanWaitMs=800)
        assert failed
        assert body["error"]["kind"] == "human_has_control"
        assert "no step ran" in body["error"]["message"] and body["results"] == []
        assert body["lease"]["holder"] == "person" and body["lease"]["waitedMs"] >= 800
        # browser_execute's hands wait too (the operator's wait: 1 s here); reading does not
        with BrowserServer({**desktop_session.env, "CODEDESK_LEASE_WAIT_SECONDS": "1"}) as web:
            failed, body = _page(web, [{"type": "setContent", "params": {"html": "<button>b</button>"}},
                                       {"type": "click", "params": {"selector": "button"}}])
            assert failed and body["error"]["kind"] == "human_has_control", body
            assert body["results"] == [] and body["lease"]["holder"] == "person" and body["lease"]["waitedMs"] >= 1000
            failed, body = _page(web, [{"type": "url"}])
            assert not failed and "lease" not in body, body

        page.click("#handback")
        wait_until(lambda: input_lease.read(data).holder == "agent", what="the lease handed back")
        page.wait_for_function("window.codedesk.lease === 'agent'", timeout=10000)
        failed, body = _desktop(server, [{"type": "mouse.click", "params": {"x": 200, "y": 200}}])
        assert not failed, body
        assert body["lease"]["holder"] == "agent"
        assert body["results"][0]["result"]["x"] == 200
        with BrowserServer(desktop_session.env) as web:
            failed, body = _page(web, [{"type": "setContent", "params": {"html": "<button>b</button>"}},
                                       {"type": "click", "params": {"selector": "button"}}])
            assert not failed and body["lease"]["holder"] == "agent", body
    assert input_lease.read(data).inputs >= 2


def test_the_lease_sockets_are_the_viewers_alone(desktop_session):
    """A program of the desktop user could otherwise take the screen or hand it back on a
    person's behalf, or approve its own request."""
    status = json.loads(desktop_session.desktop_cli("status").stdout)
    folder = Path(status["vnc_socket"]).parent
    for name in ("input.sock", "lease.sock", "oversight.sock"):
        path = folder / name
        assert path.exists(), name
        assert path.stat().st_mode & 0o077 == 0, f"{name} is not private"
        if os.geteuid() == 0:
            assert path.stat().st_uid != desktop_session.info.uid, f"{name} belongs to the desktop user"
    runtime_end = desktop_session.data_dir / "oversight.sock"  # the runtime's end of the oversight relay
    assert runtime_end.stat().st_mode & 0o077 == 0 and runtime_end.stat().st_uid == os.geteuid()
    lease_file = desktop_session.data_dir / input_lease.FILE_NAME
    assert lease_file.stat().st_uid == os.geteuid() and lease_file.stat().st_mode & 0o022 == 0
