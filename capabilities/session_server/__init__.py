"""The `session` capability: the session's timeline (every run and each capability call it made,
in SQLite beside the session's data), its exports, and replay.

`store` defines the timeline on disk (the runtime writes it; `TimelineReader` reads it),
`redaction` keeps secrets out of it, `export` writes it as JSON Lines or HTML, `replay_rules`
compares a replayed call with its record, `tools` and `server` serve it as the MCP server
named `session` (the package is not `capabilities.session`, which finds the desktop session).
"""
