"""The `documents` capability: read, render and convert PDFs, Office files and images, locally.

Run it with `python -m capabilities.documents` (an MCP server on stdio). Paths are confined
to configured roots (see `paths`); results are JSON text first, then image blocks.
"""
