"""Which capability servers exist and how to reach them.

The configuration uses the common `mcpServers` format:

    {"mcpServers": {
        "name": {"command": "...", "args": [...], "env": {...}},   # a stdio server
        "other": {"url": "https://...", "headers": {...}}           # a streamable HTTP server
    }}

The built-in capability servers (`browser`, `exec`, `documents`, `files`, `web`, `memory`,
`session`) are
the default; a user config file (`--config FILE` or `$CODEDESK_CONFIG`) adds servers or
overrides them by name. Its `webSearch` entry names the web server's search provider (`web_search_env`):
`{"server": "<an mcpServers name>", "tool": "...", "argument"?, "arguments"?}` or an HTTP API
`{"url": "...{query}...", "headers"?, "results"?}`; it reaches the `web` server as
`$CODEDESK_WEB_SEARCH` (capabilities/web/search.py reads it). Its `policy` entry says which
calls scripts may make, which wait for a person's approval, and per-run call budgets
(`runtime/policy.py`, read by `load_policy`).
Stdio servers get an environment built for them (`runtime/launch.py`: the locale, PATH, the
display, `CODEDESK_*` settings but never the runtime's secrets); `env` entries are laid over it.
A runtime running as root starts them as the desktop user.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .policy import Policy, PolicyError

CONFIG_ENV = "CODEDESK_CONFIG"
SERVER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class ConfigError(ValueError):
    """The configuration file is unreadable or malformed; the message names the file and the field."""


class StdioServer(BaseModel):
    """A capability server started as a subprocess speaking MCP on stdin/stdout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class HttpServer(BaseModel):
    """A capability server reached over streamable HTTP."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)


ServerConfig = StdioServer | HttpServer


class _ConfigFile(BaseModel):
    model_config = ConfigDict(extra="allow")

    mcpServers: dict[Annotated[str, Field(pattern=SERVER_NAME.pattern)], dict[str, Any]] = Field(default_factory=dict)


_SERVER_ADAPTER: TypeAdapter[ServerConfig] = TypeAdapter(ServerConfig)


BUILTIN_MODULES = {"browser": "browser", "exec": "exec", "documents": "documents", "files": "files",
                   "web": "web", "memory": "memory", "session": "session_server"}
"""Each built-in server's package under `capabilities/` (`session`'s is `session_server`:
`capabilities.session` finds the desktop session)."""


def builtin_servers() -> dict[str, ServerConfig]:
    """The capability servers shipped with codedesk, each run with this Python. The runtime
    serves `session` in its own process (`runtime/server.py`); its entry says what it is."""
    return {
        name: StdioServer(command=sys.executable, args=("-m", f"capabilities.{module}"))
        for name, module in BUILTIN_MODULES.items()
    }


DECLARED_IN_FULL = frozenset({"browser", "exec", "documents"})
"""The built-in servers whose typed declarations run_js's and run_py's descriptions carry whole;
the others (`files`, `web`, `memory`, `session`) are named there with their tools, so that both descriptions stay
within the tools/list budget (their full declarations are one `mcp.describe(server)` away, and
their typed functions work all the same)."""


def is_builtin(name: str, config: ServerConfig | None) -> bool:
    """Whether `config` runs the built-in server `name`: the same program, whatever its `env`
    (the operator's settings for it, such as the web search provider)."""
    shipped = builtin_servers().get(name)
    return (shipped is not None and isinstance(config, StdioServer)
            and (config.command, config.args, config.cwd) == (shipped.command, shipped.args, shipped.cwd))


def parse_servers(data: Any, source: str = "config") -> dict[str, ServerConfig]:
    """Validate an `{"mcpServers": {...}}` document; raise ConfigError naming the bad entry."""
    try:
        document = _ConfigFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_first_error(exc)}") from exc
    servers: dict[str, ServerConfig] = {}
    for name, entry in document.mcpServers.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{source}: mcpServers.{name} must be an object")
        kind = StdioServer if "command" in entry else HttpServer if "url" in entry else None
        if kind is None:
            raise ConfigError(
                f"{source}: mcpServers.{name} needs either 'command' (a stdio server) or 'url' (an HTTP server)"
            )
        try:
            servers[name] = kind.model_validate(entry)
        except ValidationError as exc:
            raise ConfigError(f"{source}: mcpServers.{name}: {_first_error(exc)}") from exc
    return servers


def load_servers(path: str | os.PathLike[str] | None = None) -> dict[str, ServerConfig]:
    """The built-in servers, overridden and extended by the user config file.

    The file is `path` when given, else `$CODEDESK_CONFIG` when set; without either only the
    built-in servers are configured.
    """
    servers = builtin_servers()
    read = _read_config(path)
    if read is None:
        return servers
    file, data = read
    servers.update(parse_servers(data, str(file)))
    search = web_search_env(data, servers, str(file))
    web = servers.get("web")
    if search is not None and isinstance(web, StdioServer):
        servers["web"] = web.model_copy(update={"env": {**web.env, WEB_SEARCH_ENV: search}})
    return servers


def load_policy(path: str | os.PathLike[str] | None = None) -> Policy:
    """The config file's `policy` entry (`runtime/policy.py`); without one, everything is allowed."""
    read = _read_config(path)
    if read is None:
        return Policy()
    file, data = read
    try:
        return Policy.parse(data, str(file))
    except PolicyError as exc:
        raise ConfigError(str(exc)) from exc


def _read_config(path: str | os.PathLike[str] | None) -> tuple[Path, Any] | None:
    """The config file (`path`, else `$CODEDESK_CONFIG`) and its JSON; None without one."""
    chosen = path if path is not None else os.environ.get(CONFIG_ENV) or None
    if chosen is None:
        return None
    file = Path(chosen).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror or exc}") from exc
    try:
        return file, json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc


WEB_SEARCH_ENV = "CODEDESK_WEB_SEARCH"


def web_search_env(data: Any, servers: dict[str, ServerConfig], source: str = "config") -> str | None:
    """The `$CODEDESK_WEB_SEARCH` value for the config's `webSearch` entry (None without one): a
    `server` name is replaced by that server's entry, so the web server can reach it itself."""
    entry = data.get("webSearch") if isinstance(data, dict) else None
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ConfigError(f"{source}: webSearch must be an object")
    if "server" not in entry:
        return json.dumps(entry)
    name = entry["server"]
    target = servers.get(name) if isinstance(name, str) else None
    if target is None or name in ("web", "memory", "session"):
        raise ConfigError(f"{source}: webSearch.server must name a search server of mcpServers, not {name!r}")
    rest = {key: value for key, value in entry.items() if key != "server"}
    return json.dumps({**rest, "mcp": target.model_dump(mode="json", exclude_none=True)})


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "document"
    return f"{where}: {error['msg']}"
