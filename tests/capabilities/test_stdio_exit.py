"""Every capability server ends quietly and at once when the runtime goes away."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}


@pytest.mark.parametrize("name", ["browser", "exec", "documents"])
def test_a_server_whose_client_closed_its_pipes_exits_quietly(name, tmp_path):
    """The runtime closing the pipes is a server's normal end: status 0, no traceback in its log."""
    server = subprocess.Popen(
        [sys.executable, "-m", f"capabilities.{name}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin", "CODEDESK_DATA": str(tmp_path)})
    try:
        server.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        server.stdin.flush()
        assert b'"result"' in server.stdout.readline()
        server.stdout.close()  # the runtime is gone: the server's next answer finds no reader
        server.stdin.write(b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}\n')
        server.stdin.close()
        assert server.wait(timeout=20) == 0
        stderr = server.stderr.read().decode()
        assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stderr.close()
