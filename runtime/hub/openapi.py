"""`/v1/openapi.json`: the API described from the same pydantic models that validate it."""

from __future__ import annotations

from typing import Any

from runtime.hub.models import STATES, CreateSession, ViewerLinkRequest


def _error() -> dict[str, Any]:
    return {"type": "object", "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"}, "fix": {"type": "string"},
        "field": {"type": "string"}, "limit": {"type": "string"}}}}}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def document(server_url: str) -> dict[str, Any]:
    create = CreateSession.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = create.pop("$defs", {})
    link = ViewerLinkRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    errors = {str(code): {"description": text, "content": {"application/json": {"schema": _ref("Error")}}}
              for code, text in ((401, "no token, or not the admin token"), (404, "no such session"),
                                 (409, "the session's state does not allow it"), (410, "the session was deleted"),
                                 (422, "invalid body: the field is named"), (429, "a limit of the hub"),
                                 (503, "the backend does not answer; nothing changed"))}

    def op(summary: str, ok: str, schema: str | None = None, body: str | None = None,
           params: list | None = None, status: str = "200") -> dict[str, Any]:
        out: dict[str, Any] = {"summary": summary, "responses": {status: {"description": ok}, **errors}}
        if schema:
            out["responses"][status]["content"] = {"application/json": {"schema": _ref(schema)}}
        if body:
            out["requestBody"] = {"required": False, "content": {"application/json": {"schema": _ref(body)}}}
        if params:
            out["parameters"] = params
        return out

    sid = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
    session_schema = {"type": "object", "properties": {
        "id": {"type": "string"}, "state": {"type": "string", "enum": list(STATES)},
        "mcp_url": {"type": "string"}, "image": {"type": "string"}, "resources": {"type": "object"},
        "idle_timeout_s": {"type": ["integer", "null"]}, "ttl_s": {"type": ["integer", "null"]},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "created_at": {"type": "string"}, "last_activity": {"type": "string"}, "age_s": {"type": "number"},
        "idle_s": {"type": "number"}, "state_since": {"type": "string"}, "error": {"type": ["string", "null"]},
        "backend_object": {"type": "object"}, "timeline": {"type": "array", "items": {"type": "object"}}}}
    created = {"allOf": [_ref("Session"), {"type": "object", "properties": {
        "token": {"type": "string", "description": "the session's MCP token, shown once"},
        "viewer_url": {"type": "string", "description": "a control viewer link"}}}]}
    return {
        "openapi": "3.1.0",
        "info": {"title": "codedesk hub", "version": "1",
                 "description": "Sessions (one desktop each) as a service. The control API needs the hub's "
                 "admin token (Authorization: Bearer); each session's MCP endpoint needs that session's token."},
        "servers": [{"url": server_url}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"CreateSession": create, "ViewerLinkRequest": link, "Session": session_schema,
                        "CreatedSession": created, "Error": _error(), **defs,
                        "ViewerLink": {"type": "object", "properties": {
                            "id": {"type": "string"}, "mode": {"type": "string"}, "url": {"type": "string"},
                            "expires_at": {"type": "string"}}},
                        "SessionList": {"type": "object", "properties": {
                            "sessions": {"type": "array", "items": _ref("Session")}}}}},
        "security": [{"bearer": []}],
        "paths": {
            "/v1/sessions": {
                "post": op("create a session (from the warm pool when one fits)", "created", "CreatedSession",
                           "CreateSession", status="201"),
                "get": op("list sessions", "the sessions", "SessionList", params=[
                    {"name": "state", "in": "query", "schema": {"type": "string", "enum": list(STATES)}},
                    {"name": "metadata", "in": "query", "description": "KEY:VALUE, repeatable",
                     "schema": {"type": "string"}}])},
            "/v1/sessions/{id}": {
                "get": op("a session, with its timeline", "the session", "Session", params=[sid]),
                "delete": op("end a session: container or pod, disk and secrets gone", "deleted", "Session",
                             params=[sid])},
            "/v1/sessions/{id}/pause": {"post": op("freeze in memory (resumes in well under a second)",
                                                   "paused", "Session", params=[sid])},
            "/v1/sessions/{id}/sleep": {"post": op("stop: memory freed, disk kept", "sleeping", "Session",
                                                   params=[sid])},
            "/v1/sessions/{id}/wake": {"post": op("resume or start, answered when the runtime answers",
                                                  "running", "Session", params=[sid])},
            "/v1/sessions/{id}/viewer-links": {"post": op("a signed, expiring viewer link", "the link",
                                                          "ViewerLink", "ViewerLinkRequest", [sid], "201")},
            "/v1/sessions/{id}/viewer-links/{link}": {"delete": op("revoke a viewer link", "revoked", params=[
                sid, {"name": "link", "in": "path", "required": True, "schema": {"type": "string"}}])},
            "/v1/sessions/{id}/mcp": {"post": {
                "summary": "the session's MCP endpoint (streamable HTTP), with the session's own token; "
                           "a paused or sleeping session is woken first",
                "security": [{"bearer": []}], "parameters": [sid],
                "responses": {"200": {"description": "the runtime's answer"}, **errors}}},
        },
    }
