"""The hub against the local Docker engine and the real image (`make hub-test`).

Sessions are real containers of `$CODEDESK_IMAGE` (default codedesk:latest), reached through
the hub's MCP endpoint with real MCP clients. Skipped, saying why, when no Docker engine
answers or the image is absent. Every container and volume a test makes is removed, also on
failure (by the hub's label).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import socket
import struct
import subprocess
import time
from typing import Any

import anyio
import pytest

from tests.hub.conftest import CODEDESK, ROOT, HubProcess

IMAGE = os.environ.get("CODEDESK_IMAGE", "codedesk:latest")


def _check_docker() -> None:
    """Skip the module, saying why, unless an engine answers and holds the image."""
    import docker

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):  # the SDK leaks its socket when nothing listens: look first
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(host.removeprefix("unix://"))
            except OSError as exc:
                pytest.skip(f"no Docker engine answers at {host} ({exc.strerror}); start dockerd to run the "
                            "hub's Docker tests", allow_module_level=True)
    client = docker.from_env(timeout=30)
    try:
        try:
            client.ping()
        except Exception as exc:  # noqa: BLE001 - any failure means: no engine here
            pytest.skip(f"no Docker engine answers ({type(exc).__name__}); start dockerd to run the hub's "
                        "Docker tests", allow_module_level=True)
        try:
            client.images.get(IMAGE)
        except Exception:  # noqa: BLE001
            pytest.skip(f"the image {IMAGE} is absent; `make hub-test` builds it first", allow_module_level=True)
    finally:
        client.close()


_check_docker()
DOCKER = None


@pytest.fixture(scope="module", autouse=True)
def docker_client():
    global DOCKER
    import docker

    DOCKER = docker.from_env(timeout=60)
    try:
        yield DOCKER
    finally:
        DOCKER.close()


def _objects(hub_id: str) -> tuple[list, list]:
    label = {"label": f"codedesk.hub={hub_id}"}
    return DOCKER.containers.list(all=True, filters=label), DOCKER.volumes.list(filters=label)


def _stop_and_clean(h: HubProcess) -> None:
    """Stop the hub, then remove whatever its sessions left in the engine (also after a failure)."""
    h.stop()
    containers, volumes = _objects(h.hub_id)
    for c in containers:
        c.remove(force=True)
    for v in volumes:
        v.remove(force=True)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = HubProcess(tmp_path_factory.mktemp("hub"), "admin-" + secrets.token_hex(8), "--image", IMAGE)
    try:
        yield h
    finally:
        _stop_and_clean(h)


def create(hub: HubProcess, **fields) -> dict:
    r = hub.api("POST", "/v1/sessions", json=fields)
    assert r.status_code == 201, r.text
    return r.json()


def run_js(session: dict, code: str, token: str | None = None, timeout: float = 120) -> dict:
    """run_js through the hub's MCP endpoint for `session`, with its token (or `token`)."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def go() -> dict:
        headers = {"Authorization": f"Bearer {token or session['token']}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0, read=timeout + 60)) as client:
            async with streamable_http_client(session["mcp_url"], http_client=client) as (read, write, *_):
                async with ClientSession(read, write) as mcp:
                    await mcp.initialize()
                    result = await mcp.call_tool("run_js", {"code": code, "timeout_seconds": timeout})
        return {"text": "".join(getattr(b, "text", "") for b in result.content), "is_error": result.is_error}

    return anyio.run(go)


EXEC = """
async function sh(script) {
  const r = await tools.exec.run({bin: "sh", args: ["-c", script], timeout: 60});
  return r.logs;
}
"""


@pytest.fixture(scope="module")
def two(hub):
    a, b = create(hub, metadata={"who": "a"}), create(hub, metadata={"who": "b"})
    return a, b


def test_two_sessions_are_isolated_and_each_token_reaches_only_its_own(hub, two):
    """A file in one session's home is not in the other's; a session's token opens only its
    session; the control API needs the admin token, and a session token is not it."""
    a, b = two
    assert a["state"] == b["state"] == "running"
    assert run_js(a, EXEC + 'await sh("echo from-a > ~/mine && cat ~/mine")') == {"text": "from-a\n", "is_error": False}
    seen = run_js(b, EXEC + 'await sh("cat ~/mine 2>&1 || true")')
    assert "from-a" not in seen["text"] and "No such file" in seen["text"], seen
    import httpx

    for token in (b["token"], "", hub.token):  # another session's, none, the admin's
        headers = {"Accept": "application/json, text/event-stream"} | ({"Authorization": f"Bearer {token}"} if token else {})
        r = httpx.post(a["mcp_url"], headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30)
        assert r.status_code == 401, (token, r.text)
    assert hub.api("GET", "/v1/sessions", token=a["token"]).status_code == 401
    mine = hub.api("GET", "/v1/sessions?metadata=who:a").json()["sessions"]
    assert [s["id"] for s in mine] == [a["id"]]


def test_run_js_through_the_hub_drives_exec_and_the_browser(hub, two):
    """The agent's whole path goes through the hub: run_js, then exec and browser_execute in the session."""
    a, _ = two
    result = run_js(a, EXEC + """
const who = await sh("id -un");
const page = await tools.browser.browser_execute({tab: "hub", operations: [
  {type: "navigate", params: {url: "data:text/html,<title>via-hub</title><p>hello</p>"}}, {type: "getText"}]});
JSON.stringify({who, text: page.results[1].result.text})
""", timeout=180)
    assert not result["is_error"], result["text"]
    out = json.loads(result["text"])
    assert out["who"] == "desktop\n"
    assert "hello" in out["text"]


def test_a_paused_session_resumes_on_an_mcp_request(hub, two):
    """Pause freezes the session; the next MCP request resumes it and is answered."""
    a, _ = two
    assert hub.api("POST", f"/v1/sessions/{a['id']}/pause").json()["state"] == "paused"
    assert DOCKER.containers.get(f"codedesk-{a['id']}").status == "paused"
    started = time.monotonic()
    assert run_js(a, "6 * 7") == {"text": "42", "is_error": False}
    assert time.monotonic() - started < 5
    assert hub.api("GET", f"/v1/sessions/{a['id']}").json()["state"] == "running"


def test_a_sleeping_session_wakes_on_an_mcp_request_with_its_files(hub, two):
    """Sleep stops the container (memory freed); an MCP request starts it, and the disk is kept."""
    _, b = two
    assert "ok" in run_js(b, EXEC + 'await sh("echo kept > ~/marker && echo ok")')["text"]
    assert hub.api("POST", f"/v1/sessions/{b['id']}/sleep").json()["state"] == "sleeping"
    assert DOCKER.containers.get(f"codedesk-{b['id']}").status == "exited"
    again = run_js(b, EXEC + 'await sh("cat ~/marker")', timeout=120)
    assert again == {"text": "kept\n", "is_error": False}
    shown = hub.api("GET", f"/v1/sessions/{b['id']}").json()
    assert shown["state"] == "running"
    assert [e["event"] for e in shown["timeline"]][-3:] == ["sleeping", "waking", "running"]


SITE = """
await tools.exec.exec({bin: "sh", args: ["-c", "mkdir -p ~/site && echo '<title>site</title>' > ~/site/index.html && cd ~/site && exec python3 -m http.server 8099 --bind 127.0.0.1"],
                       timeout: 600, detach: true});
async function page(operations) {
  for (let i = 0; ; i++) {  // until the little site answers
    const r = await tools.browser.browser_execute({tab: "login", operations: [
      {type: "navigate", params: {url: "http://127.0.0.1:8099/"}}, ...operations]});
    if (!r.isError || i > 40) return r;
    await new Promise((ok) => setTimeout(ok, 250));
  }
}
"""


def test_a_browser_login_cookie_written_before_sleep_is_there_after_wake(hub, two):
    """A site's persistent cookie (a login, as far as the site knows) is on the session's disk:
    the Chromium profile survives the container's stop and start."""
    _, b = two
    set_cookie = run_js(b, SITE + """
const r = await page([{type: "evaluate", params: {script: "document.cookie = 'login=alice; max-age=86400; path=/'; document.cookie"}}]);
JSON.stringify(r.results ? r.results[1].result : r)
""", timeout=120)
    assert "login=alice" in set_cookie["text"], set_cookie
    assert hub.api("POST", f"/v1/sessions/{b['id']}/sleep").json()["state"] == "sleeping"
    after = run_js(b, SITE + """
const r = await page([{type: "evaluate", params: {script: "document.cookie"}}]);
JSON.stringify(r.results ? r.results[1].result : r)
""", timeout=120)
    assert "login=alice" in after["text"], after
    assert hub.api("GET", f"/v1/sessions/{b['id']}").json()["state"] == "running"


def _viewer_handshake(hub: HubProcess, token: str, send: bytes = b"", until: bytes = b"RFB") -> bytes:
    """Open the hub's viewer websocket with a link token; the first bytes the session sends
    (up to `until`: the VNC server's greeting)."""
    host, port = hub.url.removeprefix("http://").split(":")
    key = base64.b64encode(secrets.token_bytes(16)).decode()
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall((f"GET /websockify?token={token} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      f"Sec-WebSocket-Protocol: binary\r\n\r\n").encode())
        data = b""
        try:
            while until not in data and len(data) < 4096:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (TimeoutError, ConnectionError):
            pass
    return data


def test_viewer_links_open_the_screen_through_the_hub_until_revoked_or_expired(hub, two):
    """A link serves the session's viewer page and its VNC stream through the hub; a revoked
    or expired link is refused, and a view link cannot open the resize or oversight channels
    (the last answers the agent's approvals), which a control link opens."""
    import httpx

    a, _ = two
    link = hub.api("POST", f"/v1/sessions/{a['id']}/viewer-links", json={"mode": "view", "expires_in_s": 60}).json()
    token = link["url"].split("token=")[1].split("&")[0]
    page = httpx.get(link["url"], timeout=60)
    assert page.status_code == 200 and "viewer.js" in page.text
    assert b"RFB 003" in _viewer_handshake(hub, token)
    assert b"RFB" not in _viewer_handshake(hub, token + ".resize")
    assert b'"hello"' not in _viewer_handshake(hub, token + ".oversight", until=b'"hello"')
    control = hub.api("POST", f"/v1/sessions/{a['id']}/viewer-links", json={"mode": "control", "expires_in_s": 60}).json()
    assert b'"t": "hello"' in _viewer_handshake(hub, control["url"].split("token=")[1].split("&")[0] + ".oversight",
                                                 until=b'"hello"')
    assert hub.api("DELETE", f"/v1/sessions/{a['id']}/viewer-links/{link['id']}").status_code == 200
    assert httpx.get(link["url"], timeout=30).status_code == 401
    assert b"RFB" not in _viewer_handshake(hub, token)
    short = hub.api("POST", f"/v1/sessions/{a['id']}/viewer-links", json={"mode": "control", "expires_in_s": 1}).json()
    time.sleep(1.2)
    r = httpx.get(short["url"], timeout=30)
    assert r.status_code == 401 and "expired" in r.json()["error"]["message"]


class _RfbClient:
    """A person's VNC client reduced to what the test needs: the handshake through the hub's
    viewer websocket (a link's token), then key presses."""

    def __init__(self, ws) -> None:  # noqa: ANN001 - a websockets connection
        self.ws = ws
        self._buf = b""
        version = self._read(12)
        assert version.startswith(b"RFB 003."), version
        self.ws.send(version)
        count = self._read(1)[0]
        types = self._read(count)
        assert 1 in types, types  # "None": the link and the session's secret are the authentication
        self.ws.send(b"\x01")
        assert self._read(4) == b"\x00\x00\x00\x00"
        self.ws.send(b"\x01")  # ClientInit: share the desktop
        header = self._read(24)
        self._read(struct.unpack(">I", header[20:24])[0])  # ServerInit's name
        width, height = struct.unpack(">HH", header[:4])
        # As a viewer starts: its encodings (raw), then the whole screen asked for.
        self.ws.send(b"\x02\x00" + struct.pack(">Hi", 1, 0))
        self.ws.send(b"\x03\x00" + struct.pack(">HHHH", 0, 0, width, height))
        time.sleep(0.5)

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            message = self.ws.recv(timeout=30)
            self._buf += message if isinstance(message, bytes) else message.encode()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def click(self, x: int, y: int) -> None:
        for mask in (1, 0):  # the left button down, then up
            self.ws.send(b"\x05" + bytes([mask]) + struct.pack(">HH", x, y))
            time.sleep(0.05)

    def type(self, text: str) -> None:
        for ch in text:  # Latin-1 keysyms are the characters' own codes
            for down in (1, 0):
                self.ws.send(b"\x04" + bytes([down]) + b"\x00\x00" + struct.pack(">I", ord(ch)))
                time.sleep(0.02)



@contextlib.contextmanager
def rfb_client(hub: HubProcess, link_url: str):  # noqa: ANN201
    """A VNC client through the hub's viewer websocket, opened with a viewer link's token."""
    from websockets.sync.client import connect

    token = link_url.split("token=")[1].split("&")[0]
    with connect(hub.url.replace("http://", "ws://") + f"/websockify?token={token}", subprotocols=["binary"],
                 open_timeout=60, max_size=None) as ws:
        yield _RfbClient(ws)


def test_a_control_link_lets_a_person_type_and_a_view_link_does_not(hub, two):
    """Keys sent through a control link reach the focused page; the same keys through a view
    link never reach the session."""
    a, _ = two
    focus = """
const r = await tools.browser.browser_execute({tab: "typing", operations: [
  {type: "navigate", params: {url: "data:text/html,<title>typing-target</title><textarea id=t autofocus style='position:fixed;inset:0;width:100%;height:100%'></textarea>"}},
  {type: "evaluate", params: {script: "document.getElementById('t').focus(); document.getElementById('t').value"}}]});
await tools.browser.desktop_execute({operations: [{type: "window.focus", params: {title: "typing-target"}}]});
JSON.stringify(r.results[1].result)
"""
    read = """
const r = await tools.browser.browser_execute({tab: "typing", operations: [
  {type: "evaluate", params: {script: "document.getElementById('t').value"}}]});
JSON.stringify(r.results[0].result)
"""
    assert not run_js(a, focus, timeout=120)["is_error"]
    links = {mode: hub.api("POST", f"/v1/sessions/{a['id']}/viewer-links", json={"mode": mode}).json()["url"]
             for mode in ("view", "control")}
    with rfb_client(hub, links["view"]) as watcher:
        watcher.click(640, 450)  # into the field, which fills the page, as a person would
        watcher.type("nope")
        time.sleep(1)
    with rfb_client(hub, links["control"]) as person:
        person.click(640, 450)
        person.type("hello")
        typed = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "hello" not in typed:
            typed = run_js(a, read)["text"]
            time.sleep(0.5)
    assert "hello" in typed and "nope" not in typed, typed


def test_the_hub_killed_and_restarted_lists_the_same_sessions_and_reports_a_removed_one_failed(hub, two):
    """SIGKILL loses nothing: the same sessions in the same states after a restart; a container
    removed behind the hub's back is reported failed, not recreated."""
    a, b = two
    hub.api("POST", f"/v1/sessions/{a['id']}/pause")
    before = {s["id"]: s["state"] for s in hub.api("GET", "/v1/sessions").json()["sessions"]}
    assert before[a["id"]] == "paused" and before[b["id"]] == "running"
    hub.restart_after_kill()
    after = {s["id"]: s["state"] for s in hub.api("GET", "/v1/sessions").json()["sessions"]}
    assert after == before
    assert run_js(a, "1 + 1")["text"] == "2"  # the token still works, the session resumes
    DOCKER.containers.get(f"codedesk-{b['id']}").remove(force=True)
    hub.restart_after_kill()
    shown = hub.api("GET", f"/v1/sessions/{b['id']}").json()
    assert shown["state"] == "failed" and "removed outside the hub" in shown["error"]
    containers, _ = _objects(hub.hub_id)
    assert f"codedesk-{b['id']}" not in [c.name for c in containers]
    r = hub.api("POST", f"/v1/sessions/{b['id']}/wake")
    assert r.status_code == 409 and "delete it" in r.json()["error"]["fix"]


def test_delete_leaves_no_container_or_volume_and_a_deleted_session_cannot_wake(hub, two):
    """Delete removes the container and its disk; waking it afterwards is a clear 410."""
    for session in two:
        assert hub.api("DELETE", f"/v1/sessions/{session['id']}").json()["state"] == "deleted"
        r = hub.api("POST", f"/v1/sessions/{session['id']}/wake")
        assert r.status_code == 410 and "create a new session" in r.json()["error"]["fix"]
    containers, volumes = _objects(hub.hub_id)
    ids = {s["id"] for s in two}
    assert not [c for c in containers if c.labels["codedesk.session"] in ids]
    assert not [v for v in volumes if v.attrs["Labels"]["codedesk.session"] in ids]


def test_the_python_client_creates_uses_and_deletes_a_session_in_three_lines(hub):
    """The README's three lines: create a session, an MCP client session on it, delete it; the
    deleted session is refused plainly, by the client and at its MCP endpoint."""
    from runtime.hub import Client

    async def agent(hub_client: Client, session: dict) -> str:
        async with hub_client.mcp(session) as mcp:
            result = await mcp.call_tool("run_js", {"code": "6 * 7"})
        return "".join(getattr(b, "text", "") for b in result.content)

    with Client(hub.url, hub.token) as client:
        session = client.create(metadata={"via": "client"})
        assert anyio.run(agent, client, session) == "42"
        assert client.delete(session["id"])["state"] == "deleted"
        with pytest.raises(Exception) as refused:
            client.wake(session["id"])
        assert refused.value.code == "session_gone" and "create a new session" in refused.value.fix
    import httpx  # the MCP endpoint of a deleted session says so too, rather than hang or answer 502

    headers = {"Authorization": f"Bearer {session['token']}", "Accept": "application/json, text/event-stream"}
    r = httpx.post(session["mcp_url"], headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30)
    assert r.status_code == 410 and "create a new session" in r.json()["error"]["fix"], r.text


def _cli(hub: HubProcess, *args: str, token: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CODEDESK, "session", "--hub", hub.url, "--token", token or hub.token, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def _cli_json(hub: HubProcess, *args: str, token: str | None = None) -> Any:
    done = _cli(hub, *args, token=token)
    assert done.returncode == 0, f"codedesk session {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    return json.loads(done.stdout)


def test_the_session_cli_drives_a_session_from_create_to_delete(hub):
    """`codedesk session` end to end: create, list, show, pause, wake, sleep, link and revoke,
    delete; a refusal is a message, its fix and exit code 1."""
    made = _cli(hub, "create", "--meta", "via=cli", "--idle-timeout", "600")
    assert made.returncode == 0, made.stderr
    session = json.loads(made.stdout)
    sid = session["id"]
    try:
        assert session["state"] == "running" and session["token"] and session["mcp_url"].endswith(f"/{sid}/mcp")
        listed = _cli_json(hub, "list", "--meta", "via=cli")
        assert [s["id"] for s in listed] == [sid]
        assert _cli_json(hub, "show", sid)["idle_timeout_s"] == 600
        assert _cli_json(hub, "pause", sid)["state"] == "paused"
        assert _cli_json(hub, "wake", sid)["state"] == "running"
        assert run_js(session, "1 + 1")["text"] == "2"
        assert _cli_json(hub, "sleep", sid)["state"] == "sleeping"
        assert _cli_json(hub, "wake", sid)["state"] == "running"
        link = _cli_json(hub, "link", sid, "--mode", "view", "--expires-in", "60")
        assert link["mode"] == "view" and "view_only=1" in link["url"]
        assert _cli_json(hub, "link", sid, "--revoke", link["id"]) == {"id": link["id"], "revoked": True}
        refused = _cli(hub, "list", token="not-the-admin-token")
        assert refused.returncode == 1 and "admin token" in refused.stderr and "fix:" in refused.stderr
    finally:
        deleted = _cli(hub, "delete", sid)
    assert deleted.returncode == 0 and json.loads(deleted.stdout)["state"] == "deleted"
    gone = _cli(hub, "show", sid)
    assert gone.returncode == 1 and "deleted" in gone.stderr and "create a new session" in gone.stderr


def test_an_idle_session_is_paused_then_put_to_sleep_by_itself(hub):
    """No MCP request for idle_timeout_s pauses a session; as long again puts it to sleep."""
    s = create(hub, idle_timeout_s=4)
    try:
        states = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and "sleeping" not in states:
            state = hub.api("GET", f"/v1/sessions/{s['id']}").json()["state"]
            if not states or states[-1] != state:
                states.append(state)
            time.sleep(0.5)
        assert states == ["running", "paused", "sleeping"], states
        log = hub.log.read_text()
        assert f"session {s['id']} paused: idle" in log and f"session {s['id']} sleeping: idle" in log
    finally:
        hub.api("DELETE", f"/v1/sessions/{s['id']}")


def test_the_session_limit_is_refused_naming_it(tmp_path):
    """Past --max-sessions a create is refused with 429 naming the limit and its option."""
    h = HubProcess(tmp_path, "admin", "--image", IMAGE, "--max-sessions", "1")
    try:
        s = create(h)
        r = h.api("POST", "/v1/sessions", json={})
        assert r.status_code == 429
        assert r.json()["error"]["limit"] == "max_sessions" and "--max-sessions" in r.json()["error"]["fix"]
        h.api("DELETE", f"/v1/sessions/{s['id']}")
    finally:
        _stop_and_clean(h)


def test_a_container_without_the_seccomp_profile_says_so_with_the_flag():
    """The newcomer's first `docker run` without the profile names it and the flag in its log,
    and never prints the token it was given."""
    token = secrets.token_hex(16)
    c = DOCKER.containers.run(IMAGE, detach=True, environment={"CODEDESK_TOKEN": token})
    try:
        deadline = time.monotonic() + 30
        logs = ""
        while time.monotonic() < deadline:
            logs = c.logs().decode(errors="replace")
            if "seccomp" in logs and "MCP URL" in logs:
                break
            time.sleep(0.5)
        assert "the seccomp profile is missing" in logs, logs
        assert "--security-opt seccomp=desktop-image/seccomp-chromium.json" in logs, logs
        assert token not in logs, logs
    finally:
        c.remove(force=True, v=True)


def test_a_warm_pool_session_is_handed_out_warmed_up_and_the_pool_refills(tmp_path):
    """With --warm 1 a create is answered from the pool with a session whose JS engine already ran
    and whose desktop is up (its timeline says so), and another pool session is started behind it."""
    h = HubProcess(tmp_path, "admin", "--image", IMAGE, "--warm", "1")

    def pool() -> list[str]:
        return [s["id"] for s in h.api("GET", "/v1/sessions?state=warm").json()["sessions"]]

    try:
        deadline = time.monotonic() + 300
        while not pool() and time.monotonic() < deadline:
            time.sleep(0.5)
        first = pool()
        assert first, h.log.read_text()[-2000:]
        s = create(h)
        assert s["id"] == first[0] and s["state"] == "running"
        assert run_js(s, "1 + 1") == {"text": "2", "is_error": False}
        events = {e["event"]: e["detail"] for e in h.api("GET", f"/v1/sessions/{s['id']}").json()["timeline"]}
        assert "its engine ran, its desktop is up" in events["warm"] and "claimed" in events, events
        deadline = time.monotonic() + 300
        while not [i for i in pool() if i != s["id"]] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert [i for i in pool() if i != s["id"]], h.log.read_text()[-2000:]
    finally:
        _stop_and_clean(h)
