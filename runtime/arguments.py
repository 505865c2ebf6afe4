"""The arguments of run_js and run_py: one pydantic model each, which both validates a call and
generates the input schema the agent sees, so the two cannot drift.

The ranges come from the sandbox (`sandbox.result.*_RANGE`, each `(minimum, default, maximum)`),
which enforces them again when it builds its limits.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sandbox.result import HEAP_MEMORY_MAX_MB_RANGE, MEMORY_MAX_MB_RANGE, TIMEOUT_SECONDS_RANGE

RANGES: dict[str, tuple[Any, Any, Any]] = {
    "timeout_seconds": TIMEOUT_SECONDS_RANGE,
    "heap_memory_max_mb": HEAP_MEMORY_MAX_MB_RANGE,
    "memory_max_mb": MEMORY_MAX_MB_RANGE,
}


class ArgumentsError(ValueError):
    """The tool arguments are malformed; the message names each bad field and its allowed range."""


def _limit(name: str, kind: type, description: str) -> Any:
    low, default, high = RANGES[name]
    return Field(
        default=None,
        ge=low,
        le=high,
        strict=True,
        description=f"{description} Default {default}, allowed {low} to {high}.",
    )


class RunJsArguments(BaseModel):
    """run_js({code, timeout_seconds?, heap_memory_max_mb?})."""

    model_config = ConfigDict(extra="forbid", strict=True)

    code: str = Field(description="The JavaScript to run. Top-level await works; the last expression's value is returned.")
    timeout_seconds: float | None = _limit(
        "timeout_seconds", float, "Wall-time limit of the whole run in seconds; in-flight tool calls are cancelled when it hits."
    )
    heap_memory_max_mb: int | None = _limit("heap_memory_max_mb", int, "JavaScript heap limit in MiB.")


class RunPyArguments(BaseModel):
    """run_py({code, timeout_seconds?, memory_max_mb?})."""

    model_config = ConfigDict(extra="forbid", strict=True)

    code: str = Field(description="The Python to run. The last expression's value is returned.")
    timeout_seconds: float | None = _limit(
        "timeout_seconds", float, "Wall-time limit of the whole run in seconds; in-flight tool calls are cancelled when it hits."
    )
    memory_max_mb: int | None = _limit("memory_max_mb", int, "Interpreter memory limit in MiB.")


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema the agent sees for `model`, with optional limits shown as plain numbers."""
    schema = model.model_json_schema()
    for name, prop in schema.get("properties", {}).items():
        options = prop.pop("anyOf", None)
        if options:  # `float | None` renders as anyOf[number, null]: show the number with its bounds
            number = next(o for o in options if o.get("type") != "null")
            prop.update(number)
            prop.pop("default", None)
    schema["additionalProperties"] = False
    return schema


def parse_arguments(model: type[BaseModel], arguments: Any) -> Any:
    """Validate tool arguments; raise ArgumentsError naming every bad field and its range."""
    if not isinstance(arguments, dict):
        raise ArgumentsError(f"arguments must be an object with a 'code' string, got {type(arguments).__name__}")
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        raise ArgumentsError("invalid arguments: " + "; ".join(_explain(error, model) for error in exc.errors())) from exc


def _explain(error: Any, model: type[BaseModel]) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "arguments"
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = ", ".join(model.model_fields)
        return f"unknown field {field!r} (allowed fields: {allowed})"
    if kind == "missing":
        return f"{field!r} is required" + (" (the script to run, a string)" if field == "code" else "")
    if field in RANGES:
        low, default, high = RANGES[field]
        unit = "a whole number" if field != "timeout_seconds" else "a number"
        got = error.get("input")
        return f"{field!r} must be {unit} from {low} to {high} (default {default}); got {got!r}"
    if field == "code":
        return f"'code' must be a string containing the script; got {type(error.get('input')).__name__}"
    return f"{field!r}: {error['msg']}"
