"""The agent-facing MCP server: `run_js` and `run_py`, over stdio or streamable HTTP.

`Runtime` is the process-wide state: the sandbox engines (created once), the bridge to the
capability servers, the generated tool descriptions and the connected clients (to tell them
when the descriptions change). `build_server(runtime)` wires it into the SDK's low-level
`Server`; `serve_stdio` and `serve_http` run it on a transport. On either, a result that cannot
be sent fails its call alone as an internal error (`capabilities.wire`): no single result ends a
session.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import gc
import json
import logging
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPDeprecationWarning
from capabilities import wire
from sandbox.result import TIMEOUT_SECONDS_RANGE

from . import declarations, descriptions, engines, version
from . import listing_cache as listing_cache_module
from .arguments import ArgumentsError, RunJsArguments, RunPyArguments, input_schema, parse_arguments
from .bridge import START_TIMEOUT_SECONDS, Bridge, BridgeError, tool_to_dict
from .config import DECLARED_IN_FULL, ServerConfig, builtin_servers, is_builtin
from .approval import ApprovalRequest
from .oversight import Oversight
from .policy import Ask, Policy
from .recording import Timeline, new_run_id
from .results import error_result, to_call_tool_result

logger = logging.getLogger(__name__)

# Log notifications are how console lines stream to the client during a run (the era our
# clients negotiate still has them); the SDK flags the API as deprecated for a later era.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

PROGRESS_INTERVAL_SECONDS = 1.0
"""How often a run sends a progress notification when the client asked for progress."""

TIMEOUT_GRACE_SECONDS = 10.0
"""Backstop over the sandbox's own timeout, should an engine ever fail to stop a run."""

CONSOLE_LOG_LEVELS: dict[str, types.LoggingLevel] = {
    "log": "info",
    "info": "info",
    "debug": "debug",
    "warn": "warning",
    "error": "error",
}

class Runtime:
    """Engines, bridge and descriptions for one serving process. Use as an async context manager."""

    def __init__(
        self, servers: Mapping[str, ServerConfig], *, listing_cache: Path | None = None, start_servers: bool = False,
        known_secrets: tuple[str, ...] = (), policy: Policy | None = None,
    ) -> None:
        self.servers = dict(servers)
        self.policy = policy if policy is not None else Policy()
        self._start_servers = start_servers
        self._known_secrets = known_secrets
        self.timeline: Timeline | None = None
        # The session's control viewers: they watch runs live and answer approvals
        self.oversight = Oversight(known_secrets, on_input=self._person_input)
        # The session server reads the timeline, which is the runtime's alone: served in this process.
        local = {"session": self._session_server} if is_builtin("session", self.servers.get("session")) else {}
        self.bridge = Bridge(self.servers, on_tools_changed=self._tools_changed, local=local)
        # (language, server) -> (bridge generation, what list_for_guest answered then)
        self._guest_listings: dict[tuple[str, str | None], tuple[int, dict[str, list[dict[str, Any]]]]] = {}
        self._listing: dict[tuple[str, str | None], asyncio.Future[Any]] = {}  # listings being made
        self._listing_cache = listing_cache if listing_cache is not None else listing_cache_module.default_path()
        self._remembered = listing_cache_module.load(self._listing_cache, self.servers)
        self._clients: dict[str, Any] = {}
        self._listed_once = False
        self._tools = self._describe()
        self._task_group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Runtime:
        self.timeline = Timeline.open(self._known_secrets)
        await self.bridge.__aenter__()
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self.oversight.connect_forever)
        if self._start_servers:
            self.bridge.start_in_background()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._task_group is not None
        task_group, self._task_group = self._task_group, None
        task_group.cancel_scope.cancel()
        await task_group.__aexit__(None, None, None)
        try:
            await self.bridge.__aexit__(*exc_info)
        finally:
            if self.timeline is not None:
                self.timeline.close()

    # -- the session server -------------------------------------------------------------------

    def _session_server(self) -> Any:
        from capabilities.session_server.server import build_server as build_session_server
        from capabilities.session_server.store import timeline_dir
        from capabilities.session_server.tools import SessionState

        from .replay import Replay

        timeline = self.timeline
        async def policed(server: str, tool: str, args: Any) -> dict[str, Any]:
            # a replay's calls answer to today's policy (nobody is asked: `ask` is refused)
            return await self.policy.guard(self.bridge.call_tool, None)(server, tool, args)

        replay = Replay(policed, self._read_only, self._run_for_replay, timeline, self._known_secrets)
        state = SessionState(folder=timeline.folder if timeline is not None else timeline_dir(),
                             replayer=replay.replay, flush=timeline.flush if timeline is not None else None,
                             video=self.oversight.video)
        return build_session_server(state=state)

    def _read_only(self, server: str, tool: str) -> bool:
        for known in self.bridge.known_tools().get(server, ()):
            if known.name == tool:
                return bool(known.annotations is not None and known.annotations.read_only_hint)
        return False

    async def _run_for_replay(self, language: str, code: str, call_tool: Any, *, replay_of: str,
                              on_run: Any, limits: dict[str, Any]) -> types.CallToolResult:
        return await self.run(language, {**limits, "code": code}, call_tool=call_tool, replay_of=replay_of,
                              on_run=on_run)

    # -- descriptions -------------------------------------------------------------------------

    def tools(self) -> list[types.Tool]:
        """The two tools with their current descriptions."""
        return list(self._tools)

    async def listed_tools(self) -> list[types.Tool]:
        """The two tools, once the built-in servers are known, so their descriptions declare every
        built-in tool. Known means listed by this process (started if need be) or remembered from
        the last one with the same configuration and codedesk version; a server that cannot start
        is named there. A remembered server is not started to check its listing: it starts when a
        script first calls it (or at once with --start-servers), and a listing that changed is
        then announced with tools/list_changed. Starting every built-in server at each start took
        seconds of both cores from the first runs."""
        if not self._listed_once:
            unknown = [name for name in builtin_servers()
                       if is_builtin(name, self.servers.get(name)) and name not in self._remembered]
            with anyio.move_on_after(START_TIMEOUT_SECONDS):
                async with anyio.create_task_group() as tg:
                    for name in unknown:
                        tg.start_soon(self._list_quietly, name)
            self._listed_once = True
        return self.tools()

    async def _list_quietly(self, server: str) -> None:
        try:
            await self.bridge.list_tools(server)
        except BridgeError as exc:
            logger.warning("%s", exc)

    def _describe(self) -> list[types.Tool]:
        names = list(self.servers)
        known = {**self._remembered, **self._live_tools()}
        shipped = {name for name in builtin_servers() if is_builtin(name, self.servers.get(name))}
        builtin, brief = shipped & DECLARED_IN_FULL, shipped - DECLARED_IN_FULL
        policy = self.policy.summary()
        tail = f"\n\n{policy}" if policy else ""
        return [
            types.Tool(
                name="run_js",
                description=descriptions.run_js_description(names, known, builtin, brief) + tail,
                input_schema=input_schema(RunJsArguments),
            ),
            types.Tool(
                name="run_py",
                description=descriptions.run_py_description(names, known, builtin, brief) + tail,
                input_schema=input_schema(RunPyArguments),
            ),
        ]

    def _live_tools(self) -> dict[str, list[dict[str, Any]]]:
        return {name: [tool_to_dict(t) for t in tools] for name, tools in self.bridge.known_tools().items()}

    def _tools_changed(self) -> None:
        listing_cache_module.save(self._listing_cache, self.servers, self._live_tools())
        tools = self._describe()
        if tools == self._tools:
            return
        self._tools = tools
        if self._task_group is not None:
            for key, session in list(self._clients.items()):
                self._task_group.start_soon(self._notify_list_changed, key, session)

    async def _notify_list_changed(self, key: str, session: Any) -> None:
        try:
            await session.send_tool_list_changed()
        except Exception as exc:  # the client went away: forget it
            logger.debug("dropping client %s: %r", key, exc)
            self._clients.pop(key, None)

    def remember_client(self, ctx: Any) -> None:
        """Keep the latest session of each connected client, to announce description changes."""
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        key = (headers.get("mcp-session-id") if headers is not None else None) or "stdio"
        self._clients[key] = ctx.session

    # -- engines ------------------------------------------------------------------------------

    async def engine(self, language: str) -> Any:
        """The process's engine for `language` ("js" or "py"), created once."""
        return await engines.engine(language)

    # -- runs ---------------------------------------------------------------------------------

    async def list_for_guest(self, language: str, server: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """What `mcp.listTools` answers a script: each tool with its `declaration`, the typed text
        `mcp.describe` returns (TypeScript for run_js, a Python stub for run_py)."""
        key = (language, server)
        cached = self._guest_listings.get(key)
        if cached is not None and cached[0] == self.bridge.generation and self.bridge.serving(server):
            return cached[1]  # a script calling listTools in a loop must not hold the event loop
        # Listings asked for while one is being made wait for it: 160 listTools at once each made
        # (and the sandbox serialized) their own half a megabyte on the loop, 1.7 s in all.
        while (making := self._listing.get(key)) is not None:
            try:
                return await asyncio.shield(making)
            except _ListingCancelled:
                continue  # its maker's run ended first: make it here
        making = self._listing[key] = asyncio.get_running_loop().create_future()
        try:
            generation = self.bridge.generation
            listing = await self.bridge.list_tools(server)
            render = declarations.typescript_tool if language == "js" else declarations.python_tool
            result = {name: [{**tool, "declaration": _declaration(render, tool)} for tool in tools]
                      for name, tools in listing.items()}
            if self.bridge.generation == generation:  # nothing started or failed while listing
                self._guest_listings[key] = (generation, result)
            making.set_result(result)
            return result
        except BaseException as exc:
            making.set_exception(exc if isinstance(exc, Exception) else _ListingCancelled())
            making.exception()  # retrieved here: a listing nobody else waited for logs nothing
            raise
        finally:
            del self._listing[key]

    async def run(
        self,
        language: str,
        arguments: Any,
        *,
        on_console: Any = None,
        call_tool: Any = None,
        replay_of: str | None = None,
        on_run: Any = None,
        ask: Ask | None = None,
    ) -> types.CallToolResult:
        """Validate the arguments, run the script, and return the agent-facing result.

        The run and each capability call it makes go on the timeline. `call_tool` stands in for
        the bridge's (a replay's answers from the record), `replay_of` names the run a replay
        re-runs, `on_run` is told the run's id, `ask` asks the client's user to approve a call
        the operator's policy says to ask about (None: they cannot be asked), when no person at
        a control viewer of the session can."""
        model = RunJsArguments if language == "js" else RunPyArguments
        try:
            args = parse_arguments(model, arguments)
        except ArgumentsError as exc:
            return error_result(f"{'run_js' if language == 'js' else 'run_py'}: {exc}")
        given = {k: v for k, v in args if k != "code" and v is not None}  # the limits the call sets
        limits = _limits(language, given)
        engine = await self.engine(language)
        recorder = None

        def on_answer(server: str, tool: str, rule: str, answer: str) -> None:
            if recorder is not None:
                recorder.approval(server, tool, rule, answer)

        asker = None if replay_of is not None else self._asker(ask)  # a replay asks nobody
        call = self.policy.guard(call_tool if call_tool is not None else self.bridge.call_tool, asker, on_answer)
        if replay_of is not None:
            call = _no_replay_within(call)
        run = new_run_id()
        if self.timeline is not None:
            recorder = self.timeline.start_run(language, args.code, call, limits=given, replay_of=replay_of,
                                               mode="script" if replay_of is not None else None, run=run)
            call = recorder.call_tool
            if on_run is not None:
                on_run(run)
        watched = self.oversight.watch(run, language, args.code, call)
        result = await self._execute(engine, language, args.code, watched.call_tool, limits, on_console)
        watched.end(not result.is_error)
        if recorder is not None:
            recorder.end(result)
        return result

    def _asker(self, elicit: Ask | None) -> Ask:
        """Who approves a call: a person at a control viewer of the session, else the client's user
        (elicitation), else nobody ("unasked")."""

        async def ask(request: ApprovalRequest) -> Any:
            answer = await self.oversight.ask(request.shown(), self.policy.ask_timeout_seconds)
            if answer is not None:
                return answer
            return await elicit(request) if elicit is not None else "unasked"

        return ask

    def _person_input(self, count: int, since: float, until: float) -> None:
        """A person's input at a viewer, coalesced by the relay, on the timeline."""
        if self.timeline is not None:
            self.timeline.person_input(count, since, until)

    async def _execute(self, engine: Any, language: str, code: str, call: Any, limits: Any,
                       on_console: Any) -> types.CallToolResult:
        # asyncio's own timeout: a third cheaper than anyio's scope, on every run
        backstop = asyncio.timeout(limits.timeout_seconds + TIMEOUT_GRACE_SECONDS)
        try:
            async with backstop:
                result = await engine.run(
                    code,
                    call_tool=call,
                    list_tools=functools.partial(self.list_for_guest, language),
                    limits=limits,
                    on_console=on_console,
                )
        except Exception as exc:  # an engine bug must not take the server down
            if backstop.expired():
                return error_result("Error: timeout error: the run exceeded "
                                    f"timeout_seconds={limits.timeout_seconds:g}")
            logger.exception("engine failure")
            return error_result(f"Error: internal error in the sandbox: {type(exc).__name__}: {exc}")
        return to_call_tool_result(result)


def _no_replay_within(call: Any) -> Any:
    """`call` for a replayed script, refusing to start a replay: a script that replays its own
    run would otherwise nest replays without end, each a run holding a VM."""

    async def refusing(server: str, tool: str, args: Any) -> dict[str, Any]:
        if server == "session" and tool == "timeline_replay":
            raise BridgeError("a replayed run cannot start a replay; replay from a run of your own")
        return await call(server, tool, args)

    return refusing


class _ListingCancelled(Exception):
    """The run making a listing ended before it was made; a run waiting for it makes its own."""


def _declaration(render: Any, tool: dict[str, Any]) -> str:
    key = (render, tool["name"], json.dumps([tool.get("description"), tool.get("inputSchema"),
                                              tool.get("outputSchema")], sort_keys=True))
    text = _DECLARATIONS.get(key)
    if text is None:
        if len(_DECLARATIONS) > 4096:  # servers that keep changing their tools: start over
            _DECLARATIONS.clear()
        text = _DECLARATIONS[key] = render(tool)
    return text


_DECLARATIONS: dict[tuple[Any, str, str], str] = {}
"""Rendered declarations by tool and schema: a listing is rendered once, not per run."""


def _limits(language: str, given: dict[str, Any]) -> Any:
    import sandbox

    if not given:  # the usual call
        return _default_limits(language)
    return sandbox.JsLimits(**given) if language == "js" else sandbox.PyLimits(**given)


@functools.cache  # limits are frozen, so one default object serves every run
def _default_limits(language: str) -> Any:
    import sandbox

    return sandbox.JsLimits() if language == "js" else sandbox.PyLimits()


NOTIFY_CHARS = 16 * 1024
"""Console lines that queued up together are sent in one notification up to about this size."""


class _ConsoleForwarder:
    """Console lines of one run, sent to the client as MCP log notifications while it runs (lines
    that queue up while one is sent go together, joined by newlines).

    The engine calls `__call__` synchronously (possibly from a worker thread); lines are queued,
    and the first one starts `pump`, a task of the loop's that sends them in order (a run that
    prints nothing costs no stream and no task). `finish` waits for the lines queued to be sent.
    """

    def __init__(self, session: Any, request_id: Any, logger_name: str) -> None:
        self._session = session
        self._request_id = request_id
        self._logger_name = logger_name
        self._lines: collections.deque[tuple[str, str]] = collections.deque()
        self._more = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def __call__(self, level: str, text: str) -> None:
        if threading.get_ident() == self._loop_thread:
            self._queue(level, text)
        else:  # an engine running the guest in a worker thread
            self._loop.call_soon_threadsafe(self._queue, level, text)

    def _queue(self, level: str, text: str) -> None:
        if self._closed:
            return  # a line that arrived after the run ended
        self._lines.append((level, text))
        self._more.set()
        if self._pump is None:
            self._pump = self._loop.create_task(self.pump())

    async def finish(self) -> None:
        """No more lines: wait until those queued are sent (cancelled with the handler, it stops)."""
        self._closed = True
        self._more.set()
        if self._pump is not None:
            try:
                await asyncio.shield(self._pump)
            except asyncio.CancelledError:
                self._pump.cancel()
                raise

    async def pump(self) -> None:
        while True:
            if not self._lines:
                if self._closed:
                    return
                self._more.clear()
                await self._more.wait()
                continue
            # Lines that queued up while the last notification was sent go together, one
            # notification per run of a level: a flood costs a few messages, not one a line
            # (600 one-line notifications of two runs at once held a third run's answer).
            level, text = self._lines.popleft()
            level = CONSOLE_LOG_LEVELS.get(level, "info")
            texts, size = [text], len(text)
            while size < NOTIFY_CHARS and self._lines:
                more_level, more = self._lines.popleft()
                more_level = CONSOLE_LOG_LEVELS.get(more_level, "info")
                if more_level != level:
                    await self._notify(level, "\n".join(texts))
                    level, texts, size = more_level, [], 0
                texts.append(more)
                size += len(more) + 1
            await self._notify(level, "\n".join(texts))

    async def _notify(self, level: types.LoggingLevel, text: str) -> None:
        try:
            await self._session.send_log_message(level, text, logger=self._logger_name,
                                                 related_request_id=self._request_id)
        except Exception as exc:  # a client that went away must not fail the run
            logger.debug("console notification dropped: %r", exc)


async def _report_progress(session: Any, timeout: float, started: float) -> None:
    """Progress notifications while a run goes (a task the handler cancels when the run ends)."""
    while True:
        await asyncio.sleep(PROGRESS_INTERVAL_SECONDS)
        elapsed = time.monotonic() - started
        try:
            await session.report_progress(elapsed, total=timeout, message=f"running for {elapsed:.0f} s")
        except Exception as exc:
            logger.debug("progress notification dropped: %r", exc)
            return


def build_server(runtime: Runtime) -> Server[Any]:
    """The low-level MCP server exposing run_js and run_py backed by `runtime`."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        runtime.remember_client(ctx)
        engines.prepare("js")  # a client lists the tools before it runs a script: made meanwhile
        return types.ListToolsResult(tools=await runtime.listed_tools())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        runtime.remember_client(ctx)
        if params.name not in ("run_js", "run_py"):
            return error_result(f"unknown tool {params.name!r}; this server offers run_js and run_py")
        language = "js" if params.name == "run_js" else "py"
        arguments = params.arguments if params.arguments is not None else {}
        forwarder = _ConsoleForwarder(ctx.session, ctx.request_id, params.name)
        ticker = None
        if _progress_token(ctx.params) is not None:
            timeout = arguments.get("timeout_seconds") if isinstance(arguments, dict) else None
            given = isinstance(timeout, int | float) and not isinstance(timeout, bool)
            total = float(timeout) if given else float(TIMEOUT_SECONDS_RANGE[1])
            ticker = asyncio.get_running_loop().create_task(_report_progress(ctx.session, total, time.monotonic()))
        try:
            result = await runtime.run(language, arguments, on_console=forwarder,
                                       ask=_asker(ctx, runtime.policy.ask_timeout_seconds))
        finally:
            if ticker is not None:
                ticker.cancel()
            await forwarder.finish()  # the answer goes after the run's console lines
        return result

    server = Server(
        "codedesk",
        version=version(),
        instructions=(
            "codedesk gives you a Linux desktop through code: write a script for run_js (or run_py) "
            "that calls the capability servers with mcp.callTool; read the tool descriptions for the API."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    return wire.install(server, lambda message: error_result(f"Error: {message}"))


def _asker(ctx: Any, timeout: float) -> Ask | None:
    """Asks the user of the client that made this request, through MCP elicitation (a yes/no form
    about the call); None when the client cannot be asked."""
    session = ctx.session
    capabilities = getattr(session, "client_capabilities", None)
    if capabilities is None or capabilities.elicitation is None or not getattr(session, "can_send_request", True):
        return None

    async def ask(request: ApprovalRequest) -> Any:
        with anyio.move_on_after(timeout):
            answer = await session.elicit_form(request.question(), {"type": "object", "properties": {}},
                                               related_request_id=ctx.request_id)
            return answer.action
        return "timeout"

    return ask


def _progress_token(params: Mapping[str, Any] | None) -> Any:
    meta = (params or {}).get("_meta")
    token = meta.get("progressToken") if isinstance(meta, Mapping) else None
    return None if isinstance(token, bool) else token


def heap_settled() -> None:
    """Once the serving process is set up: what it made so far (the SDK's and pydantic's objects,
    ours) lives as long as the process, so it is moved out of the garbage collector's sight, and
    collection (off while `codedesk serve` started) resumes. Each collection then walks what the
    runs made, not the whole start-up: the process's CPU for an empty run_js fell about 15%."""
    gc.freeze()
    gc.enable()


def initialization_options(server: Server[Any]) -> Any:
    """Options announcing that the tool list (its descriptions) can change."""
    return server.create_initialization_options(NotificationOptions(tools_changed=True))


async def serve_stdio(servers: Mapping[str, ServerConfig], start_servers: bool = False,
                      policy: Policy | None = None) -> None:
    """Serve run_js / run_py on this process's stdin and stdout until the client disconnects.

    With `start_servers`, the capability servers start right away in the background instead
    of on first use.
    """
    from capabilities.stdio import stdio_transport

    async with Runtime(servers, start_servers=start_servers, policy=policy) as runtime:
        server = build_server(runtime)
        heap_settled()
        async with stdio_transport() as (read_stream, write_stream):
            await server.run(wire.ReadableStream(read_stream), wire.SendableStream(write_stream),
                             initialization_options(server))


HEALTH_PATH = "/healthz"


def _with_health(app: Any) -> Any:
    """`GET /healthz` answers 200 "ok" without the token, for orchestrators' probes: it says the
    runtime serves, nothing more. Every other request goes to `app`."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") == HEALTH_PATH and scope.get("method") in ("GET", "HEAD"):
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain"), (b"content-length", b"3"),
                                    (b"cache-control", b"no-store")]})
            await send({"type": "http.response.body", "body": b"ok\n" if scope["method"] == "GET" else b""})
            return
        await app(scope, receive, send)

    return guarded


async def serve_http(
    servers: Mapping[str, ServerConfig], host: str, port: int, token: str, start_servers: bool = False,
    *, token_given: bool = False, policy: Policy | None = None,
) -> None:
    """Serve run_js / run_py over streamable HTTP at `http://HOST:PORT/mcp`, bearer token required.

    Prints the MCP URL on stderr once the socket is bound, and the token when it was generated
    here (`token_given`: it came from the operator, who has it; a log must not hold it).
    `start_servers` as for `serve_stdio`.
    """
    import uvicorn

    from .auth import BearerTokenGuard
    from .listener import listen_tcp

    if not token:
        raise ValueError("the HTTP transport needs a non-empty bearer token")
    sock = listen_tcp(host, port)  # before the banner: a client that reads it may connect at once
    bound_port = sock.getsockname()[1]
    async with Runtime(servers, start_servers=start_servers, known_secrets=(token,), policy=policy) as runtime:
        server = build_server(runtime)
        app = _with_health(BearerTokenGuard(server.streamable_http_app(host=host), token))
        heap_settled()
        url_host = f"[{host}]" if ":" in host else host
        url = f"http://{url_host}:{bound_port}/mcp"
        shown = "(the one you gave: --token or $CODEDESK_TOKEN)" if token_given else token
        print(
            f"codedesk runtime: streamable HTTP\n  MCP URL: {url}\n  token:   {shown}\n"
            f"  header:  Authorization: Bearer {'<token>' if token_given else token}",
            file=sys.stderr,
            flush=True,
        )
        # Open SSE streams would otherwise hold a shutdown forever.
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
        try:
            await uvicorn.Server(config).serve(sockets=[sock])
        finally:
            sock.close()
