"""The `exec` capability: run programs on the desktop and follow their logs.

`python -m capabilities.exec` serves it over stdio; `build_server()` gives the MCP server.
"""

from .server import build_server

__all__ = ["build_server"]
