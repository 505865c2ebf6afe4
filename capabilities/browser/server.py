"""The `browser` capability server: `browser_execute` (pages of the desktop's Chromium) and
`desktop_execute` (mouse, keyboard, screen, windows and clipboard of the display).

Each tool family lives in its own module, which exposes `register(server)`; this module
only combines them.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from . import desktop_tool, page_tool


def build_server() -> MCPServer:
    server = MCPServer("browser")
    page_tool.register(server)
    desktop_tool.register(server)
    return server
