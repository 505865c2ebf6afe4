"""The viewer through the hub: a viewer link opens the session's noVNC page
(`/v1/viewer/<link>/viewer.html`) and its websocket (`/websockify?token=<link>`), which the hub
joins to the session's own viewer with the session's secret (never shown to the person).

A `view` link is enforced here, not only by the page's view_only flag: the hub reads the RFB
stream the browser sends and drops every input message (keys, pointer, clipboard, resize), and
refuses the resize, lease and oversight channels (the last answers the agent's approvals).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qs

import httpx

from runtime.desktop.rfb import INPUT, RfbClientMessages, RfbParseError
from runtime.hub.errors import HubError, Unauthorized
from runtime.hub.service import SessionHub

_TYPES = {b"html": b"text/html", b"js": b"text/javascript", b"css": b"text/css"}


async def proxy_page(hub: SessionHub, link: str, subpath: str, scope: dict[str, Any], send: Any) -> None:
    rec, _mode = hub.check_link(link)
    if scope["method"] not in ("GET", "HEAD") or ".." in subpath.split("/"):
        raise HubError("the viewer serves files only", "open the link as given", status_hint=405)
    address, _secret = await hub.viewer_upstream(rec.id)
    try:
        response = await hub.http.get(f"http://{address}/{subpath}")
    except httpx.HTTPError as exc:
        raise HubError(f"session {rec.id}'s viewer does not answer", "reload the page in a few seconds",
                       status_hint=502) from exc
    headers = [(b"content-type", response.headers.get("content-type", "application/octet-stream").encode()),
               (b"content-length", str(len(response.content)).encode()), (b"cache-control", b"no-store"),
               (b"referrer-policy", b"no-referrer")]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content if scope["method"] == "GET" else b""})


class RfbInputFilter:
    """Passes what a VNC client sends, minus input: the handshake, then only the messages that
    ask for pixels (SetPixelFormat, SetEncodings, FramebufferUpdateRequest, fences, continuous
    updates). Anything it cannot parse ends the connection rather than slip through."""

    def __init__(self) -> None:
        self._messages = RfbClientMessages()

    def saw_server(self, data: bytes) -> None:
        self._messages.saw_server(data)

    def feed(self, data: bytes) -> bytes:
        """The part of `data` (with what was held back) that may go to the server."""
        try:
            pieces = self._messages.feed(data)
        except RfbParseError as exc:
            raise Unauthorized(f"a view link cannot send {exc}", "ask for a control link to use the screen") from exc
        return b"".join(piece for piece, kind in pieces if kind not in INPUT)


async def proxy_websocket(hub: SessionHub, scope: dict[str, Any], receive: Any, send: Any) -> None:
    import websockets

    if scope["path"] != "/websockify":
        raise HubError("no such websocket", "open a viewer link", status_hint=404)
    token = parse_qs(scope.get("query_string", b"").decode()).get("token", [""])[0]
    # the session's side channels: the screen's size, the input lease's hand-back, and the
    # agent's activity with its approvals
    channel = next((suffix for suffix in (".resize", ".lease", ".oversight") if token.endswith(suffix)), "")
    rec, mode = hub.check_link(token.removesuffix(channel) if channel else token)
    if channel and mode == "view":
        what = "answers the agent's approvals" if channel == ".oversight" else "changes the screen"
        raise Unauthorized(f"a view link cannot use the {channel[1:]} channel (it {what})",
                           "ask for a control link")
    address, secret = await hub.viewer_upstream(rec.id)
    if (await receive())["type"] != "websocket.connect":
        return
    upstream = await websockets.connect(f"ws://{address}/websockify?token={secret}{channel}",
                                        subprotocols=["binary"], max_size=None, compression=None)
    offered = [p.strip() for name, v in scope["headers"] if name == b"sec-websocket-protocol" for p in v.decode().split(",")]
    await send({"type": "websocket.accept", "subprotocol": "binary" if "binary" in offered else None})
    gate = RfbInputFilter() if mode == "view" and not channel else None

    async def down() -> None:
        async for message in upstream:
            data = message if isinstance(message, bytes) else message.encode()
            if gate is not None:
                gate.saw_server(data)
            await send({"type": "websocket.send", "bytes": data})

    async def up() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes") or (message.get("text") or "").encode()
            hub.touch(rec.id)
            if gate is not None:
                data = gate.feed(data)
            if data:
                await upstream.send(data)

    tasks = [asyncio.ensure_future(down()), asyncio.ensure_future(up())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is not None and not isinstance(task.exception(), websockets.ConnectionClosed):
                raise task.exception()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await upstream.close()
        try:
            await send({"type": "websocket.close", "code": 1000})
        except Exception:  # noqa: BLE001 - already closed
            pass
