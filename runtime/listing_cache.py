"""Tool listings of capability servers remembered between runs, so the run_js / run_py
descriptions can show every server's tools without starting any server.

The file is `<data dir>/runtime/tools.json` (or one in the runtime's own cache folder when it
may not write the data directory): `{server: {"config": ..., "tools": [...]}}`. An
entry counts only while the server's configuration and codedesk's version are unchanged; live
listings always win.
A cache that cannot be read or written is ignored (the descriptions then point to listTools).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import version
from .config import ServerConfig

logger = logging.getLogger(__name__)


def default_path() -> Path:
    """`<data dir>/runtime/tools.json`; or, for a runtime that may not write there (the
    container's, which is not root and does not own /data), a file of its own in its cache
    folder, named for the data directory. Never a place the desktop user can write: the file
    becomes the model's tool descriptions."""
    from capabilities.session import data_dir

    data = data_dir()
    folder = data / "runtime"
    if os.access(folder if folder.exists() else data, os.W_OK):
        return folder / "tools.json"
    digest = hashlib.sha256(str(data).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "codedesk" / f"tools-{digest}.json"


def _key(config: ServerConfig) -> dict[str, Any]:
    # codedesk's version too: an upgrade may change what the same command serves
    return {"kind": type(config).__name__, **config.model_dump(mode="json"), "codedesk": version()}


def load(path: Path, servers: Mapping[str, ServerConfig]) -> dict[str, list[dict[str, Any]]]:
    """Remembered tools of the configured servers whose configuration still matches."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    listing: dict[str, list[dict[str, Any]]] = {}
    for name, config in servers.items():
        entry = data.get(name)
        if isinstance(entry, dict) and entry.get("config") == _key(config) and isinstance(entry.get("tools"), list):
            listing[name] = [tool for tool in entry["tools"] if isinstance(tool, dict) and "name" in tool]
    return listing


def save(path: Path, servers: Mapping[str, ServerConfig], live: Mapping[str, list[dict[str, Any]]]) -> None:
    """Remember the live listings (merged over what the file already holds)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    for name, tools in live.items():
        if name in servers:
            data[name] = {"config": _key(servers[name]), "tools": tools}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(data), encoding="utf-8")
        temporary.replace(path)
    except OSError as exc:
        logger.debug("tool listing cache not written: %r", exc)
