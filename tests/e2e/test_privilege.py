"""The privilege suite: what a hostile script can reach through `run_js`, against the real session.

Each test acts as a script would (through the runtime, its capability servers and the programs
`exec` starts) and fails on one way out that SECURITY.md says is closed. Run as root (CI and
`make up` are), where the desktop user and the runtime are different accounts; as another user
there is no one to drop to, and the tests that need the separation are skipped saying so.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path

import pytest

from tests.fixtures.runtime import start_runtime

pytestmark = pytest.mark.desktop

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the privilege separation exists only when started as root")

# Helpers every script of this suite starts with: run a program through exec and wait for it.
PRELUDE = """
const call = async (server, tool, args) => {
  const r = await mcp.callTool(server, tool, args);
  const text = r.content.map((b) => b.text || "").join("");
  if (r.isError) return { error: text };
  try { return JSON.parse(text.slice(text.indexOf("{"))); } catch { return { text }; }
};
async function run(bin, args, env = {}) {
  const started = await call("exec", "exec", { bin, args, env, timeout: 120 });
  if (started.error) return { status: "refused", logs: started.error };
  let logs = "", offset = 0, status = "running";
  while (status === "running") {
    const r = await call("exec", "stream_logs", { id: started.id, offset });
    logs += r.logs; offset = r.next_offset; status = r.status;
    if (status === "running") await new Promise((resolve) => setTimeout(resolve, 400));
  }
  return { status, logs };
}
"""

# Looks for the secrets (given in two halves, so its own command line never holds one whole)
# in every /proc/*/environ and cmdline it can read and in every file it can read where
# anything is written at run time; prints each place found, one per line.
SCAN = r"""
import os, sys
halves = sys.argv[1:]
needles = [(halves[i] + halves[i + 1]).encode() for i in range(0, len(halves), 2)]
found = []
me = str(os.getpid())
for pid in os.listdir("/proc"):
    if not pid.isdigit() or pid == me:
        continue
    for part in ("environ", "cmdline"):
        try:
            data = open(f"/proc/{pid}/{part}", "rb").read()
        except OSError:
            continue
        found += [f"/proc/{pid}/{part}" for n in needles if n in data]
roots = ["/tmp", "/var/tmp", "/dev/shm", "/run", "/home", "/root", "/etc", "/var/log", "/opt",
         "/srv", os.environ.get("CODEDESK_SCAN_DATA", "/data"), os.getcwd()]
seen = set()
for root in roots:
    for folder, dirs, files in os.walk(root, onerror=lambda e: None):
        for name in files:
            path = os.path.join(folder, name)
            if path in seen or os.path.islink(path):
                continue
            seen.add(path)
            try:
                if os.path.getsize(path) > 20_000_000:
                    continue
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            found += [path for n in needles if n in data]
print("\n".join(sorted(set(found))) or "nothing")
"""


@pytest.fixture(scope="module")
def token() -> str:
    return secrets.token_hex(16)


@pytest.fixture(scope="module")
def hostile(desktop_session, token):
    """The runtime as `make up` runs it: root, its HTTP token in its environment, the real session."""
    env = {**desktop_session.env, "CODEDESK_TOKEN": token}
    with start_runtime(env) as client:
        yield client


def _js(client, body: str, timeout: float = 120) -> dict:
    outcome = client.run_js(PRELUDE + body, timeout_seconds=timeout)
    assert not outcome.is_error, outcome.text
    return json.loads(outcome.text.strip().splitlines()[-1])


def _server_pids(token: str) -> dict[str, list[int]]:
    """Capability server processes started by the runtime holding `token` (not other tests'
    servers, which may serve the same session): their parent's environment holds it."""
    found: dict[str, list[int]] = {}
    marker = f"CODEDESK_TOKEN={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            environ = Path(f"/proc/{parent}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker not in environ:
            continue
        for name in ("browser", "exec", "documents"):
            if f"capabilities.{name}".encode() in argv and argv[0] != b"/usr/bin/setpriv":
                found.setdefault(name, []).append(int(entry.name))
    return found


def _status_field(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@needs_root
def test_every_capability_server_runs_as_the_desktop_user_without_privileges(hostile, desktop_session, token):
    """A script drives the capability servers: none of them may be root or able to become it."""
    _js(hostile, 'await mcp.listTools(); JSON.stringify({ok: true})')
    servers = _server_pids(token)
    assert set(servers) >= {"browser", "exec", "documents"}, servers
    for name, pids in servers.items():
        for pid in pids:
            uids = [int(u) for u in _status_field(pid, "Uid").split()]
            assert uids == [desktop_session.info.uid] * 4, f"{name} (pid {pid}) runs with uids {uids}"
            assert _status_field(pid, "NoNewPrivs") == "1", f"{name} may gain privileges through setuid"
            assert int(_status_field(pid, "CapBnd"), 16) == 0, f"{name} keeps capabilities in its bounding set"
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert b"CODEDESK_TOKEN" not in environ, f"{name} was given the runtime's token"


@needs_root
def test_the_callers_loader_variables_never_reach_a_root_process(hostile, desktop_session):
    """`env` is the script's: LD_PRELOAD & co must only ever reach the unprivileged program."""
    home = desktop_session.info.home
    trace = home / f"ld-trace-{secrets.token_hex(4)}"
    result = _js(hostile, f"""
const r = await run("true", [], {{LD_DEBUG: "files", LD_DEBUG_OUTPUT: {json.dumps(str(trace))},
                                 LD_PRELOAD: "/nonexistent/preload.so", LD_LIBRARY_PATH: {json.dumps(str(home))},
                                 GCONV_PATH: {json.dumps(str(home))}}});
JSON.stringify(r)""")
    assert result["status"] in ("completed:0", "failed:1") or result["status"].startswith("completed"), result
    traces = list(home.glob(trace.name + ".*"))
    assert traces, "the loader never saw the caller's variables: the test proves nothing"
    owners = {path.stat().st_uid for path in traces}
    assert owners == {desktop_session.info.uid}, f"a process owned by {owners} loaded with the caller's env"


@needs_root
def test_programs_run_with_no_new_privs_and_no_capabilities(hostile, desktop_session):
    """A program must not regain root through a setuid binary or inherited capabilities."""
    result = _js(hostile, """
const r = await run("grep", ["-E", "^(Uid|NoNewPrivs|CapEff|CapPrm|CapBnd):", "/proc/self/status"]);
JSON.stringify(r)""")
    fields = dict(line.split(":", 1) for line in result["logs"].strip().splitlines())
    fields = {k: v.strip() for k, v in fields.items()}
    assert fields["NoNewPrivs"] == "1"
    assert int(fields["CapEff"], 16) == int(fields["CapPrm"], 16) == int(fields["CapBnd"], 16) == 0
    assert fields["Uid"].split()[0] == str(desktop_session.info.uid)


@needs_root
def test_sudo_and_setuid_binaries_give_nothing(hostile):
    """No setuid path back up: sudo (where the host has one) and su fail for a program."""
    result = _js(hostile, """
const out = {};
for (const [bin, args] of [["sudo", ["-n", "id", "-u"]], ["su", ["-c", "id -u", "root"]]]) {
  out[bin] = await run(bin, args);
}
JSON.stringify(out)""")
    for bin_, r in result.items():
        assert r["status"] != "completed:0", f"{bin_} succeeded: {r}"
        assert "\n0\n" not in "\n" + r["logs"], f"{bin_} ran something as root: {r}"


@needs_root
def test_no_secret_is_readable_by_the_desktop_user(hostile, desktop_session, token):
    """The HTTP token and the viewer's secret must be in no environment, command line or file
    the desktop user can read, even after a step that starts a helper process (the clipboard owner)."""
    viewer_secret = desktop_session.info.viewer_secret
    assert viewer_secret, "the test runs as the session's owner and must know the viewer's secret"
    halves = [token[:16], token[16:], viewer_secret[:12], viewer_secret[12:]]
    result = _js(hostile, f"""
const clip = await call("browser", "desktop_execute", {{operations: [{{type: "clipboard.setContent", params: {{text: "probe"}}}}]}});
const r = await run("python3", ["-c", {json.dumps(SCAN)}, ...{json.dumps(halves)}],
                    {{CODEDESK_SCAN_DATA: {json.dumps(str(desktop_session.data_dir))}}});
JSON.stringify({{clip, r}})""", timeout=300)
    assert "error" not in result["clip"], result["clip"]
    assert result["r"]["status"] == "completed:0", result["r"]
    assert result["r"]["logs"].strip() == "nothing", f"secrets readable at:\n{result['r']['logs']}"


@needs_root
def test_the_vnc_server_is_not_reachable_without_the_viewer(hostile, desktop_session):
    """x11vnc takes any connection it gets: only websockify, given the secret, may reach it."""
    status = json.loads(desktop_session.desktop_cli("status").stdout)
    probe = r"""
import socket, sys, subprocess
greeted = []
out = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
for line in out.splitlines():
    addr = line.split()[3]
    host, port = addr.rsplit(":", 1)
    host = host.strip("[]")
    try:
        with socket.create_connection(("127.0.0.1" if host in ("*", "0.0.0.0") else host, int(port)), timeout=1) as s:
            s.settimeout(1)
            if s.recv(12).startswith(b"RFB "):
                greeted.append(addr)
    except OSError:
        pass
try:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sys.argv[1])
        greeted.append("unix:" + sys.argv[1])
except OSError as exc:
    print("socket refused:", exc.strerror)
print("greeted:", greeted)
"""
    result = _js(hostile, f"""
JSON.stringify(await run("python3", ["-c", {json.dumps(probe)}, {json.dumps(status["vnc_socket"])}]))""")
    assert result["status"] == "completed:0", result
    assert "greeted: []" in result["logs"], result["logs"]
    assert "socket refused: Permission denied" in result["logs"], result["logs"]


PNG_1X1 = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8ffff3f0005fe02fea7d6a4"
    "4a0000000049454e44ae426082")).decode()


@needs_root
def test_documents_cannot_write_over_the_sessions_files(hostile, desktop_session):
    """The documents server writes as the desktop user: session.json and viewer.json are out of
    reach, directly and through a link planted in the user's home."""
    data = desktop_session.data_dir
    home = desktop_session.info.home
    before = {name: (data / name).read_bytes() for name in ("session.json", "viewer.json")}
    write_png = "import base64,sys; open(sys.argv[1], 'wb').write(base64.b64decode(sys.argv[2]))"
    result = _js(hostile, f"""
const home = {json.dumps(str(home))}, data = {json.dumps(str(data))};
const out = {{}};
out.png = await run("python3", ["-c", {json.dumps(write_png)}, home + "/probe.png", {json.dumps(PNG_1X1)}]);
out.link = await run("ln", ["-sf", data + "/session.json", home + "/planted.png"]);
out.link2 = await run("ln", ["-sf", data + "/viewer.json", home + "/planted2.png"]);
for (const target of [data + "/session.json", data + "/viewer.json", home + "/planted.png", home + "/planted2.png",
                      data + "/desktop-state.json"]) {{
  out[target] = await call("documents", "image_convert", {{path: home + "/probe.png", output_path: target, format: "png"}});
}}
JSON.stringify(out)""")
    assert result["png"]["status"] == "completed:0", result["png"]
    assert result["link"]["status"] == "completed:0", result["link"]
    for name, content in before.items():
        assert (data / name).read_bytes() == content, f"{name} was overwritten"
        assert (data / name).stat().st_uid == 0
    for target in (str(data / "session.json"), str(home / "planted.png")):
        assert "error" in result[target], f"writing {target} was not refused: {result[target]}"


@needs_root
def test_the_session_files_are_out_of_the_desktop_users_hands(desktop_session):
    """The data directory and the session's files belong to root; the user owns only its folders."""
    data = desktop_session.data_dir
    uid = desktop_session.info.uid
    assert data.stat().st_uid == 0 and data.stat().st_mode & 0o022 == 0
    for name in ("session.json", "viewer.json", "desktop-state.json", "desktop.lock", "logs"):
        assert (data / name).stat().st_uid == 0, name
    assert (data / "viewer.json").stat().st_mode & 0o077 == 0
    assert (data / "logs").stat().st_mode & 0o077 == 0
    session = json.loads((data / "session.json").read_text())
    assert desktop_session.info.viewer_secret not in json.dumps(session)
    for name in ("home", "chrome", "exec", "browser"):
        assert (data / name).stat().st_uid == uid, name


ECS_METADATA = "169.254.170.2"  # a metadata address of its own, apart from the other suites'


@pytest.fixture
def metadata_service():
    """An HTTP server on a link-local address (put on `lo` for the test), answering as root."""
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Secret(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            body = b"instance-credentials"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    subprocess.run(["ip", "addr", "add", f"{ECS_METADATA}/32", "dev", "lo"], capture_output=True, timeout=10)
    server = ThreadingHTTPServer((ECS_METADATA, 0), Secret)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{ECS_METADATA}:{server.server_address[1]}/latest"
    finally:
        server.shutdown()
        server.server_close()
        subprocess.run(["ip", "addr", "del", f"{ECS_METADATA}/32", "dev", "lo"], capture_output=True, timeout=10)


@needs_root
def test_a_metadata_address_is_refused_to_pages_and_programs(hostile, desktop_session, metadata_service):
    """Cloud credentials live at link-local addresses: neither `navigate` nor a program reaches them."""
    import urllib.request

    assert urllib.request.urlopen(metadata_service, timeout=5).read() == b"instance-credentials"
    fetch = ("import sys, urllib.request\n"
             "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
             "except OSError as exc:\n    print('refused:', exc)\n")
    result = _js(hostile, f"""
const url = {json.dumps(metadata_service)};
const page = await mcp.callTool("browser", "browser_execute",
  {{tab: "egress-e2e", operations: [{{type: "navigate", params: {{url}}}}, {{type: "getText"}}]}});
const program = await run("python3", ["-c", {json.dumps(fetch)}, url]);
JSON.stringify({{page: {{isError: page.isError, text: page.content.map((b) => b.text || "").join("")}}, program}})""")
    assert result["page"]["isError"], result["page"]
    assert "instance-credentials" not in result["page"]["text"]
    assert ECS_METADATA in result["page"]["text"] and "169.254.0.0/16" in result["page"]["text"], result["page"]
    assert result["program"]["status"] == "completed:0", result["program"]
    assert "instance-credentials" not in result["program"]["logs"]
    assert "refused:" in result["program"]["logs"], result["program"]
