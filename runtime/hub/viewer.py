"""The viewer through the hub: a viewer link opens the session's noVNC page
(`/v1/viewer/<link>/viewer.html`) and its websocket (`/websockify?token=<link>`), which the hub
joins to the session's own viewer with the session's secret (never shown to the person).

A `view` link is enforced here, not only by the page's view_only flag: the hub reads the RFB
stream the browser sends and drops every input message (keys, pointer, clipboard, resize), and
refuses the resize channel.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any
from urllib.parse import parse_qs

import httpx

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

    _FIXED = {0: 20, 3: 10, 150: 10}          # messages passed, by their fixed length
    _DROP_FIXED = {4: 8, 5: 6, 252: 4}        # key, pointer, xvp: dropped

    def __init__(self) -> None:
        self._buf = b""
        self._handshake: int | None = None    # client bytes before the first message
        self.server_version = b""

    def saw_server(self, data: bytes) -> None:
        if len(self.server_version) < 12:
            self.server_version += data[: 12 - len(self.server_version)]

    def feed(self, data: bytes) -> bytes:
        """The part of `data` (with what was held back) that may go to the server."""
        self._buf += data
        out = b""
        if self._handshake is None:
            if len(self.server_version) < 12:
                return b""  # the client cannot have spoken before the server's version
            # RFB 3.8/3.7: version (12), security type (1), ClientInit (1); 3.3: no type byte.
            self._handshake = 13 if self.server_version.startswith(b"RFB 003.003") else 14
        if self._handshake:
            take = min(self._handshake, len(self._buf))
            out, self._buf, self._handshake = self._buf[:take], self._buf[take:], self._handshake - take
            if self._handshake:
                return out
        while self._buf:
            size, keep = self._message(self._buf)
            if size is None or size > len(self._buf):
                break  # the rest of the message is still to come
            if keep:
                out += self._buf[:size]
            self._buf = self._buf[size:]
        return out

    def _message(self, buf: bytes) -> tuple[int | None, bool]:
        kind = buf[0]
        if kind in self._FIXED:
            return (self._FIXED[kind] if len(buf) >= self._FIXED[kind] else None), True
        if kind in self._DROP_FIXED:
            return (self._DROP_FIXED[kind] if len(buf) >= self._DROP_FIXED[kind] else None), False
        if kind == 2:  # SetEncodings
            return (4 + 4 * struct.unpack(">H", buf[2:4])[0] if len(buf) >= 4 else None), True
        if kind == 6:  # ClientCutText (extended: negative length): dropped
            return (8 + abs(struct.unpack(">i", buf[4:8])[0]) if len(buf) >= 8 else None), False
        if kind == 248:  # ClientFence
            return (9 + buf[8] if len(buf) >= 9 else None), True
        if kind == 251:  # SetDesktopSize: input of a kind, dropped
            return (8 + 16 * buf[6] if len(buf) >= 8 else None), False
        if kind == 255:  # QEMU extended key event
            return (12 if len(buf) >= 12 else None), False
        raise Unauthorized(f"a view link cannot send RFB message {kind}", "ask for a control link to use the screen")


async def proxy_websocket(hub: SessionHub, scope: dict[str, Any], receive: Any, send: Any) -> None:
    import websockets

    if scope["path"] != "/websockify":
        raise HubError("no such websocket", "open a viewer link", status_hint=404)
    token = parse_qs(scope.get("query_string", b"").decode()).get("token", [""])[0]
    resize = token.endswith(".resize")
    rec, mode = hub.check_link(token.removesuffix(".resize"))
    if resize and mode == "view":
        raise Unauthorized("a view link cannot resize the screen", "ask for a control link")
    address, secret = await hub.viewer_upstream(rec.id)
    if (await receive())["type"] != "websocket.connect":
        return
    upstream = await websockets.connect(f"ws://{address}/websockify?token={secret}{'.resize' if resize else ''}",
                                        subprotocols=["binary"], max_size=None, compression=None)
    offered = [p.strip() for name, v in scope["headers"] if name == b"sec-websocket-protocol" for p in v.decode().split(",")]
    await send({"type": "websocket.accept", "subprotocol": "binary" if "binary" in offered else None})
    gate = RfbInputFilter() if mode == "view" and not resize else None

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
