"""Bearer-token protection of the streamable HTTP transport.

Every HTTP request must carry `Authorization: Bearer <token>`; anything else gets 401 before
it reaches the MCP app. The token is compared in constant time.
"""

from __future__ import annotations

import hmac
import json
import secrets
from typing import Any

TOKEN_ENV = "CODEDESK_TOKEN"


def generate_token() -> str:
    """A fresh random token for one serving process (hex: it never starts with "-", which a
    command line would take for an option)."""
    return secrets.token_hex(24)


class BearerTokenGuard:
    """ASGI middleware: pass lifespan events through, require the bearer token on HTTP requests."""

    def __init__(self, app: Any, token: str) -> None:
        if not token:
            raise ValueError("a bearer token is required")
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # websockets are not offered; close them
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps(
            {
                "error": "unauthorized",
                "error_description": "send 'Authorization: Bearer <token>' with the token printed when "
                "codedesk serve started (or the one given by --token / $CODEDESK_TOKEN)",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="codedesk"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
