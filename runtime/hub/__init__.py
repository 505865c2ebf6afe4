"""The session hub: many sessions (one desktop container or pod each) behind one service.

`codedesk hub` runs it (`runtime.hub.cli`); `runtime.hub.Client` is its Python client (see
`runtime/hub/client.py` for the three lines an agent framework needs). It talks to sessions
only over HTTP, as any client would, and never imports `sandbox` or `capabilities`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Client"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from runtime.hub.client import Client

        return Client
    raise AttributeError(name)
