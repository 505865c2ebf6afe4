"""The one result contract of every capability server, and the scaffolding they all share.

Every tool of every server answers the same way:

- `structuredContent`: an object valid against the tool's `outputSchema` (`output_schema()`
  makes it: the tool's own success shape, or the shared error object);
- one text block that carries the result whole, so a client that reads only text (the MCP
  spec's "should") loses nothing: an optional one-line summary, then the structured content as
  JSON (JSON alone is what the spec prescribes for `desktop_execute` and `exec`; a summary line
  then JSON for `browser_execute`). `success` and `failure` write it, the one place it is made;
  a tool gives only its summary;
- images as image blocks after the text, referenced from the structured result by their index
  among the images (`image_index`), never inlined in it;
- a failure: `isError: true`, structured `{"error": {kind, message, step?, field?, hint?}}`
  (plus what the tool adds, such as a batch's finished steps), text `Error: <message> (<hint>)`
  then that object as JSON.

`ToolError` is the one way a tool says it failed; `ToolRegistry` validates a call's whole input
with the tool's own model (the model that made the input schema, so the two cannot drift),
refuses unknown fields by name, runs it, and builds the result in `success` / `failure`, the
only places `isError` is decided.

Error kinds (`ErrorKind`): `invalid_arguments` (the request is wrong: nothing ran),
`unknown_tool`, `not_found` (a file, tab, command or element that is not there), `refused`
(a policy said no: a path outside the roots, a denied address), `timeout`, `unavailable`
(the desktop, the browser or a helper program cannot be reached), `failed` (the action ran and
did not succeed), `internal` (a bug in the server: the message says what to report),
`replay_divergence` (a replayed run did not do what its record says: where and why),
`human_has_control` (a person is using the screen from the viewer and did not hand it back in
time: `capabilities/input_lease.py`). The runtime answers two more in the same shape for calls
its operator's policy refuses, before any server sees them (`runtime/policy.py`): `denied`,
`approval_timeout` and `approval_stale` (approved, but its target changed after it was shown:
`runtime/approval.py`).

Cancellation. When the client cancels a call (`notifications/cancelled`, or the connection
closing), the SDK cancels the handler's task: its awaits stop at once. Work the event loop does
not run is out of that reach, so `ToolRegistry.call` ties each call to a `Cancellation`
(`current_cancellation()`, which worker threads inherit) that is set at the same moment: a
blocking body waits with `sleep` / `wait_readable` and checks between steps, a child process or
a wait on another loop is stopped with `on_cancel`, and the body then raises `CallCancelled`.
The call still waits for its worker thread to return (anyio's default), so cleanup in the
thread (keys released, processes reaped) is done before the next call runs. Nothing is sent
for a cancelled call: its client stopped waiting.
"""

from __future__ import annotations

import base64
import contextvars
import copy
import json
import logging
import os
import re
import select
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar, get_args

import anyio
import anyio.lowlevel
import mcp_types as types
from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, ValidationError, model_serializer

log = logging.getLogger("codedesk.capabilities")

ErrorKind = Literal[
    "invalid_arguments", "unknown_tool", "not_found", "refused", "timeout", "unavailable", "failed", "internal",
    "replay_divergence", "human_has_control",
]
ERROR_KINDS: tuple[str, ...] = get_args(ErrorKind)


class ToolError(Exception):
    """A tool's failure as the model reads it: what failed, where, and what to do next.

    `step` is the 1-based step of a batch, `field` the argument at fault (dotted path), `hint`
    the next thing to try. Raise it from a tool; the registry turns it into a `failure`.
    """

    def __init__(self, kind: ErrorKind, message: str, *, step: int | None = None,
                 field: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.step = step
        self.field = field
        self.hint = hint

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message}
        for key in ("step", "field", "hint"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


class CapabilityError(Exception):
    """The base of every server's own error root: a failure the caller can act on. A subclass
    sets `kind` (and may set a default `field`); `message` and `hint` are shown to the model as
    they are; `to_tool_error` is the one translation into the contract's `ToolError`."""

    kind: ClassVar[ErrorKind] = "failed"
    field: str | None = None

    def __init__(self, message: str, *, hint: str | None = None, field: str | None = None,
                 step: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if field is not None:
            self.field = field
        self.step = step

    def __str__(self) -> str:
        return self.message

    def to_tool_error(self) -> ToolError:
        """The contract's error for this failure (raise it `from` this one)."""
        return ToolError(self.kind, self.message, step=self.step, field=self.field, hint=self.hint)


ERROR_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Why the call failed.",
    "properties": {
        "kind": {"type": "string", "enum": list(ERROR_KINDS), "description": "The class of failure."},
        "message": {"type": "string", "description": "What failed, where, and what to do next."},
        "step": {"type": "integer", "minimum": 1, "description": "The failing step of a batch (1-based)."},
        "field": {"type": "string", "description": "The argument at fault, as a dotted path."},
        "hint": {"type": "string", "description": "What to try next."},
    },
    "required": ["kind", "message"],
}

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"error": ERROR_OBJECT_SCHEMA},
    "required": ["error"],
}
"""The structured content of every failed call."""


def output_schema(success: dict[str, Any] | type[BaseModel]) -> dict[str, Any]:
    """A tool's `outputSchema`: its success shape (a JSON schema or a pydantic model), or the
    shared error object. Both branches are objects, so the whole is an object schema too."""
    shape = clean_schema(success) if isinstance(success, type) else copy.deepcopy(success)
    defs = shape.pop("$defs", None)  # `#/$defs/...` references are resolved from the root
    schema: dict[str, Any] = {"type": "object", "anyOf": [shape, ERROR_SCHEMA]}
    if defs:
        schema["$defs"] = defs
    return schema


def clean_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a pydantic model as models read best: references inlined (a recursive
    one stays a `$ref` into the `$defs` kept for it), no titles."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    kept: dict[str, Any] = {}

    def inline(node: Any, expanding: frozenset[str]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.rsplit("/", 1)[1]
                if name in expanding:  # recursive: refer to it instead of inlining forever
                    if name not in kept:
                        kept[name] = None
                        kept[name] = inline(copy.deepcopy(defs[name]), frozenset({name}))
                    return node
                target = inline(copy.deepcopy(defs[name]), expanding | {name})
                extra = {k: inline(v, expanding) for k, v in node.items() if k != "$ref"}
                return {**target, **extra}
            # A discriminator's mapping points into the `$defs` inlined here; the branches' own
            # `const` tags say the same in plain JSON Schema.
            return {k: inline(v, expanding) for k, v in node.items()
                    if not (k == "title" and isinstance(v, str))
                    and not (k == "discriminator" and isinstance(v, dict) and "propertyName" in v)}
        if isinstance(node, list):
            return [inline(item, expanding) for item in node]
        return node

    cleaned = inline(schema, frozenset())
    if kept:
        cleaned["$defs"] = kept
    return cleaned


def _absent_not_null(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """An optional output field is left out when unset, never sent as null: say so in the
    schema, so typed declarations read `x?: T`, not `x?: T | null`."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        options = prop.get("anyOf")
        if name in required or not options or {"type": "null"} not in options:
            continue
        rest = [option for option in options if option != {"type": "null"}]
        del prop["anyOf"]
        prop.pop("default", None)
        if len(rest) == 1:
            prop.update(rest[0])
        else:
            prop["anyOf"] = rest


class OutputModel(BaseModel):
    """Base of a structured result's models: exactly the fields listed; an optional field that
    is None is left out of the dump, and its schema says so. A required field typed `T | None`
    is sent, null included."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_absent_not_null, populate_by_name=True)

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name, info in type(self).model_fields.items():
            if not info.is_required() and getattr(self, name) is None:
                data.pop(name, None)
                if info.alias:
                    data.pop(info.alias, None)
        return data


@dataclass(frozen=True)
class Image:
    """An image block of a result; the structured result points at it by its index."""

    data: bytes
    mime_type: str = "image/png"

    def block(self) -> types.ImageContent:
        return types.ImageContent(data=base64.b64encode(self.data).decode("ascii"), mime_type=self.mime_type)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(value: Any) -> Any:
    """`value` as UTF-8 can carry it: every lone surrogate in a string, or in the strings (keys
    included) of a JSON-like value, becomes U+FFFD; a pair split across two code points is
    joined. The value itself comes back when nothing needed replacing.

    Text read from a page, the desktop (window titles, accessibility names, the clipboard) or a
    document may hold lone surrogates (JavaScript strings are UTF-16); no transport can send
    them. Every result passes here, in `success` and `failure`.
    """
    if isinstance(value, str):
        if _LONE_SURROGATE.search(value) is None:
            return value
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if not isinstance(value, (dict, list, tuple)):
        return value
    try:  # JSON text, written in C, is the quick look; the walk only when it finds one
        if _LONE_SURROGATE.search(json.dumps(value, ensure_ascii=False)) is None:
            return value
    except (TypeError, ValueError, RecursionError):
        pass
    return _rebuilt(value)


def _rebuilt(value: Any) -> Any:
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, dict):
        return {_rebuilt(key): _rebuilt(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rebuilt(item) for item in value]
    return value


def result_text(structured: dict[str, Any], summary: str | None = None) -> str:
    """The text block of a result: the summary line (when there is one), then the structured
    content as JSON, whole, so a client that reads only text has everything a script has."""
    body = json.dumps(structured, ensure_ascii=False)
    return f"{summary}\n{body}" if summary else body


def success(structured: dict[str, Any], summary: str | None = None,
            images: Sequence[Image] = ()) -> types.CallToolResult:
    """A successful result: the structured content; the text (`result_text`: the summary line,
    if any, then the structured content as JSON); then the images. Text that is not valid
    Unicode is made so (`well_formed`)."""
    structured = well_formed(structured)
    content: list[types.ContentBlock] = [types.TextContent(text=result_text(structured, well_formed(summary)))]
    content.extend(image.block() for image in images)
    return types.CallToolResult(content=content, structured_content=structured)


def failure(error: ToolError, *, summary: str | None = None, extra: dict[str, Any] | None = None,
            images: Sequence[Image] = ()) -> types.CallToolResult:
    """A failed result: `{"error": {...}}` (plus `extra`, e.g. a batch's finished steps); the
    text (`result_text`: the summary line, by default `Error: <message> (<hint>)`, `""` for
    none, then the structured content as JSON); then the images (a screenshot of the moment).
    Text that is not valid Unicode is made so (`well_formed`)."""
    if summary is None:
        summary = f"Error: {error.message}" + (f" ({error.hint})" if error.hint else "")
    content: list[types.ContentBlock] = []
    structured = well_formed({**(extra or {}), "error": error.to_json()})
    content.append(types.TextContent(text=result_text(structured, well_formed(summary))))
    content.extend(image.block() for image in images)
    return types.CallToolResult(content=content, structured_content=structured, is_error=True)


def validation_error(tool: str, model: type[BaseModel], exc: ValidationError, *, step: int | None = None,
                     prefix: str = "") -> ToolError:
    """The `invalid_arguments` error for a failed validation: one clause per problem, each naming
    its field; an unknown field is named with the fields the tool does take."""
    known = ", ".join(info.alias or name for name, info in model.model_fields.items())
    problems: list[str] = []
    first_field: str | None = None
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        first_field = first_field or (where if error["loc"] else None)
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown field {prefix + where!r} (the fields of {tool} are: {known})")
        elif error["type"] == "missing":
            problems.append(f"missing required field {prefix + where!r}")
        else:
            problems.append(f"{prefix + where}: {error['msg']}")
    where = f"step {step}: " if step is not None else ""
    return ToolError("invalid_arguments", f"invalid arguments for {tool}: {where}" + "; ".join(problems)
                     + ". Nothing was done.", step=step,
                     field=(prefix + first_field) if first_field else None,
                     hint=f"call mcp.describe for the fields of {tool}")


class CallCancelled(Exception):
    """The running call was cancelled by its client: raised inside the call's work (a worker
    thread) at its next wait or check, so the work stops there. The registry sends nothing for
    it: the client has stopped waiting."""


class Cancellation:
    """Whether the running call was cancelled, for work the event loop does not run.

    `ToolRegistry.call` makes one per call and cancels it when the call is cancelled; a worker
    thread reads it with `current_cancellation()`. Safe to use from any thread.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._wakeup: tuple[int, int] | None = None  # a pipe written on cancel, for select()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        """Cancel the work: wake its waits and run its `on_cancel` callbacks (once)."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
            if self._wakeup is not None:
                os.write(self._wakeup[1], b"x")
        for callback in callbacks:
            try:
                callback()
            except Exception:  # one failing stop must not keep the others from running
                log.exception("stopping cancelled work failed")

    def check(self) -> None:
        """Raise `CallCancelled` if the call was cancelled."""
        if self._event.is_set():
            raise CallCancelled("the call was cancelled")

    def sleep(self, seconds: float) -> None:
        """`time.sleep` that ends with `CallCancelled` as soon as the call is cancelled."""
        if self._event.wait(seconds) if seconds > 0 else self._event.is_set():
            raise CallCancelled("the call was cancelled")

    def wait_readable(self, fd: int, timeout: float | None) -> bool:
        """Wait until `fd` can be read (True) or `timeout` passes (False); `CallCancelled` if
        the call is cancelled meanwhile."""
        with self._lock:
            self.check()
            if self._wakeup is None:
                self._wakeup = os.pipe()
            wakeup = self._wakeup[0]
        readable, _, _ = select.select([fd, wakeup], [], [], timeout)
        self.check()
        return fd in readable

    @contextmanager
    def on_cancel(self, callback: Callable[[], None]) -> Iterator[None]:
        """Within the block, a cancel of the call runs `callback` (on the event loop's thread):
        kill a child process, cancel a future. Already cancelled: it runs at once."""
        with self._lock:
            registered = not self._event.is_set()
            if registered:
                self._callbacks.append(callback)
        if not registered:
            callback()
        try:
            yield
        finally:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

    def close(self) -> None:
        with self._lock:
            wakeup, self._wakeup = self._wakeup, None
        if wakeup is not None:
            os.close(wakeup[0])
            os.close(wakeup[1])


_current_cancellation: contextvars.ContextVar[Cancellation | None] = contextvars.ContextVar(
    "codedesk_call_cancellation", default=None)


def current_cancellation() -> Cancellation:
    """The running call's `Cancellation` (in its task, and in the worker threads it starts with
    anyio, which carry its context); outside a call, one that is never cancelled."""
    return _current_cancellation.get() or Cancellation()


async def _tied_to_cancellation(work: Callable[[], Awaitable[types.CallToolResult]]) -> types.CallToolResult:
    """Run a call's work with its `Cancellation`, set the moment the call's task is cancelled;
    a `CallCancelled` the work raises becomes that cancellation again."""
    cancellation = Cancellation()
    token = _current_cancellation.set(cancellation)
    finished = anyio.Event()

    async def cancel_with_the_call() -> None:
        # The call's own task may be waiting for a worker thread (shielded, as anyio does): this
        # task, beside it, is what the cancellation reaches at once.
        try:
            await finished.wait()
        except anyio.get_cancelled_exc_class():
            if not finished.is_set():
                cancellation.cancel()
            raise

    stopped: CallCancelled | None = None
    try:
        async with anyio.create_task_group() as watch:
            watch.start_soon(cancel_with_the_call)
            try:
                return await work()
            except CallCancelled as exc:  # kept inside: a task group would wrap it in a group
                stopped = exc
            finally:
                finished.set()
        await anyio.lowlevel.checkpoint()  # the call's cancellation, raised here
        assert stopped is not None
        raise stopped  # cancelled from elsewhere than the call (nothing does that today)
    finally:
        _current_cancellation.reset(token)
        cancellation.close()


State = TypeVar("State")
Args = TypeVar("Args", bound=BaseModel)


@dataclass(frozen=True, kw_only=True)
class ToolSpec(Generic[State]):
    """One tool: its name, description, input model, output schema and handler.

    `run(state, args)` returns a `CallToolResult` (built with `success`, or with `failure` when
    the result carries more than the error, such as a batch's finished steps) or raises
    `ToolError`.

    Two optional hooks serve tools whose input or text has a shape of its own:
    `invalid(exc, arguments)` words a failed validation of the input (default:
    `validation_error`), e.g. naming a batch's step; `failed(state, error, arguments)` builds
    every failed result of the tool (with `failure`), e.g. in the text the spec prescribes.
    """

    name: str
    description: str
    args: type[BaseModel]
    output: dict[str, Any] | type[BaseModel]
    run: Callable[[State, Any], Awaitable[types.CallToolResult]]
    annotations: dict[str, Any] = field(default_factory=dict)
    invalid: Callable[[ValidationError, dict[str, Any]], ToolError] | None = None
    failed: Callable[[State, ToolError, dict[str, Any]], Awaitable[types.CallToolResult]] | None = None

    def tool(self) -> types.Tool:
        return types.Tool(name=self.name, description=self.description, input_schema=clean_schema(self.args),
                          output_schema=output_schema(self.output),
                          annotations=types.ToolAnnotations(**self.annotations) if self.annotations else None)


class ToolRegistry(Generic[State]):
    """The tools of one server: listing, and calling with validation and the one result contract."""

    def __init__(self, server: str, specs: Iterable[ToolSpec[State]]) -> None:
        self.server = server
        self.specs = {spec.name: spec for spec in specs}
        self._listed: list[types.Tool] | None = None

    def list_tools(self) -> list[types.Tool]:
        if self._listed is None:  # building the schemas costs tens of ms: once per server
            self._listed = [spec.tool() for spec in self.specs.values()]
        return list(self._listed)

    # The MCP server's tools/list and tools/call handlers: `Server(..., on_list_tools=registry.on_list_tools,
    # on_call_tool=registry.on_call_tool)`; the lifespan's value is the tools' state.
    async def on_list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.list_tools())

    async def on_call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await self.call(ctx.lifespan_context, params.name, params.arguments)

    async def call(self, state: State, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Validate the whole input, run the tool, and answer by the contract, whatever happens."""
        spec = self.specs.get(name)
        if spec is None:
            return failure(ToolError("unknown_tool", f"{self.server} has no tool {name!r}; its tools are: "
                                     f"{', '.join(self.specs)}"))
        raw = arguments or {}
        try:
            args = spec.args.model_validate(raw)
        except ValidationError as exc:
            error = spec.invalid(exc, raw) if spec.invalid is not None else validation_error(name, spec.args, exc)
            return await self._failed(spec, state, error, raw)
        try:
            return await _tied_to_cancellation(lambda: self._run(spec, state, args, raw))
        except CallCancelled:
            return await self._failed(spec, state, ToolError(
                "failed", f"{name} was cancelled before it finished"), raw)

    async def _run(self, spec: ToolSpec[State], state: State, args: Any,
                   raw: dict[str, Any]) -> types.CallToolResult:
        try:
            return await spec.run(state, args)
        except ToolError as exc:
            return await self._failed(spec, state, exc, raw)
        except CallCancelled:
            raise
        except Exception as exc:  # a bug or an unforeseen library failure: say which, keep serving
            log.exception("%s.%s failed", self.server, spec.name)
            return await self._failed(spec, state, ToolError(
                "internal", f"{spec.name} failed unexpectedly ({type(exc).__name__}: {exc})",
                hint="check the arguments; if they are right, report this error"), raw)

    async def _failed(self, spec: ToolSpec[State], state: State, error: ToolError,
                      arguments: dict[str, Any]) -> types.CallToolResult:
        if spec.failed is None:
            return failure(error)
        try:
            return await spec.failed(state, error, arguments)
        except Exception:  # the tool's own wording failed: the plain contract still answers
            log.exception("%s.%s: building the failed result failed", self.server, spec.name)
            return failure(error)
