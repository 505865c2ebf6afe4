"""The hub's HTTP surface, one ASGI app:

    GET  /healthz                              no token
    GET  /v1/openapi.json                      no token
    /v1/sessions...                            the admin token (REST, JSON)
    /v1/sessions/{id}/mcp                      the session's own token: streamable HTTP proxied to
                                               the session's runtime (waking it first)
    /v1/viewer/{link}/...  and  /websockify    a viewer link: the session's noVNC page and its
                                               websocket, through the hub (input dropped in view mode)
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from typing import Any
from urllib.parse import parse_qs

import httpx

from runtime.hub.errors import HubError, InvalidRequest, Unauthorized
from runtime.hub.models import CreateSession, ViewerLinkRequest, parse
from runtime.hub.service import SessionHub

log = logging.getLogger("codedesk.hub")

_SESSION = re.compile(r"^/v1/sessions/([0-9a-f]{12})(/mcp|/pause|/sleep|/wake|/viewer-links(?:/([0-9a-f]{16}))?)?/?$")
_VIEWER = re.compile(r"^/v1/viewer/([0-9a-f]{16}\.[0-9]+\.[0-9a-f]{32})/(.*)$")
_HOP = {b"host", b"authorization", b"content-length", b"connection", b"transfer-encoding", b"keep-alive",
        b"upgrade", b"te", b"trailer", b"proxy-authorization"}


async def _send_json(send, status: int, body: Any, headers: list | None = None) -> None:  # noqa: ANN001
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (b"cache-control", b"no-store"), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


async def _read_body(receive) -> bytes:  # noqa: ANN001
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _bearer(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers") or []:
        if name == b"authorization":
            text = value.decode("latin-1")
            return text[7:] if text[:7].lower() == "bearer " else ""
    return ""


class HubApp:
    def __init__(self, hub: SessionHub, admin_token: str) -> None:
        self.hub = hub
        self._admin = admin_token.encode()

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        path = scope["path"]
        try:
            if scope["type"] == "websocket":
                from runtime.hub.viewer import proxy_websocket

                await proxy_websocket(self.hub, scope, receive, send)
                return
            match = _SESSION.match(path)
            if match and match.group(2) == "/mcp":
                await self._mcp(match.group(1), scope, receive, send)
                return
            viewer = _VIEWER.match(path)
            if viewer:
                from runtime.hub.viewer import proxy_page

                await proxy_page(self.hub, viewer.group(1), viewer.group(2), scope, send)
                return
            if path == "/healthz":
                await _send_json(send, 200, {"ok": True, "backend": self.hub.backend.name,
                                             "backend_up": self.hub._backend_up})
                return
            if path == "/v1/openapi.json":
                from runtime.hub.openapi import document

                await _send_json(send, 200, document(self.hub.settings.public_url))
                return
            if not path.startswith("/v1/sessions"):
                raise HubError("no such endpoint", "see /v1/openapi.json for the hub's endpoints", status_hint=404)
            if not hmac.compare_digest(_bearer(scope).encode(), self._admin):
                raise Unauthorized("the control API needs the hub's admin token",
                                   "send 'Authorization: Bearer <admin token>' (the hub's --token, "
                                   "$CODEDESK_HUB_TOKEN, or the one it printed at start)")
            status, body = await self._rest(path, match, scope, receive)
            await _send_json(send, status, body)
        except HubError as exc:
            status = exc.extra.pop("status_hint", None) or exc.status
            if scope["type"] == "http":
                headers = [(b"www-authenticate", b'Bearer realm="codedesk-hub"')] if status == 401 else []
                await _send_json(send, status, exc.to_json(), headers)
            else:
                await send({"type": "websocket.close", "code": 4401 if status == 401 else 1011,
                            "reason": exc.message[:100]})

    async def _lifespan(self, receive, send) -> None:  # noqa: ANN001
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.hub.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.hub.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ------------------------------------------------------------------ REST
    async def _rest(self, path: str, match, scope, receive) -> tuple[int, Any]:  # noqa: ANN001
        method = scope["method"]
        hub = self.hub
        if path.rstrip("/") == "/v1/sessions":
            if method == "POST":
                body = parse(CreateSession, await self._json(receive))
                return 201, await hub.create(body)
            if method == "GET":
                query = parse_qs(scope.get("query_string", b"").decode())
                unknown = sorted(set(query) - {"state", "metadata"})
                if unknown:
                    raise InvalidRequest(f"unknown query parameter {unknown[0]!r}",
                                         "filter with state=STATE and metadata=KEY:VALUE (repeatable)",
                                         field=unknown[0])
                metadata = {}
                for item in query.get("metadata", []):
                    key, sep, value = item.partition(":")
                    if not sep:
                        raise InvalidRequest(f"metadata filter {item!r} is not KEY:VALUE",
                                             "write it as metadata=team:web", field="metadata")
                    metadata[key] = value
                state = query.get("state", [None])[0]
                return 200, {"sessions": hub.list(state, metadata)}
            raise self._method(method, "GET, POST")
        if match is None:
            raise HubError("no such endpoint", "see /v1/openapi.json for the hub's endpoints", status_hint=404)
        session_id, action, link_id = match.group(1), match.group(2), match.group(3)
        if action is None:
            if method == "GET":
                return 200, hub.public(hub.record(session_id), timeline=True)
            if method == "DELETE":
                return 200, await hub.delete(session_id)
            raise self._method(method, "GET, DELETE")
        if action in ("/pause", "/sleep", "/wake"):
            if method != "POST":
                raise self._method(method, "POST")
            body = await self._json(receive)
            if body:
                raise InvalidRequest(f"unknown field {sorted(body)[0]!r}", f"send no body to {action[1:]}",
                                     field=sorted(body)[0])
            return 200, await getattr(hub, action[1:])(session_id)
        if link_id is not None:
            if method != "DELETE":
                raise self._method(method, "DELETE")
            hub.revoke_link(session_id, link_id)
            return 200, {"id": link_id, "revoked": True}
        if method != "POST":
            raise self._method(method, "POST")
        body = parse(ViewerLinkRequest, await self._json(receive))
        return 201, hub.viewer_link(session_id, body.mode, body.expires_in_s)

    @staticmethod
    def _method(method: str, allowed: str) -> HubError:
        return HubError(f"method {method} is not allowed here", f"use {allowed}", status_hint=405)

    @staticmethod
    async def _json(receive) -> Any:  # noqa: ANN001
        raw = await _read_body(receive)
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise InvalidRequest(f"the body is not JSON ({exc})", "send a JSON object") from exc

    # ------------------------------------------------------------------ the MCP proxy
    async def _mcp(self, session_id: str, scope, receive, send) -> None:  # noqa: ANN001
        hub = self.hub
        rec = hub.check_token(session_id, _bearer(scope))
        base = await hub.ready(session_id)
        hub.touch(session_id)
        body = await _read_body(receive) if scope["method"] in ("POST", "PUT", "PATCH") else b""
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP]
        headers.append((b"authorization", f"Bearer {rec.runtime_token}".encode()))
        url = base + "/mcp" + (("?" + scope["query_string"].decode()) if scope.get("query_string") else "")
        request = hub.http.build_request(scope["method"], url, headers=headers, content=body)
        try:
            response = await hub.http.send(request, stream=True)
        except httpx.HTTPError as exc:
            hub.lost(session_id)
            raise HubError(f"session {session_id}'s runtime did not answer ({type(exc).__name__})",
                           "retry; if it persists, GET /v1/sessions/{id} shows the session's state",
                           status_hint=502) from exc
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP - {b"content-length"}]})
            if scope["method"] == "GET":  # an SSE stream: ends when either side goes
                await self._stream_until_disconnect(response, receive, send)
            else:
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    @staticmethod
    async def _stream_until_disconnect(response, receive, send) -> None:  # noqa: ANN001
        async def pump() -> None:
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(watch())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
