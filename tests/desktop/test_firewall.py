"""The egress firewall: the desktop user's programs cannot reach denied ranges; root can.

Each test puts a denied address on `lo`, serves HTTP on it from this process (as root), and
connects to it as root and as the desktop user (`setpriv`, like exec'd programs run). The
firewall is per uid and machine-wide, so whatever rules the table held before (a running
session's) are put back at the end.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import shutil
import subprocess
import sys
import threading
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from capabilities.egress import EgressPolicy
from runtime.desktop.firewall import (
    TABLE,
    apply_egress_firewall,
    egress_firewall_installed,
    remove_egress_firewall,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the egress firewall needs root (nftables rules, "
                                "addresses on lo, switching to the desktop user); CI runs as root")

METADATA = "169.254.169.254"
METADATA_V6 = "fd00:ec2::254"
OPERATOR_DENIED = "198.18.0.1"  # a benchmarking range nothing here uses

# Run as the desktop user: connect and say what happened, one word.
PROBE = """
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    print("reached" if s.recv(100).startswith(b"HTTP/") else "no-answer")
except OSError as exc:
    print("refused:" + type(exc).__name__)
"""


# Run as the desktop user: connect, say so, wait for a line on stdin, then send a request.
HOLD = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print("connected", flush=True)
sys.stdin.readline()
try:
    s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    print("reached" if s.recv(100).startswith(b"HTTP/") else "cut")
except OSError as exc:
    print("cut:" + type(exc).__name__)
"""

# Run as the desktop user: serve one HTTP answer on argv[1], printing the port first.
SERVE = """
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
conn, _ = s.accept()
conn.recv(1000)
conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok")
conn.close()
"""


def desktop_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("desktop")
    except KeyError:
        pytest.fail("no user 'desktop': run desktop-image/install-system.sh, which creates it")


def desktop_argv(script: str, *args: str) -> list[str]:
    user = desktop_user()
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
            os.path.realpath(sys.executable), "-I", "-c", script, *args]


def as_desktop_user(address: str, port: int) -> str:
    """Connect to address:port as the desktop user; 'reached' or 'refused:<error>'."""
    done = subprocess.run(desktop_argv(PROBE, address, str(port)), capture_output=True, text=True,
                          timeout=30, cwd="/")
    assert done.returncode == 0, f"the probe failed to run as the desktop user: {done.stderr}"
    return done.stdout.strip()


def as_root(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{host}:{port}/", timeout=5) as response:
            return "reached" if response.status == 200 else f"status {response.status}"
    except OSError as exc:
        return "refused:" + type(exc).__name__


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"metadata"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class _V6Server(ThreadingHTTPServer):
    import socket as _socket

    address_family = _socket.AF_INET6


@contextmanager
def served_on_lo(address: str):
    """`address` added to lo (removed after) with an HTTP server on it; yields the port."""
    version = ipaddress.ip_address(address).version
    prefix = 32 if version == 4 else 128
    added = subprocess.run(
        ["ip", f"-{version}", "addr", "replace", f"{address}/{prefix}", "dev", "lo"]
        + (["nodad"] if version == 6 else []),
        capture_output=True, text=True, timeout=10,
    )
    assert added.returncode == 0, f"cannot add {address} to lo: {added.stderr}"
    server = None
    try:
        server = (_V6Server if version == 6 else ThreadingHTTPServer)((address, 0), _Hello)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server.server_address[1]
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        subprocess.run(["ip", f"-{version}", "addr", "del", f"{address}/{prefix}", "dev", "lo"],
                       capture_output=True, timeout=10)


@pytest.fixture
def egress_table():
    """Keep the firewall table as it was before the test (a running session may have rules)."""
    assert shutil.which("nft"), "nft not found: desktop-image/install-system.sh must install nftables"
    saved = subprocess.run(["nft", "list", "table", "inet", TABLE], capture_output=True, text=True, timeout=15)
    try:
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", TABLE], capture_output=True, timeout=15)
        if saved.returncode == 0:
            subprocess.run(["nft", "-f", "-"], input=saved.stdout, capture_output=True, text=True, timeout=15)


def test_desktop_user_is_refused_metadata_address_root_is_not(egress_table):
    """The default policy keeps every program of the desktop user from the metadata address,
    while root (the runtime) still reaches it; removing the rules lifts the refusal."""
    uid = desktop_user().pw_uid
    with served_on_lo(METADATA) as port:
        assert remove_egress_firewall(uid) is None
        assert as_desktop_user(METADATA, port) == "reached", "without rules the address must be reachable"

        assert apply_egress_firewall(uid, EgressPolicy()) is None
        assert egress_firewall_installed(uid)
        assert as_root(METADATA, port) == "reached"
        assert as_desktop_user(METADATA, port) == "refused:ConnectionRefusedError"
        # The IPv4-mapped form reaches the same IPv4 address, and is refused the same way.
        assert as_desktop_user(f"::ffff:{METADATA}", port) == "refused:ConnectionRefusedError"

        assert remove_egress_firewall(uid) is None
        assert not egress_firewall_installed(uid)
        assert as_desktop_user(METADATA, port) == "reached"


def test_metadata_ipv6_address_is_refused(egress_table):
    """fd00:ec2::254 (the IPv6 metadata address) is refused like its IPv4 counterpart."""
    uid = desktop_user().pw_uid
    with served_on_lo(METADATA_V6) as port:
        assert apply_egress_firewall(uid, EgressPolicy()) is None
        assert as_root(METADATA_V6, port) == "reached"
        assert as_desktop_user(METADATA_V6, port) == "refused:ConnectionRefusedError"


def test_allowed_range_passes_and_reapplying_replaces_the_rules(egress_table):
    """An operator's allow lifts the default deny for its range, and applying again replaces
    the rules rather than adding to them (back to the defaults, the address is refused)."""
    uid = desktop_user().pw_uid
    with served_on_lo(METADATA) as port:
        assert apply_egress_firewall(uid, EgressPolicy()) is None
        assert as_desktop_user(METADATA, port) == "refused:ConnectionRefusedError"

        assert apply_egress_firewall(uid, EgressPolicy.parse(allow=[f"{METADATA}/32"])) is None
        assert as_desktop_user(METADATA, port) == "reached"

        assert apply_egress_firewall(uid, EgressPolicy()) is None
        assert as_desktop_user(METADATA, port) == "refused:ConnectionRefusedError"


def test_operator_deny_applies_even_when_also_allowed(egress_table):
    """An operator's deny range is refused even when the allow list names it too: an allow
    only lifts the default deny."""
    uid = desktop_user().pw_uid
    with served_on_lo(OPERATOR_DENIED) as port:
        assert apply_egress_firewall(uid, EgressPolicy()) is None
        assert as_desktop_user(OPERATOR_DENIED, port) == "reached", "198.18.0.0/15 is not denied by default"

        policy = EgressPolicy.parse(deny=["198.18.0.0/15"], allow=[f"{OPERATOR_DENIED}/32"])
        assert apply_egress_firewall(uid, policy) is None
        assert as_root(OPERATOR_DENIED, port) == "reached"
        assert as_desktop_user(OPERATOR_DENIED, port) == "refused:ConnectionRefusedError"


def test_rules_cover_only_the_uid_they_are_applied_for(egress_table):
    """Rules for another uid leave the desktop user alone: the filter is per user, not global."""
    uid = desktop_user().pw_uid
    with served_on_lo(METADATA) as port:
        remove_egress_firewall(uid)
        assert apply_egress_firewall(uid + 1000, EgressPolicy()) is None
        assert as_desktop_user(METADATA, port) == "reached"
        assert remove_egress_firewall(uid + 1000) is None


def test_connection_opened_while_allowed_is_cut_once_denied(egress_table):
    """Every packet meets the rules, not only a connection's first: a program holding a
    connection opened while the range was allowed cannot go on using it after a deny."""
    uid = desktop_user().pw_uid
    with served_on_lo(METADATA) as port:
        assert apply_egress_firewall(uid, EgressPolicy.parse(allow=[f"{METADATA}/32"])) is None
        holder = subprocess.Popen(desktop_argv(HOLD, METADATA, str(port)), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
        try:
            assert holder.stdout.readline().strip() == "connected", holder.stderr.read()
            assert apply_egress_firewall(uid, EgressPolicy()) is None
            out, err = holder.communicate("go\n", timeout=30)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.communicate()
        assert out.strip().startswith("cut"), (out, err)


def test_desktop_users_own_server_answers_from_a_denied_range(egress_table):
    """Replies of a server the desktop user runs pass: the rules stop what the user's programs
    open, not answers to clients such as the runtime reaching Chromium's DevTools port."""
    uid = desktop_user().pw_uid
    with served_on_lo(OPERATOR_DENIED):
        assert apply_egress_firewall(uid, EgressPolicy.parse(deny=[f"{OPERATOR_DENIED}/32"])) is None
        server = subprocess.Popen(desktop_argv(SERVE, OPERATOR_DENIED), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd="/")
        try:
            port = int(server.stdout.readline())
            assert as_root(OPERATOR_DENIED, port) == "reached"
            server.wait(timeout=30)
        finally:
            if server.poll() is None:
                server.kill()
            server.communicate()
