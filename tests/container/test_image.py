"""Smoke test of the container image against a running container (`make image-test`).

Runs the image as the README says (Docker's defaults plus the shipped seccomp profile), then
checks what an operator and an agent rely on: the runtime over HTTP with its token (401
without, /healthz without), run_js driving browser_execute, desktop_execute, exec and
documents, the viewer with its secret (refused without), the user of every process, and a
stop + start that keeps the session's data. Skipped unless $CODEDESK_IMAGE names the image.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

IMAGE = os.environ.get("CODEDESK_IMAGE")
ROOT = Path(__file__).resolve().parents[2]
SECCOMP = ROOT / "desktop-image" / "seccomp-chromium.json"
START_TIMEOUT = 120.0

pytestmark = pytest.mark.skipif(not IMAGE, reason="set CODEDESK_IMAGE (make image-test does)")


def docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


class Container:
    """One running container of the image, with its published ports on loopback."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        self.volume = f"codedesk-smoke-{secrets.token_hex(4)}"
        self.id = docker("run", "-d", "--security-opt", f"seccomp={SECCOMP}",
                         "-e", f"CODEDESK_TOKEN={self.token}", "-v", f"{self.volume}:/data",
                         "-p", "127.0.0.1::8765", "-p", "127.0.0.1::6080", IMAGE)

    def port(self, inner: int) -> int:
        return int(docker("port", self.id, f"{inner}/tcp").splitlines()[0].rsplit(":", 1)[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port(8765)}"

    def logs(self) -> str:
        proc = subprocess.run(["docker", "logs", "--tail", "60", self.id], capture_output=True, text=True)
        return proc.stdout + proc.stderr

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            try:
                if http_get(self.url + "/healthz")[0] == 200:
                    return
            except (OSError, AssertionError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"the container did not answer /healthz within {START_TIMEOUT:.0f} s:\n{self.logs()}")

    def wait_session(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if subprocess.run(["docker", "exec", self.id, "test", "-f", "/data/session.json"]).returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"the desktop session did not start:\n{self.logs()}")

    def remove(self) -> None:
        subprocess.run(["docker", "rm", "-f", self.id], capture_output=True)
        subprocess.run(["docker", "volume", "rm", "-f", self.volume], capture_output=True)


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def run_js(container: "Container", code: str, timeout: float = 120) -> dict:
    """Call run_js on `container` over streamable HTTP with its token."""
    return call_run_js(container.url, container.token, code, timeout)


def call_run_js(url: str, token: str, code: str, timeout: float = 120) -> dict:
    """Call run_js at `url` (the runtime's base URL) with `token`; the result's text and isError."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def go() -> dict:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                      timeout=httpx2.Timeout(30.0, read=timeout + 30)) as client:
            async with streamable_http_client(f"{url}/mcp", http_client=client) as (read, write, *_):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool("run_js", {"code": code, "timeout_seconds": timeout})
        text = "".join(getattr(b, "text", "") for b in result.content)
        return {"text": text, "is_error": result.is_error}

    return anyio.run(go)


@pytest.fixture(scope="module")
def container():
    c = Container()
    try:
        c.wait_healthy()
        c.wait_session()
        yield c
    finally:
        c.remove()


CALL = """
const call = async (server, tool, args) => {
  const r = await mcp.callTool(server, tool, args);
  const text = r.content.map((b) => b.text || "").join("");
  if (r.isError) throw new Error(`${server}/${tool}: ${text}`);
  return text;
};
async function run(bin, args) {
  const started = JSON.parse(await call("exec", "exec", { bin, args, timeout: 60 }));
  let logs = "", offset = 0, status = "running";
  while (status === "running") {
    const r = JSON.parse(await call("exec", "stream_logs", { id: started.id, offset }));
    logs += r.logs; offset = r.next_offset; status = r.status;
    if (status === "running") await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { status, logs };
}
"""


def test_the_runtime_answers_with_its_token_and_refuses_without(container):
    """The token is the runtime's only lock; the health endpoint needs none and says nothing."""
    assert http_get(container.url + "/healthz") == (200, b"ok\n")
    status, _ = http_get(container.url + "/mcp", {"Accept": "application/json, text/event-stream"})
    assert status == 401
    assert run_js(container, "6 * 7") == {"text": "42", "is_error": False}


def test_run_js_drives_every_capability_in_the_container(container):
    """The agent's whole surface works in the image: the browser (with Chromium's own sandbox
    on), the desktop (Chromium's interface read through accessibility), programs and documents, each reached through the spawn service as the
    desktop user."""
    result = run_js(container, CALL + """
const page = await call("browser", "browser_execute", {tab: "smoke", operations: [
  {type: "navigate", params: {url: "chrome://sandbox"}}, {type: "getText"}]});
const screen = await call("browser", "desktop_execute", {operations: [{type: "screen.width"},
  {type: "accessibility.find", params: {role: "entry", name: "Address and search bar"}}]});
const id = await run("id", ["-un"]);
const made = await run("sh", ["-c", "printf 'P6 2 2 255\\n' > ~/red.ppm && head -c 12 /dev/zero | tr '\\\\0' '\\\\377' >> ~/red.ppm && echo made"]);
const home = (await run("sh", ["-c", "echo $HOME"])).logs.trim();
const doc = await call("documents", "image_convert", {path: home + "/red.ppm", output_path: home + "/red.png", format: "png"});
JSON.stringify({page, screen, id, made, doc})
""", timeout=180)
    assert not result["is_error"], result["text"]
    out = json.loads(result["text"])
    # Chromium's own sandbox (namespaces + seccomp-BPF) holds under the shipped profile.
    assert "You are adequately sandboxed" in out["page"], out["page"]
    desktop = json.loads(out["screen"])
    assert desktop["results"][0]["result"] == 1280, desktop
    # The accessibility bus works in the container, and Chromium's own interface is on it.
    found = desktop["results"][1]["result"]["elements"]
    assert any(e["name"] == "Address and search bar" for e in found), desktop
    assert out["id"] == {"status": "completed:0", "logs": "desktop\n"}, out["id"]
    assert "made" in out["made"]["logs"], out["made"]
    assert "red.png" in out["doc"], out["doc"]


def _viewer_banner(port: int, token: str) -> bytes:
    """What the viewer's websocket sends first for `token` (b"" when it refuses)."""
    key = base64.b64encode(secrets.token_bytes(16)).decode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall((f"GET /websockify?token={token} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      f"Sec-WebSocket-Protocol: binary\r\n\r\n").encode())
        data = b""
        try:
            while b"RFB" not in data and len(data) < 4096:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (TimeoutError, ConnectionError):
            pass
    return data


def test_the_viewer_answers_with_its_secret_and_refuses_without(container):
    """The viewer listens on every interface of the container: only the session's secret opens it."""
    port = container.port(6080)
    assert http_get(f"http://127.0.0.1:{port}/viewer.html")[0] == 200
    viewer = json.loads(docker("exec", container.id, "cat", "/data/viewer.json"))
    secret = viewer.get("viewer_secret") or viewer.get("secret")
    assert secret, viewer
    assert b"RFB 003" in _viewer_banner(port, secret)
    assert b"RFB" not in _viewer_banner(port, "not-the-secret")


def test_no_long_lived_process_but_the_launcher_runs_as_root(container):
    """The privilege model in the container: the runtime as `codedesk`, the desktop and every
    capability server as `desktop`, the viewer as `codedesk-view`; root only for tini, the
    entrypoint and the session supervisor (the launcher)."""
    rows = docker("exec", container.id, "ps", "-eo", "user:20,pid,comm:20,args", "--no-headers").splitlines()
    by_user: dict[str, list[str]] = {}
    root = []
    for row in rows:
        user, _pid, comm, args = row.split(None, 3)
        by_user.setdefault(user, []).append(args)
        if user == "root" and comm != "ps":
            root.append((comm, args))
    allowed = {("tini", "/usr/bin/tini -- /opt/codedesk/desktop-image/entrypoint.sh"),
               ("bash", "bash /opt/codedesk/desktop-image/entrypoint.sh"),
               ("entrypoint.sh", "bash /opt/codedesk/desktop-image/entrypoint.sh")}
    assert all(r in allowed or r[0] == "codedesk-super" for r in root), root
    assert [r for r in root if r[0] == "codedesk-super"], root
    runtime = [a for a in by_user.get("codedesk", []) if "codedesk serve" in a]
    assert runtime, by_user
    desktop = " ".join(by_user.get("desktop", []))
    for part in ("Xvfb", "xfwm4", "chromium", "capabilities.browser", "capabilities.exec", "capabilities.documents"):
        assert part in desktop, (part, by_user)
    viewer = " ".join(by_user.get("codedesk-view", []))
    assert "x11vnc" in viewer and "websockify" in viewer, by_user
    # The Kubernetes template runs the runtime container as this uid.
    assert docker("exec", container.id, "id", "-u", "codedesk") == "998"


def test_stop_and_start_keep_the_sessions_data(container):
    """A session put to sleep and woken keeps its disk: files, profile, home."""
    made = run_js(container, CALL + 'JSON.stringify(await run("sh", ["-c", "echo kept > ~/marker && echo ok"]))')
    assert "ok" in made["text"], made
    docker("stop", "-t", "30", container.id, timeout=60)
    docker("start", container.id)
    container.wait_healthy()
    container.wait_session()
    again = run_js(container, CALL + 'JSON.stringify(await run("cat", [(await run("sh", ["-c", "echo -n $HOME"])).logs + "/marker"]))')
    assert not again["is_error"], again
    assert json.loads(again["text"]) == {"status": "completed:0", "logs": "kept\n"}
