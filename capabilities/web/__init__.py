"""The `web` capability: pages fetched as markdown, text or HTML, rendered pages, images, and
search through a provider the operator configures.

Run it with `python -m capabilities.web` (an MCP server on stdio). Every request, and every
redirect it follows, is checked against the session's egress policy (`capabilities.egress`).
Every tool answers by the one result contract of `capabilities.contract`.
"""
