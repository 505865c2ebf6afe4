"""The mcpServers configuration: built-in defaults, user files, and errors that name the entry."""

from __future__ import annotations

import json
import sys

import pytest

from runtime.config import ConfigError, HttpServer, StdioServer, builtin_servers, is_builtin, load_servers, parse_servers


def write(tmp_path, data) -> str:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def test_builtin_servers_are_the_default(monkeypatch) -> None:
    """Without a config file the runtime offers browser, exec, documents, files, web and memory, run by this Python."""
    monkeypatch.delenv("CODEDESK_CONFIG", raising=False)
    servers = load_servers()
    assert list(servers) == ["browser", "exec", "documents", "files", "web", "memory", "session"]
    assert servers["exec"] == StdioServer(command=sys.executable, args=("-m", "capabilities.exec"))


def test_user_config_adds_and_overrides_servers(tmp_path) -> None:
    """A config file adds third-party servers and replaces built-ins by name."""
    path = write(tmp_path, {"mcpServers": {
        "exec": {"command": "my-exec", "args": ["--fast"], "env": {"A": "1"}},
        "remote": {"url": "https://example.test/mcp", "headers": {"Authorization": "Bearer x"}},
    }})
    servers = load_servers(path)
    assert list(servers) == ["browser", "exec", "documents", "files", "web", "memory", "session", "remote"]
    assert servers["exec"] == StdioServer(command="my-exec", args=("--fast",), env={"A": "1"})
    assert servers["remote"] == HttpServer(url="https://example.test/mcp", headers={"Authorization": "Bearer x"})


def test_config_file_from_environment(tmp_path, monkeypatch) -> None:
    """$CODEDESK_CONFIG names the file when --config is not given."""
    monkeypatch.setenv("CODEDESK_CONFIG", write(tmp_path, {"mcpServers": {"extra": {"command": "x"}}}))
    assert "extra" in load_servers()


def test_entry_without_command_or_url_is_refused(tmp_path) -> None:
    """An entry that is neither stdio nor HTTP is named in the error."""
    with pytest.raises(ConfigError, match=r"mcpServers.odd needs either 'command' .* or 'url'"):
        load_servers(write(tmp_path, {"mcpServers": {"odd": {"args": []}}}))


def test_unknown_field_in_entry_is_refused(tmp_path) -> None:
    """A typo in an entry is refused by name instead of silently ignored."""
    with pytest.raises(ConfigError, match=r"mcpServers.x: argz: Extra inputs are not permitted"):
        load_servers(write(tmp_path, {"mcpServers": {"x": {"command": "c", "argz": []}}}))


def test_invalid_json_and_missing_file_are_reported(tmp_path) -> None:
    """Unreadable files say which file and why."""
    with pytest.raises(ConfigError, match=r"not valid JSON \(line 1"):
        load_servers(write(tmp_path, "{nope"))
    with pytest.raises(ConfigError, match=r"cannot read config file .*missing.json"):
        load_servers(tmp_path / "missing.json")


def test_http_entry_needs_http_url() -> None:
    """An HTTP server's url must be http(s)."""
    with pytest.raises(ConfigError, match=r"mcpServers.r: url"):
        parse_servers({"mcpServers": {"r": {"url": "ftp://x"}}})


def test_builtin_servers_inherit_environment() -> None:
    """Built-in servers carry no env of their own: they inherit the runtime's (CODEDESK_DATA)."""
    assert all(server.env == {} for server in builtin_servers().values())


def test_web_search_entry_reaches_the_web_server(tmp_path):
    """The operator names the search provider once, in the config; the web server gets it, a
    named MCP server resolved to its entry, and stays a built-in (its declarations stay whole)."""
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({
        "mcpServers": {"brave": {"command": "brave-mcp", "args": ["--stdio"], "env": {"KEY": "k"}}},
        "webSearch": {"server": "brave", "tool": "brave_web_search"},
    }))
    servers = load_servers(config)
    search = json.loads(servers["web"].env["CODEDESK_WEB_SEARCH"])
    assert search == {"tool": "brave_web_search",
                      "mcp": {"command": "brave-mcp", "args": ["--stdio"], "env": {"KEY": "k"}}}
    assert is_builtin("web", servers["web"]) and not is_builtin("web", servers["brave"])


def test_web_search_entry_naming_no_server_is_refused(tmp_path):
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"webSearch": {"server": "nowhere", "tool": "search"}}))
    with pytest.raises(ConfigError, match="webSearch.server"):
        load_servers(config)
