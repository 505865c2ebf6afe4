"""What the hub reads from inside a session, the same on every backend: the viewer's secret,
which `codedesk desktop up` writes to `/data/viewer.json` (a new one per start, root-readable)."""

from __future__ import annotations

import json

READ_VIEWER_FILE = ["cat", "/data/viewer.json"]  # run in the session's desktop container, as root


def viewer_secret(output: bytes | str) -> str | None:
    """The secret in what READ_VIEWER_FILE printed, or None when it is not (yet) there."""
    try:
        info = json.loads(output)
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    return info.get("viewer_secret") or info.get("secret")
