"""The `codedesk` command.

    codedesk serve [--http HOST:PORT] [--token T] [--config FILE] [--start-servers]
        Serve the run_js / run_py MCP tools: on stdin/stdout by default, or over streamable
        HTTP at http://HOST:PORT/mcp with a bearer token (printed on stderr at start).
        Capability servers start on first use, or at once in the background with
        --start-servers.
    codedesk run FILE.js|FILE.py [--config FILE]
        Run one script against the configured capability servers and print its result as the
        agent would see it; exit status 1 when the run fails.
    codedesk timeline [--run ID] [--since T] [--server S] [--format jsonl|html] [--output FILE]
        The session's timeline (every run and each capability call it made), as JSON Lines on
        stdout or in FILE, or as a self-contained HTML report (FILE, default in the timeline's
        exports folder; its path is printed).
    codedesk desktop up|down|status ...
        The desktop session. Dispatched, with the remaining arguments, to
        `runtime.desktop.cli_main(argv: list[str]) -> int | None`, imported only when used;
        that module owns its own argument parsing and help.
    codedesk hub [--http HOST:PORT] [--backend docker|kubernetes] [--warm N] [--token T] [--data DIR]
        The session hub: many sessions behind one REST API and one MCP endpoint per session.
    codedesk session create|list|show|pause|sleep|wake|delete|link ...
        The hub's command-line client. Both dispatched to `runtime.hub.cli`, imported only when used.

Imports stay lazy so that `codedesk serve` starts fast.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from functools import partial
from pathlib import Path


def _parse_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT such as 127.0.0.1:8765, got {value!r}")
    return host.strip("[]"), int(port)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codedesk",
        description="codedesk: one MCP tool, run_js / run_py, that gives an agent a Linux desktop "
        "through scripts running in a WebAssembly sandbox.",
    )
    commands = parser.add_subparsers(dest="command", required=True,
                                     metavar="{serve,run,timeline,desktop,hub,session}")

    serve = commands.add_parser(
        "serve",
        help="serve the run_js / run_py MCP tools (stdio by default)",
        description="Serve the run_js and run_py MCP tools. Without --http the MCP protocol runs on "
        "stdin/stdout (for MCP clients that spawn the server). With --http HOST:PORT it runs over "
        "streamable HTTP at http://HOST:PORT/mcp and every request must carry "
        "'Authorization: Bearer TOKEN'; the URL and token are printed on stderr at start.",
    )
    serve.add_argument("--http", metavar="HOST:PORT", type=_parse_host_port,
                       help="serve streamable HTTP on HOST:PORT instead of stdio (port 0 picks a free port)")
    serve.add_argument("--token", help="the bearer token HTTP clients must send (default: $CODEDESK_TOKEN, "
                       "else a random token generated and printed at start)")
    serve.add_argument("--config", metavar="FILE", help="an mcpServers JSON file adding or overriding "
                       "capability servers, and its policy: which calls scripts may make, which wait "
                       "for a person's approval, calls per run (default: $CODEDESK_CONFIG)")
    serve.add_argument("--start-servers", action="store_true",
                       help="start the capability servers now, in the background, instead of on first "
                       "use, so the first calls do not wait for them (make up does this)")

    run = commands.add_parser(
        "run",
        help="run one .js or .py script and print its result",
        description="Run one script (run_js for .js/.mjs/.ts, run_py for .py) against the configured "
        "capability servers and print the result as the agent would see it. Exit status 1 when the "
        "run ends in an error.",
    )
    run.add_argument("file", type=Path, help="the script, FILE.js or FILE.py")
    run.add_argument("--config", metavar="FILE", help="an mcpServers JSON file adding or overriding "
                     "capability servers, and its policy (default: $CODEDESK_CONFIG)")
    run.add_argument("--timeout", type=float, metavar="SECONDS", help="timeout_seconds of the run")

    timeline = commands.add_parser(
        "timeline",
        help="print or export the session's timeline (runs and their capability calls)",
        description="The session's timeline: every run_js / run_py run and each capability call it made, "
        "secrets redacted. JSON Lines on stdout by default; --format html writes a self-contained report.",
    )
    timeline.add_argument("--run", metavar="ID", help="only this run")
    timeline.add_argument("--since", metavar="T", help="only entries at or after T (epoch seconds or ISO 8601)")
    timeline.add_argument("--server", metavar="NAME", help="only calls to this capability server")
    timeline.add_argument("--format", choices=("jsonl", "html"), default="jsonl")
    timeline.add_argument("--output", metavar="FILE", type=Path, help="write here instead (html: default in the "
                          "timeline's exports folder)")

    commands.add_parser(
        "desktop",
        help="the desktop session: up, down, status",
        description="Start, stop or inspect the desktop session.",
        add_help=False,
    )
    commands.add_parser("hub", help="the session hub: sessions as a service (REST API, MCP per session)",
                        add_help=False)
    commands.add_parser("session", help="the hub's client: create, list, show, pause, sleep, wake, delete, link",
                        add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `codedesk` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "desktop":
        from runtime.desktop import cli_main  # owned by the desktop-session module

        return int(cli_main(argv[1:]) or 0)
    if argv and argv[0] in ("hub", "session"):
        from runtime.hub import cli as hub_cli

        return (hub_cli.hub_main if argv[0] == "hub" else hub_cli.session_main)(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "timeline":
        return _timeline(args)
    return _run(args)


def _timeline(args: argparse.Namespace) -> int:
    import time

    from capabilities.contract import ToolError
    from capabilities.session_server import export
    from capabilities.session_server.store import TimelineReader, TimelineUnavailable, events_iter
    from capabilities.session_server.tools import parse_since

    try:
        since = parse_since(float(args.since) if args.since and args.since.replace(".", "", 1).isdigit()
                            else args.since)
        reader = TimelineReader()
    except (ToolError, TimelineUnavailable) as exc:
        print(f"codedesk: {exc}", file=sys.stderr)
        return 2
    with reader:
        entries = list(events_iter(reader, since=since, run=args.run, server=args.server))
        if args.format == "jsonl":
            text = export.jsonl(entries)
            if args.output is None:
                sys.stdout.write(text)
            else:
                args.output.write_text(text, encoding="utf-8")
            return 0
        title = f"codedesk timeline — {'run ' + args.run if args.run else 'session'}"
        report = export.html_report(reader, entries, title)
        if args.output is not None:
            args.output.write_text(report, encoding="utf-8")
            path = args.output
        else:
            path = reader.write_export(f"timeline-{args.run or 'all'}-{time.strftime('%Y%m%dT%H%M%S')}.html",
                                       report.encode())
    print(path)
    return 0


def _load(config: str | None):  # noqa: ANN202 - keeps runtime.config import lazy
    """The configured servers and the operator's policy; a bad config file ends with exit 2."""
    from runtime.config import ConfigError, load_policy, load_servers

    try:
        return load_servers(config), load_policy(config)
    except ConfigError as exc:
        print(f"codedesk: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def _serve(args: argparse.Namespace) -> int:
    # No garbage collection while the process starts: its imports make hundreds of thousands of
    # objects that live as long as it does, and collecting them again and again as they pile up
    # was 3-4% of a cold start. Serving turns it back on (runtime.server.heap_settled).
    gc.disable()
    token = given = None
    if args.http is not None:
        from runtime.auth import TOKEN_ENV, generate_token

        given = args.token if args.token is not None else (os.environ.get(TOKEN_ENV) or None)
        token = given if given is not None else generate_token()
        if not token.strip():
            print("codedesk: --token must not be empty", file=sys.stderr)
            return 2
    from runtime import engines

    engines.bound_malloc_arenas()
    servers, policy = _load(args.config)
    import anyio

    if args.http is None:
        from capabilities.stdio import serve
        from runtime.server import serve_stdio

        # the client closing the pipes is the normal end: status 0, no traceback
        serve(lambda: anyio.run(partial(serve_stdio, policy=policy), servers, args.start_servers))
        return 0
    from runtime.server import serve_http

    host, port = args.http
    try:
        anyio.run(partial(serve_http, token_given=given is not None, policy=policy), servers, host, port, token,
                  args.start_servers)
    except OSError as exc:
        print(f"codedesk: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _run(args: argparse.Namespace) -> int:
    import anyio

    file: Path = args.file
    language = {".js": "js", ".mjs": "js", ".ts": "js", ".py": "py"}.get(file.suffix.lower())
    if language is None:
        print(f"codedesk: {file}: expected a .js or .py file", file=sys.stderr)
        return 2
    try:
        code = file.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"codedesk: cannot read {file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    servers, policy = _load(args.config)
    arguments: dict[str, object] = {"code": code}
    if args.timeout is not None:
        arguments["timeout_seconds"] = args.timeout

    async def go():  # noqa: ANN202
        from runtime.server import Runtime

        async with Runtime(servers, policy=policy) as runtime:
            return await runtime.run(language, arguments, on_console=None)

    from runtime.results import describe_block

    result = anyio.run(go)
    for block in result.content:
        print(describe_block(block))
    return 1 if result.is_error else 0


if __name__ == "__main__":
    raise SystemExit(main())
