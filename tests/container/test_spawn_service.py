"""The spawn service: the root supervisor starts stdio servers as the desktop user for a runtime
that is not root (the container's). A real service, a real runtime-side Bridge running as the
runtime's user in its own process, a real MCP server; runs as root (skipped otherwise)."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.desktop.layout import DesktopUser
from runtime.desktop.spawn import SpawnService

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_USER = os.environ.get("CODEDESK_RUNTIME_USER", "codedesk")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starting servers as another user needs root")

# Runs as the runtime's user: a Bridge to the test server through the spawn service; prints what
# the server's process is (while it runs) and whether it is gone once the Bridge has closed it.
CLIENT = r"""
import anyio, json, os, sys, time
from runtime.bridge import Bridge
from runtime.config import StdioServer

def status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return {"uid": int(fields["Uid"][0]), "nnp": fields["NoNewPrivs"][0], "capbnd": fields["CapBnd"][0],
            "capeff": fields["CapEff"][0]}

async def main():
    servers = {"t": StdioServer(command=sys.executable, args=[sys.argv[1]])}
    async with Bridge(servers) as bridge:
        result = await bridge.call_tool("t", "pid", {})
        pid = int(result["content"][0]["text"])
        out = {"pid": pid, **status(pid)}
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    out["gone"] = not os.path.exists(f"/proc/{pid}")
    print(json.dumps(out))

anyio.run(main)
"""


@pytest.fixture
def spawn_service():
    folder = Path(f"/run/codedesk-test-{secrets.token_hex(4)}")
    user = DesktopUser.resolve()
    home = Path(pwd.getpwnam(user.name).pw_dir)
    service = SpawnService(folder / "spawn.sock", pwd.getpwnam(RUNTIME_USER).pw_uid, user, home)
    service.start()
    try:
        yield service
    finally:
        service.close()
        shutil.rmtree(folder, ignore_errors=True)


def _as_runtime_user(spawn_service: SpawnService, code: str, *args: str) -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(RUNTIME_USER)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": entry.pw_dir,
           "CODEDESK_SPAWN_SOCKET": str(spawn_service.path), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups",
         "--no-new-privs", "--", sys.executable, "-c", code, *args],
        env=env, cwd="/", capture_output=True, text=True, timeout=60,
    )


def test_a_runtime_that_is_not_root_gets_its_servers_as_the_desktop_user_without_privileges(spawn_service):
    """The container's runtime cannot switch users: its servers must still run as the desktop
    user with no_new_privs and no capabilities, and stop when the runtime closes them."""
    proc = _as_runtime_user(spawn_service, CLIENT, str(ROOT / "tests" / "mcp_test_server.py"))
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["uid"] == spawn_service.user.uid
    assert seen["nnp"] == "1"
    assert int(seen["capbnd"], 16) == 0 and int(seen["capeff"], 16) == 0
    assert seen["gone"], "the server outlived the runtime's connection"


def test_the_spawn_socket_serves_only_the_runtimes_user(spawn_service):
    """Whoever else reaches the socket (here root itself, which the file mode does not stop)
    is refused by its peer credentials: only the runtime may start servers."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(10)
    conn.connect(str(spawn_service.path))
    reply = json.loads(conn.makefile().readline())
    conn.close()
    assert reply == {"ok": False, "error": "this socket serves only the runtime's user"}
    mode = spawn_service.path.stat()
    assert mode.st_uid == pwd.getpwnam(RUNTIME_USER).pw_uid and mode.st_mode & 0o777 == 0o600


REFUSED = r"""
import json, os, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(os.environ["CODEDESK_SPAWN_SOCKET"])
r, w = os.pipe()
null = os.open("/dev/null", os.O_RDWR)
requests = [
    ({"argv": ["/bin/true"], "cwd": "relative/dir"}, [r, w, 2]),
    ({"argv": ["/bin/true"], "env": {"CODEDESK_TOKEN": "x"}}, [r, w, 2]),
    ({"argv": ["/bin/true"]}, [r, w]),
    ({"argv": ["/bin/true"]}, [null, null, null]),
    ({"argv": [], "extra": 1}, [r, w, 2]),
]
out = []
for request, fds in requests:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["CODEDESK_SPAWN_SOCKET"])
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], fds)
    out.append(json.loads(conn.makefile().readline()))
    conn.close()
print(json.dumps(out))
"""


def test_the_spawn_service_refuses_bad_requests_and_says_why(spawn_service):
    """Even the runtime's requests are checked: a relative cwd, the runtime's token in the
    server's environment, missing descriptors, a stdin that is not a pipe, unknown fields."""
    proc = _as_runtime_user(spawn_service, REFUSED)
    assert proc.returncode == 0, proc.stderr
    replies = json.loads(proc.stdout)
    assert all(r["ok"] is False for r in replies), replies
    errors = [r["error"] for r in replies]
    assert "absolute path" in errors[0]
    assert "CODEDESK_TOKEN" in errors[1]
    assert "three descriptors" in errors[2]
    assert "stdin must be a pipe" in errors[3]
    assert "argv, env and cwd only" in errors[4]
