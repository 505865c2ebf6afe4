"""The sandbox's public types: host callables handed in, limits, and the typed run result.

A run never raises for anything the script does: every outcome is a `RunResult`, `status`
"ok" or "error", the error carrying its `kind`. Only bad limits (`LimitsError`, a
`ValueError`) and bugs in the host's own callables' types raise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import pydantic_core

CallTool = Callable[[str, str, dict], Awaitable[dict]]
"""(server, tool, args) -> CallToolResult as a JSON dict with camelCase keys
({"content": [...], "isError"?: bool, "structuredContent"?: ...}). Raising any Exception is a
bridge failure: the guest sees a thrown Error carrying str(exc)."""

ListTools = Callable[[str | None], Awaitable[dict]]
"""server or None -> {server: [{name, description, inputSchema}, ...]}."""

OnConsole = Callable[[str, str], None]
"""(level, text), called as each console line is produced."""

CALL_LINE: ContextVar[int | None] = ContextVar("sandbox_call_line", default=None)
"""The line of the user's script that made the tool call `call_tool` is running (None when it is
not known): set by the sandbox in the call's own task, so a host that shows the call to a person
(an approval) can say where in the script it comes from. The guest says it, so it is a hint for
people, never a fact to decide on."""

MAX_LINE = 10_000_000


def call_line(value: Any) -> int | None:
    """A line number as the guest gave it, when it is one (1 to MAX_LINE), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_LINE else None

ErrorKind = Literal[
    "syntax", "thrown", "timeout", "memory", "output", "call_budget", "bridge", "internal"
]

# Ranges the runtime also uses for its tool schemas: (minimum, default, maximum).
TIMEOUT_SECONDS_RANGE = (0.001, 60.0, 600.0)
HEAP_MEMORY_MAX_MB_RANGE = (1, 32, 1024)
MEMORY_MAX_MB_RANGE = (64, 512, 2048)
MAX_OUTPUT_BYTES_RANGE = (1, 1 << 20, 64 << 20)
MAX_ARTIFACTS_RANGE = (0, 20, 1000)
MAX_ARTIFACT_BYTES_RANGE = (0, 20 << 20, 512 << 20)
MAX_TOOL_CALLS_RANGE = (0, 1000, 100_000)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(value: Any) -> Any:
    """`value` as UTF-8 can carry it: every lone surrogate in a string, or in the strings (keys
    included) of a JSON-like value, becomes U+FFFD; a pair split across two code points is
    joined. The value itself comes back when nothing needed replacing.

    JavaScript strings are UTF-16 and may hold lone surrogates (any web page can hand one over),
    and so may Python's; no transport can send them. Every text leaving a sandbox passes here.
    """
    if isinstance(value, str):
        if value.isascii() or _LONE_SURROGATE.search(value) is None:  # isascii: a flag, no scan
            return value
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if not isinstance(value, (dict, list, tuple)) or not _holds_surrogates(value):
        return value
    return _rebuilt(value)


def json_text(value: Any, nan: Literal["null", "constants"] = "null") -> str:
    """`value` as JSON text in well-formed Unicode (a lone surrogate becomes U+FFFD); NaN and the
    infinities, which JSON has not, as null (as JavaScript's JSON.stringify writes them), or with
    `nan="constants"` as Python's json writes and reads them (NaN, Infinity); raises TypeError or
    ValueError for what JSON cannot hold. Written by pydantic-core: on a result of megabytes (a
    screenshot) several times faster than json.dumps."""
    try:
        return pydantic_core.to_json(value, inf_nan_mode=nan).decode()
    except pydantic_core.PydanticSerializationError:  # a lone surrogate, or what JSON cannot hold
        value = well_formed(value)
    try:
        return pydantic_core.to_json(value, inf_nan_mode=nan).decode()
    except pydantic_core.PydanticSerializationError as exc:  # json.dumps says what, as TypeError
        json.dumps(value)
        raise ValueError(str(exc)) from None


def _holds_surrogates(value: Any) -> bool:
    # JSON text written in Rust is the quick look: it fails on a lone surrogate (or on what JSON
    # cannot hold); then json.dumps and a scan, and the walk in Python only when they find one.
    try:
        pydantic_core.to_json(value)
        return False
    except pydantic_core.PydanticSerializationError:
        pass
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return True
    return not text.isascii() and _LONE_SURROGATE.search(text) is not None


def _rebuilt(value: Any) -> Any:
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, dict):
        return {_rebuilt(key): _rebuilt(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rebuilt(item) for item in value]
    if isinstance(value, tuple):
        items = [_rebuilt(item) for item in value]
        return value._make(items) if hasattr(value, "_make") else tuple(items)
    return value


class LimitsError(ValueError):
    """A limit is out of its allowed range or of the wrong type; the message names both."""


def _check(name: str, value: Any, bounds: tuple[Any, Any, Any], kind: type) -> None:
    low, _, high = bounds
    ok_type = (int, float) if kind is float else (int,)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        raise LimitsError(f"{name} must be a {'number' if kind is float else 'whole number'} "
                          f"between {low} and {high}; got {value!r}")
    if not low <= value <= high:
        raise LimitsError(f"{name} must be between {low} and {high}; got {value!r}")


@dataclass(frozen=True, kw_only=True)
class _CommonLimits:
    timeout_seconds: float = TIMEOUT_SECONDS_RANGE[1]
    max_output_bytes: int = MAX_OUTPUT_BYTES_RANGE[1]
    max_artifacts: int = MAX_ARTIFACTS_RANGE[1]
    max_artifact_bytes: int = MAX_ARTIFACT_BYTES_RANGE[1]
    max_tool_calls: int = MAX_TOOL_CALLS_RANGE[1]

    def __post_init__(self) -> None:
        _check("timeout_seconds", self.timeout_seconds, TIMEOUT_SECONDS_RANGE, float)
        _check("max_output_bytes", self.max_output_bytes, MAX_OUTPUT_BYTES_RANGE, int)
        _check("max_artifacts", self.max_artifacts, MAX_ARTIFACTS_RANGE, int)
        _check("max_artifact_bytes", self.max_artifact_bytes, MAX_ARTIFACT_BYTES_RANGE, int)
        _check("max_tool_calls", self.max_tool_calls, MAX_TOOL_CALLS_RANGE, int)


@dataclass(frozen=True, kw_only=True)
class JsLimits(_CommonLimits):
    """Per-run limits of run_js. `heap_memory_max_mb` bounds the JS heap."""

    heap_memory_max_mb: int = HEAP_MEMORY_MAX_MB_RANGE[1]

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("heap_memory_max_mb", self.heap_memory_max_mb, HEAP_MEMORY_MAX_MB_RANGE, int)


@dataclass(frozen=True, kw_only=True)
class PyLimits(_CommonLimits):
    """Per-run limits of run_py. `memory_max_mb` bounds the interpreter's linear memory."""

    memory_max_mb: int = MEMORY_MAX_MB_RANGE[1]

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("memory_max_mb", self.memory_max_mb, MEMORY_MAX_MB_RANGE, int)


class ConsoleLine(NamedTuple):
    """One console line: level is "log", "info", "warn", "error" or "debug"."""

    level: str
    text: str


@dataclass(frozen=True, kw_only=True)
class RunError:
    """Why a run failed. `line`/`column` are 1-based positions in the user's own code."""

    kind: ErrorKind
    message: str
    line: int | None = None
    column: int | None = None
    traceback: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", well_formed(self.message))
        object.__setattr__(self, "traceback", well_formed(self.traceback))

    def describe(self) -> str:
        """One line for people and models: the kind, the place, the message."""
        where = f" at line {self.line}" if self.line is not None else ""
        if self.line is not None and self.column is not None:
            where += f", column {self.column}"
        return f"{self.kind} error{where}: {self.message}"


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """The outcome of one run. `value` is the JSON-serialisable value of the last expression
    (a description string when it cannot be serialised); `artifacts` are MCP content blocks.
    Every text in it is valid Unicode (`well_formed`)."""

    status: Literal["ok", "error"]
    console: list[ConsoleLine] = field(default_factory=list)
    value: Any | None = None
    artifacts: list[dict] = field(default_factory=list)
    error: RunError | None = None
    tool_calls: int = 0

    def __post_init__(self) -> None:
        # The one place every run's text leaves the sandbox: it leaves as valid Unicode.
        object.__setattr__(self, "value", well_formed(self.value))
        object.__setattr__(self, "console", well_formed(self.console))
        object.__setattr__(self, "artifacts", well_formed(self.artifacts))

    @property
    def ok(self) -> bool:
        return self.status == "ok"
