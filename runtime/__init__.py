"""The codedesk runtime: the agent-facing MCP server (run_js, run_py), its CLI, configuration,
the bridge to capability servers, and HTTP auth.

Modules: `cli` (the `codedesk` command), `server` (MCP server and transports), `bridge`
(client sessions to capability servers), `config` (the mcpServers file), `arguments`
(validation of run_js / run_py arguments), `engines` (the sandbox engines, created once),
`descriptions`, `signatures` and `listing_cache` (what the agent reads), `results` (what the
agent gets back), `auth` (bearer tokens on HTTP). `desktop` is the desktop session's lifecycle.
"""

import functools


@functools.cache
def version() -> str:
    """The installed codedesk's version ("0" when it is not installed as a package)."""
    try:
        from importlib.metadata import version as installed

        return installed("codedesk")
    except Exception:
        return "0"
