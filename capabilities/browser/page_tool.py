"""Not built yet: registers no tool."""

from mcp.server.mcpserver import MCPServer


def register(server: MCPServer) -> None:
    return None
