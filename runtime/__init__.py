"""The codedesk runtime: the agent-facing MCP server (run_js, run_py), its CLI, configuration,
the bridge to capability servers, and HTTP auth.

Modules: `cli` (the `codedesk` command), `server` (MCP server and transports), `bridge`
(client sessions to capability servers), `config` (the mcpServers file), `arguments`
(validation of run_js / run_py arguments), `engines` (the sandbox engines, created once),
`descriptions`, `signatures` and `listing_cache` (what the agent reads), `results` (what the
agent gets back), `auth` (bearer tokens on HTTP). `desktop` is the desktop session's lifecycle.
"""
