"""Every capability server ends quietly and at once when the runtime goes away."""

from __future__ import annotations

import sys

import pytest

from tests.fixtures.stdio import client_leaves


@pytest.mark.parametrize("name", ["browser", "exec", "documents"])
def test_a_server_whose_client_closed_its_pipes_exits_quietly(name, tmp_path):
    """The runtime closing the pipes is a server's normal end: status 0, no traceback in its log."""
    status, stderr = client_leaves([sys.executable, "-m", f"capabilities.{name}"],
                                   {"PATH": "/usr/bin:/bin", "CODEDESK_DATA": str(tmp_path)},
                                   b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}\n')
    assert status == 0
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
