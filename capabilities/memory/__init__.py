"""The `memory` capability: what a script keeps for later runs (SQLite with FTS5 on the
session's disk), and the session's skills (folders with a SKILL.md).

Run it with `python -m capabilities.memory` (an MCP server on stdio). Every tool answers by
the one result contract of `capabilities.contract`.
"""
