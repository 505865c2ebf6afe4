"""The egress policy in the browser server, and the environment of the programs it starts.

- `navigate` to a link-local or metadata address, in any form a browser accepts, is refused
  before anything runs; an operator's allow in session.json lets it through; an operator's
  deny refuses even loopback; local pages load as before.
- What a page does by itself (a redirect, `location = ...`) is stopped by the session's
  firewall (runtime/desktop/firewall.py), which these tests apply for the desktop user.
- Helper processes (the clipboard's owner) get the session's environment, never the server's.

The policy's own rules (ranges, host forms, messages) are tested without a browser at the top.
Tests that serve on 169.254.169.254 (an address put on `lo`) or apply the firewall need root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import uuid
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from capabilities.egress import DEFAULT_DENY, EgressConfigError, EgressPolicy, EgressRefused, url_host
from capabilities.session import SESSION_FILE
from runtime.desktop.firewall import TABLE, apply_egress_firewall

METADATA = "169.254.169.254"
TAB = "egress"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="serving on 169.254.169.254 (an address on lo) and "
                                "applying the firewall need root; CI runs as root")


# ---- the policy, without a browser


@pytest.mark.parametrize("host", [
    "169.254.169.254", "0xa9fea9fe", "2852039166", "0251.0376.0251.0376", "169.254.43518", "169.254.169.254.",
    "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]", "%31%36%39.254.169.254", "\uff11\uff16\uff19.254.169.254",
    "[fd00:ec2::254]", "[fe80::1]",
])
def test_metadata_host_in_any_literal_form_is_refused(host):
    """Browsers accept hex, decimal, octal, short, escaped, full-width and mapped IPv6 forms of
    an address; each must be judged as the address it names."""
    with pytest.raises(EgressRefused) as caught:
        EgressPolicy().check_host(host)
    assert any(caught.value.address in n for n in DEFAULT_DENY)
    assert "--egress-allow" in str(caught.value)


def test_name_resolving_to_metadata_is_refused_by_its_address():
    """A name like 169.254.169.254.nip.io is judged by what it resolves to, every address of it."""
    answers = {"169.254.169.254.nip.io": ["93.184.215.14", "169.254.169.254"], "example.org": ["93.184.215.14"]}
    policy = EgressPolicy()
    with pytest.raises(EgressRefused) as caught:
        policy.check_host("169.254.169.254.nip.io", resolve=answers.__getitem__)
    assert "169.254.169.254.nip.io stands for 169.254.169.254" in str(caught.value)
    assert policy.check_host("example.org", resolve=answers.__getitem__)


def test_loopback_and_private_ranges_stay_reachable_by_default():
    """The session's own servers and local dev servers live on loopback and private ranges."""
    policy = EgressPolicy()
    for address in ["127.0.0.1", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "fd12::1", "93.184.215.14"]:
        assert not policy.refuses(address), address
    assert policy.check_host("localhost")  # the real resolver


def test_allow_lifts_only_the_default_deny_and_operator_deny_always_applies():
    """An allow reopens exactly its range of the default deny; an operator's deny wins over it."""
    policy = EgressPolicy.from_config({"deny": ["10.0.0.0/8", "169.254.169.0/24"],
                                       "allow": ["169.254.169.254/32", "10.0.0.1/32"]})
    assert policy.refuses("169.254.169.254"), "169.254.169.0/24 is denied by the operator"
    assert policy.refuses("10.0.0.1") and policy.refuses("::ffff:10.0.0.1")
    lifted = EgressPolicy.from_config({"allow": ["169.254.169.254/32"]})
    assert not lifted.refuses("169.254.169.254") and not lifted.refuses("::ffff:169.254.169.254")
    assert lifted.refuses("169.254.169.253")
    with pytest.raises(EgressRefused, match="operator denies"):
        policy.check_host("10.9.9.9")


def test_bad_egress_config_is_refused_with_the_entry_named():
    """A typo in session.json's egress must fail loudly, not silently allow everything."""
    for config, words in [({"allow": ["not-a-range"]}, "'not-a-range'"), ({"deny": "10.0.0.0/8"}, "egress.deny"),
                          ({"alow": []}, "'alow'"), (["10.0.0.0/8"], "egress must be an object")]:
        with pytest.raises(EgressConfigError, match=words.replace("[", r"\[").replace(".", r"\.")):
            EgressPolicy.from_config(config)


@pytest.mark.parametrize("url, host", [
    ("http://169.254.169.254\\@example.org/", "169.254.169.254"),
    ("http:169.254.169.254/", "169.254.169.254"),
    ("view-source:http://169.254.169.254/", "169.254.169.254"),
    ("http://user:pw@169.254.169.254:80/", "169.254.169.254"),
    ("http://169.254.\n169.254/", "169.254.169.254"),
    (" HTTPS://[fd00:ec2::254]:443/x", "[fd00:ec2::254]"),
    ("about:blank", None), ("data:text/html,<p>x</p>", None), ("file:///etc/passwd", None),
])
def test_url_host_is_read_as_a_browser_reads_it(url, host):
    """urllib and Chromium disagree on backslashes, missing slashes and view-source: the
    check must see the host Chromium connects to."""
    assert url_host(url) == host


# ---- helpers for the browser tests


class _Metadata(BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.hits.append(self.path)
        body = b"<title>metadata</title><p id='secret'>instance credentials</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def metadata_server():
    """An HTTP server on 169.254.169.254 (added to lo, removed after); `.port`, `.hits`."""
    if os.geteuid() != 0:
        pytest.skip("serving on 169.254.169.254 needs root (an address on lo); CI runs as root")
    added = subprocess.run(["ip", "addr", "replace", f"{METADATA}/32", "dev", "lo"], capture_output=True,
                           text=True, timeout=10)
    assert added.returncode == 0, f"cannot add {METADATA} to lo: {added.stderr}"
    hits: list[str] = []
    server = None
    try:
        server = ThreadingHTTPServer((METADATA, 0), type("Handler", (_Metadata,), {"hits": hits}))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield type("Metadata", (), {"port": server.server_address[1], "hits": hits,
                                    "url": f"http://{METADATA}:{server.server_address[1]}/"})()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        subprocess.run(["ip", "addr", "del", f"{METADATA}/32", "dev", "lo"], capture_output=True, timeout=10)


@contextmanager
def firewall(uid: int, policy: EgressPolicy):
    """The egress firewall applied for `uid`; the table is put back as it was after."""
    assert shutil.which("nft"), "nft not found: desktop-image/install-system.sh must install nftables"
    saved = subprocess.run(["nft", "list", "table", "inet", TABLE], capture_output=True, text=True, timeout=15)
    try:
        reason = apply_egress_firewall(uid, policy)
        assert reason is None, reason
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", TABLE], capture_output=True, timeout=15)
        if saved.returncode == 0:
            subprocess.run(["nft", "-f", "-"], input=saved.stdout, capture_output=True, text=True, timeout=15)


@contextmanager
def server_with_egress(browser_desktop, browser_kit, egress: dict):
    """A browser server of its own whose session.json (a copy of the session's, same desktop)
    has `egress` set; yields `run(operations, tab=...)` returning a PageRun."""
    copy = Path(browser_desktop.data_dir).with_name(f"{Path(browser_desktop.data_dir).name}-egress-{uuid.uuid4().hex[:6]}")
    copy.mkdir(mode=0o700)
    try:
        raw = json.loads((Path(browser_desktop.data_dir) / SESSION_FILE).read_text())
        raw["egress"] = egress
        (copy / SESSION_FILE).write_text(json.dumps(raw))
        with browser_kit.BrowserServer({**browser_desktop.env, "CODEDESK_DATA": str(copy)}) as server:
            def run(operations: list[dict], **extra):
                return browser_kit.read(server.call("browser_execute", {"operations": operations, **extra}))
            yield run
    finally:
        shutil.rmtree(copy, ignore_errors=True)


# ---- browser_execute


@pytest.mark.parametrize("url", [
    f"http://{METADATA}/latest/meta-data/",
    "http://0xa9fea9fe/latest/meta-data/",
    f"http://[::ffff:{METADATA}]/latest/meta-data/",
    "http://2852039166/latest/meta-data/",
    "http://[fd00:ec2::254]/",
])
def test_navigate_to_metadata_address_is_refused_before_anything_runs(run_page, pages_server, url):
    """The model asking for the metadata address, in any form, gets a refusal naming the step,
    address, range and the operator's way out, and the tab stays where it was."""
    start = pages_server.url("/index.html")
    assert not run_page([{"type": "navigate", "params": {"url": start}}], tab=TAB).is_error
    run = run_page([
        {"type": "evaluate", "params": {"script": "document.title = 'step 1 ran'"}},
        {"type": "navigate", "params": {"url": url}},
    ], tab=TAB)
    assert run.is_error
    assert run.summary.startswith("refused, nothing ran"), run.summary
    assert run.body["error"]["kind"] == "refused" and run.body["error"]["step"] == 2
    error = run.body["error"]["message"]
    assert f"step 2 (navigate): {url} is not opened" in error
    assert "169.254.0.0/16" in error or "fd00:ec2::254/128" in error
    assert "codedesk desktop up --egress-allow" in error
    after = run_page([{"type": "url", "params": {}}], tab=TAB)
    assert after.result(1)["url"] == start
    assert after.result(1)["title"] != "step 1 ran", "nothing of a refused request may run"


def test_local_test_page_still_loads(run_page, pages_server):
    """Loopback stays reachable: the session's own servers and local dev servers live there."""
    run = run_page([{"type": "navigate", "params": {"url": pages_server.url("/index.html")}},
                    {"type": "url", "params": {}}], tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(1)["status"] == 200


@needs_root
def test_refused_navigation_sends_no_request(run_page, metadata_server, browser_desktop):
    """Refused means nothing reaches the address, not merely an error after loading it (with a
    firewall that would let it through, so the browser server's check alone is tested)."""
    before = len(metadata_server.hits)
    with firewall(browser_desktop.info.uid, EgressPolicy.parse(allow=[f"{METADATA}/32"])):
        run = run_page([{"type": "navigate", "params": {"url": metadata_server.url}}], tab=TAB)
    assert run.is_error and "is not opened" in run.body["error"]["message"]
    assert len(metadata_server.hits) == before


@needs_root
def test_allowed_range_in_session_json_lets_navigate_through(browser_desktop, browser_kit, metadata_server):
    """An operator who lists the metadata address in egress.allow reaches it from a page (the
    firewall, applied with the same policy, lets the desktop user through too)."""
    egress = {"allow": [f"{METADATA}/32"]}
    with firewall(browser_desktop.info.uid, EgressPolicy.from_config(egress)), \
            server_with_egress(browser_desktop, browser_kit, egress) as run:
        result = run([{"type": "navigate", "params": {"url": metadata_server.url}},
                      {"type": "getText", "params": {}}], tab="egress-allowed", close=True)
    assert not result.is_error, result.summary
    assert result.result(1)["status"] == 200
    assert "instance credentials" in json.dumps(result.result(2))


def test_operator_deny_refuses_even_loopback(browser_desktop, browser_kit, pages_server):
    """An operator's deny applies to any range, loopback included, and names the operator."""
    with server_with_egress(browser_desktop, browser_kit, {"deny": ["127.0.0.0/8"]}) as run:
        result = run([{"type": "navigate", "params": {"url": pages_server.url("/index.html")}}],
                     tab="egress-denied", close=True)
    assert result.is_error
    assert "127.0.0.0/8, which the session's operator denies" in result.body["error"]["message"]


def test_invalid_egress_in_session_json_refuses_navigation(browser_desktop, browser_kit, pages_server):
    """A malformed policy fails closed, with the entry named, instead of allowing everything."""
    with server_with_egress(browser_desktop, browser_kit, {"allow": ["169.254.0.0/99"]}) as run:
        result = run([{"type": "navigate", "params": {"url": pages_server.url("/index.html")}}],
                     tab="egress-invalid", close=True)
    assert result.is_error
    assert "egress settings are invalid" in result.body["error"]["message"] and "169.254.0.0/99" in result.body["error"]["message"]


@needs_root
def test_redirect_and_page_script_to_metadata_are_stopped_by_the_firewall(
        run_page, pages_server, metadata_server, browser_desktop):
    """What the browser server cannot see (a redirect, `location = ...` after load) is stopped
    by the firewall: no request reaches the address."""
    before = len(metadata_server.hits)
    tab = "egress-firewall"
    with firewall(browser_desktop.info.uid, EgressPolicy()):
        try:
            redirected = run_page([{"type": "navigate", "params": {
                "url": pages_server.url(f"/redirect?to={metadata_server.url}")}}], tab=tab)
            assert redirected.is_error, redirected.summary
            run = run_page([
                {"type": "navigate", "params": {"url": pages_server.url("/index.html")}},
                {"type": "evaluate", "params": {"script": f"location = {metadata_server.url!r}"}},
                {"type": "wait", "params": {"ms": 1500}},
            ], tab=tab)
            assert not run.is_error, run.summary
        finally:
            # Chromium's error page retries by itself later: close it while the rules hold.
            run_page([{"type": "url", "params": {}}], tab=tab, close=True)
    assert len(metadata_server.hits) == before, metadata_server.hits


# ---- programs the server starts


@needs_root
def test_clipboard_owner_does_not_inherit_the_servers_environment(browser_desktop, browser_kit):
    """The xclip left owning the clipboard runs as the desktop user, who can read its
    /proc/<pid>/environ: the runtime's token in the server's environment must not be there."""
    secret = f"secret-xyz-{uuid.uuid4().hex}"
    info = browser_desktop.info
    with browser_kit.BrowserServer({**browser_desktop.env, "CODEDESK_TOKEN": secret}) as server:
        done = server.call("desktop_execute", {"operations": [
            {"type": "clipboard.setContent", "params": {"text": "from a server holding a token"}}]})
        assert not done.is_error, done.content[0].text
        owners = []
        leaked = []
        for proc in psutil.process_iter(["pid", "name", "uids"]):
            try:
                if proc.info["uids"].real != info.uid:
                    continue
                environ = Path(f"/proc/{proc.info['pid']}/environ").read_bytes()
            except (psutil.Error, OSError):
                continue
            if proc.info["name"] == "xclip" and f"DISPLAY={info.display}".encode() in environ:
                owners.append(proc.info["pid"])
            if secret.encode() in environ:
                leaked.append((proc.info["pid"], proc.info["name"]))
        assert owners, "no xclip owning the clipboard as the desktop user was found"
        assert not leaked, f"the server's CODEDESK_TOKEN reached desktop processes: {leaked}"


@needs_root
def test_tab_is_not_reopened_at_a_refused_url(browser_desktop, browser_kit, metadata_server):
    """A tab remembered at a refused URL (a page went there by itself) reopens blank, not there,
    also where no firewall would stop it (here one that allows the address)."""
    state = Path(browser_desktop.data_dir) / "browser" / "tabs.json"
    state.parent.mkdir(exist_ok=True)
    saved = json.loads(state.read_text()) if state.exists() else {"tabs": {}}
    saved["tabs"]["egress-restore"] = {"target": "", "url": metadata_server.url}
    state.write_text(json.dumps(saved))
    before = len(metadata_server.hits)
    with firewall(browser_desktop.info.uid, EgressPolicy.parse(allow=[f"{METADATA}/32"])), \
            browser_kit.BrowserServer(browser_desktop.env) as server:
        run = browser_kit.read(server.call("browser_execute", {
            "operations": [{"type": "url", "params": {}}], "tab": "egress-restore", "close": True}))
    assert not run.is_error, run.summary
    assert run.result(1)["url"] == "about:blank"
    assert len(metadata_server.hits) == before
