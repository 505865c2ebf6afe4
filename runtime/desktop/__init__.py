"""The desktop session's lifecycle: `codedesk desktop up|down|status`.

Public surface: `cli_main(argv)` for the CLI, `up`, `down`, `status` for code, `DesktopError`.
"""

from .cli import cli_main, down, status, up
from .layout import DesktopError

__all__ = ["cli_main", "up", "down", "status", "DesktopError"]
