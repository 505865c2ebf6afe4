"""The hub's errors: every one is an HTTP status, a stable `code`, a message saying what failed
and a `fix` saying what to do next. The API answers them as
`{"error": {"code", "message", "fix", ...}}`; the CLI and `Client` raise them back as `HubError`.

    HubError                  500 the root (an unexpected failure)
    ├── InvalidRequest        400 / 422 a body or a parameter the hub refuses (names the field)
    ├── Unauthorized          401 no token, or not the token this endpoint needs
    ├── SessionNotFound       404 no session has this id
    ├── SessionGone           410 the session was deleted or ended (its disk is gone)
    ├── SessionConflict       409 the session's state does not allow this (e.g. it failed)
    ├── LimitReached          429 a limit of the hub (sessions at once, resources) would be passed
    ├── BackendUnavailable    503 the Docker engine or the cluster does not answer; nothing changed
    └── SessionStartFailed    502 the session's container exited or never answered while starting
"""

from __future__ import annotations

from typing import Any


class HubError(Exception):
    """A failure the hub reports to its caller."""

    status = 500
    code = "internal"

    def __init__(self, message: str, fix: str = "", **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.extra = extra

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.fix:
            body["fix"] = self.fix
        body.update(self.extra)
        return {"error": body}


class InvalidRequest(HubError):
    status = 422
    code = "invalid_request"


class Unauthorized(HubError):
    status = 401
    code = "unauthorized"


class SessionNotFound(HubError):
    status = 404
    code = "session_not_found"


class SessionGone(HubError):
    status = 410
    code = "session_gone"


class SessionConflict(HubError):
    status = 409
    code = "session_conflict"


class LimitReached(HubError):
    status = 429
    code = "limit_reached"


class BackendUnavailable(HubError):
    status = 503
    code = "backend_unavailable"


class SessionStartFailed(HubError):
    status = 502
    code = "session_start_failed"


_BY_CODE = {cls.code: cls for cls in (HubError, InvalidRequest, Unauthorized, SessionNotFound, SessionGone,
                                       SessionConflict, LimitReached, BackendUnavailable, SessionStartFailed)}


def from_json(status: int, body: Any) -> HubError:
    """The error an API answer carries, as the exception the hub raised (for the clients)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return HubError(f"the hub answered HTTP {status}: {str(body)[:300]}")
    cls = _BY_CODE.get(error.get("code"), HubError)
    extra = {k: v for k, v in error.items() if k not in {"code", "message", "fix"}}
    exc = cls(str(error.get("message", "")), str(error.get("fix", "")), **extra)
    exc.status = status
    return exc
