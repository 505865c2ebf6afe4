"""The `files` capability server: the desktop user's files, read, written, edited, patched,
listed, searched (ripgrep), moved, copied, deleted to the trash and restored.

Paths are as the desktop user sees them: absolute, `~/...` (its home), or relative to its home.
The server runs as the desktop user (a server started as root drops to it before serving), so
that user's permissions are the only boundary. Run alone with `python -m capabilities.files`.
"""
