"""A small client of the hub, for programs and agent frameworks:

    from runtime.hub import Client

    hub = Client("http://127.0.0.1:8780", token=ADMIN_TOKEN)
    session = hub.create()
    async with hub.mcp(session) as mcp:                   # an initialized mcp.ClientSession
        print(await mcp.call_tool("run_js", {"code": "6 * 7"}))
    hub.delete(session["id"])

Every method returns the API's JSON; a refusal raises the hub's error (`runtime.hub.errors`),
with its `message` and `fix`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx

from runtime.hub.errors import from_json

DEFAULT_URL = "http://127.0.0.1:8780"


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 300.0) -> None:
        self.url = (url or os.environ.get("CODEDESK_HUB_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("CODEDESK_HUB_TOKEN") or ""
        self._http = httpx.Client(base_url=self.url, timeout=timeout, trust_env=False,
                                  headers={"Authorization": f"Bearer {token}"})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            from runtime.hub.errors import HubError

            raise HubError(f"the hub at {self.url} does not answer ({exc})",
                           "start it (codedesk hub --http HOST:PORT) or pass its URL") from exc
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code >= 400:
            raise from_json(response.status_code, body)
        return body

    def create(self, **fields: Any) -> dict[str, Any]:
        """A new session (`image`, `resources`, `egress`, `idle_timeout_s`, `ttl_s`, `metadata`), with
        its `mcp_url`, `token` (shown only here) and `viewer_url`."""
        return self._call("POST", "/v1/sessions", json=fields)

    def list(self, state: str | None = None, metadata: dict[str, str] | None = None) -> list[dict[str, Any]]:
        params: list[tuple[str, str]] = [("state", state)] if state else []
        params += [("metadata", f"{k}:{v}") for k, v in (metadata or {}).items()]
        return self._call("GET", "/v1/sessions", params=params)["sessions"]

    def show(self, session_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/sessions/{session_id}")

    def pause(self, session_id: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/sessions/{session_id}/pause")

    def sleep(self, session_id: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/sessions/{session_id}/sleep")

    def wake(self, session_id: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/sessions/{session_id}/wake")

    def delete(self, session_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/sessions/{session_id}")

    def link(self, session_id: str, mode: str = "view", expires_in_s: int = 3600) -> dict[str, Any]:
        return self._call("POST", f"/v1/sessions/{session_id}/viewer-links",
                          json={"mode": mode, "expires_in_s": expires_in_s})

    def revoke_link(self, session_id: str, link_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/sessions/{session_id}/viewer-links/{link_id}")

    @contextlib.asynccontextmanager
    async def mcp(self, session: dict[str, Any], read_timeout: float = 600.0) -> AsyncIterator[Any]:
        """An initialized MCP `ClientSession` on the session's endpoint (streamable HTTP through
        the hub, with the session's token); `session` is what `create` returned."""
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {session['token']}"}, trust_env=False,
                                      timeout=httpx2.Timeout(30.0, read=read_timeout)) as http:
            async with streamable_http_client(session["mcp_url"], http_client=http) as (read, write, *_):
                async with ClientSession(read, write) as mcp_session:
                    await mcp_session.initialize()
                    yield mcp_session
