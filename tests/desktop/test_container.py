"""The container's entrypoint (desktop-image/entrypoint.sh), run here as CI runs it: the
session on the data dir, the runtime over HTTP behind the token, everything stopped on SIGTERM.
The Dockerfile only copies the tree, runs the install script and `make install`, and sets
this entrypoint, so this is the container's whole start-up logic."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

from capabilities.session import read_session
from runtime.desktop import procs
from runtime.desktop.layout import free_port
from tests.desktop.conftest import wait_until
from tests.fixtures.session import REPO, make_data_dir, run_desktop_cli

pytestmark = pytest.mark.desktop


def test_entrypoint_starts_session_and_runtime_and_stops_both_on_sigterm():
    """`docker run` must give a working desktop and MCP endpoint, and `docker stop` a clean disk."""
    data = make_data_dir("codedesk-test-container-")
    http_port, viewer_port = free_port(), free_port("0.0.0.0")
    env = {**os.environ, "CODEDESK_DATA": str(data), "CODEDESK_HTTP_PORT": str(http_port),
           "CODEDESK_VIEWER_PORT": str(viewer_port), "CODEDESK_TOKEN": "test-token-123"}
    proc = subprocess.Popen(["bash", str(REPO / "desktop-image" / "entrypoint.sh")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_until(lambda: (data / "session.json").exists(), timeout=90, what="the session")
        info = read_session(data)
        assert f":{viewer_port}/" in info.viewer_url

        def answers(token: str | None) -> int | None:
            req = urllib.request.Request(f"http://127.0.0.1:{http_port}/mcp", method="POST",
                                         data=b"{}", headers={"Content-Type": "application/json"})
            if token:
                req.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    return resp.status
            except urllib.error.HTTPError as exc:
                return exc.code
            except OSError:
                return None

        wait_until(lambda: answers(None), timeout=90, what="the runtime's HTTP endpoint")
        assert answers(None) == 401
        assert answers("test-token-123") not in (None, 401)

        # The runtime starts first and may answer before the desktop is up: wait for both banners.
        wait_until(lambda: any("MCP endpoint" in line for line in lines)
                   and any("viewer:" in line for line in lines), timeout=90, what="the entrypoint's banners")

        session_id = info.extra["session_id"]
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        reader.join(timeout=10)
        assert not (data / "session.json").exists()
        assert procs.marked_pids(session_id) == []
        assert procs.chromium_pids(info.chrome_profile) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=10)
        proc.stdout.close()
        run_desktop_cli("down", "--data", str(data), check=False)
        subprocess.run(["rm", "-rf", str(data)])
