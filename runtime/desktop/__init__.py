"""The desktop session's lifecycle: `codedesk desktop up|down|status`.

Public surface: `cli_main(argv)` for the CLI, `up`, `down`, `status` for code, `DesktopError`.
They are imported when first asked for: the runtime imports `runtime.desktop.oversight` as it
starts, and the CLI behind them is not on that path.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["cli_main", "up", "down", "status", "DesktopError"]

_HOME = {"cli_main": ".cli", "up": ".cli", "down": ".cli", "status": ".cli", "DesktopError": ".layout"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name], __name__), name)
