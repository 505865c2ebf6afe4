"""The `documents` capability: read, render and convert PDFs, Office files and images, locally.

Run it with `python -m capabilities.documents` (an MCP server on stdio). Paths are confined
to configured roots (see `paths`). Every tool answers by the one result contract of
`capabilities.contract`: structured content matching its output schema, a one-line summary,
then image blocks referenced by `image_index`.
"""
