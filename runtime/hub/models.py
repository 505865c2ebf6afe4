"""The API's request bodies: one pydantic model each, which validates the body and is the
schema `/v1/openapi.json` publishes, so the two cannot drift. Unknown fields are refused by name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.hub.errors import InvalidRequest

STATES = ("creating", "warm", "running", "paused", "sleeping", "failed", "deleted")


class Resources(BaseModel):
    """Per-session resources, applied as the backend's limits (Docker: CPU quota, memory limit,
    process cap; Kubernetes: the pod's limits)."""

    model_config = ConfigDict(extra="forbid")
    cpus: float | None = Field(None, gt=0, le=64, description="CPU cores (fractions allowed)")
    memory_mb: int | None = Field(None, ge=512, le=262144, description="memory limit in MiB (at least 512)")
    pids: int | None = Field(None, ge=256, le=65536, description="most processes and threads in the session")


class CreateSession(BaseModel):
    """`POST /v1/sessions`."""

    model_config = ConfigDict(extra="forbid")
    image: str | None = Field(None, min_length=1, max_length=300,
                              description="the session's image (default: the hub's --image)")
    resources: Resources | None = None
    egress: Literal["default"] | None = Field(
        None, description="the session's egress policy; only the image's default (no link-local or "
        "metadata addresses) is offered")
    idle_timeout_s: int | None = Field(None, ge=1, le=30 * 86400, description=(
        "seconds without an MCP request after which the session is paused; it is put to sleep after "
        "as long again paused (default: the hub's --idle-timeout)"))
    ttl_s: int | None = Field(None, ge=1, le=365 * 86400,
                              description="seconds after creation at which the session is ended (default: none)")
    metadata: dict[str, str] | None = Field(None, description="labels of your own, to filter the list by")


class ViewerLinkRequest(BaseModel):
    """`POST /v1/sessions/{id}/viewer-links`."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["view", "control"] = Field("view", description="view: watch only; control: type and click")
    expires_in_s: int = Field(3600, ge=1, le=7 * 86400, description="seconds until the link stops working")


def parse(model: type[BaseModel], body: Any) -> BaseModel:
    """`body` validated as `model`, or InvalidRequest naming the first field at fault."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object",
                             "send a JSON object such as {} (Content-Type: application/json)")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(body)"
        if first["type"] == "extra_forbidden":
            allowed = ", ".join(_fields(model, first["loc"][:-1]))
            raise InvalidRequest(f"unknown field {field!r}", f"remove it; the fields are: {allowed}",
                                 field=field) from exc
        raise InvalidRequest(f"field {field!r}: {first['msg']}",
                             f"correct {field!r} (see /v1/openapi.json)", field=field) from exc


def _fields(model: type[BaseModel], loc: tuple) -> list[str]:
    for part in loc:
        annotation = model.model_fields[part].annotation
        inner = [a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type)
                 and issubclass(a, BaseModel)]
        model = inner[0]
    return list(model.model_fields)
