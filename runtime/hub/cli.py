"""`codedesk hub ...` (the service) and `codedesk session ...` (its command-line client)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from runtime.hub.errors import HubError

TOKEN_ENV = "CODEDESK_HUB_TOKEN"
URL_ENV = "CODEDESK_HUB_URL"
REPO = Path(__file__).resolve().parents[2]


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT such as 127.0.0.1:8780, got {value!r}")
    return host.strip("[]"), int(port)


def _data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "codedesk-hub"


def hub_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="codedesk hub", description=(
        "The session hub: creates, pauses, sleeps, wakes and ends sessions (one desktop container each) "
        "through a REST API, and serves each session's MCP endpoint with the session's own token."))
    p.add_argument("--http", metavar="HOST:PORT", type=_host_port, default=("127.0.0.1", 8780),
                   help="where to listen (default 127.0.0.1:8780; port 0 picks a free port)")
    p.add_argument("--backend", choices=["docker", "kubernetes"], default="docker", help=(
        "docker: the local engine (default); kubernetes: the cluster of $KUBECONFIG, or the one the hub "
        "runs in (objects from deploy/kubernetes/session.yaml; a pause is a sleep there)"))
    p.add_argument("--warm", type=int, default=0, metavar="N", help="keep N sessions started and unclaimed")
    p.add_argument("--token", help=f"the admin token (default: ${TOKEN_ENV}, else a random one printed at start)")
    p.add_argument("--data", type=Path, default=None, help=f"the hub's data directory (default {_data_dir()})")
    p.add_argument("--image", default="codedesk:latest", help="the sessions' default image")
    p.add_argument("--public-url", help="the hub's URL as clients reach it (default http://HOST:PORT)")
    p.add_argument("--max-sessions", type=int, default=20, help="most sessions at once (default 20)")
    p.add_argument("--max-cpus", type=float, default=4.0, help="most CPUs one session may ask for (default 4)")
    p.add_argument("--max-memory-mb", type=int, default=8192, help="most memory one session may ask for (default 8192)")
    p.add_argument("--idle-timeout", type=int, default=1800, metavar="SECONDS",
                   help="default idle_timeout_s: pause after it, sleep after twice it (default 1800; 0: never)")
    p.add_argument("--namespace", help="kubernetes: the sessions' namespace (default: the context's, else 'default')")
    p.add_argument("--kube-context", help="kubernetes: the kubeconfig context (default: the current one)")
    p.add_argument("--kube-address", choices=["pod", "service"], default="pod", help=(
        "kubernetes: reach a session at its pod's IP (default) or its Service's cluster DNS name"))
    p.add_argument("--seccomp", type=Path, default=REPO / "desktop-image" / "seccomp-chromium.json",
                   help="the sessions' seccomp profile (default: the image's, desktop-image/seccomp-chromium.json)")
    return p


def hub_main(argv: list[str]) -> int:
    args = hub_parser().parse_args(argv)
    import secrets

    import uvicorn

    from runtime.hub.app import HubApp
    from runtime.hub.service import HubSettings, SessionHub
    from runtime.hub.store import Store

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.token is not None:
        token, source = args.token, "from --token"
    elif os.environ.get(TOKEN_ENV):
        token, source = os.environ[TOKEN_ENV], f"from ${TOKEN_ENV}"
    else:
        token = secrets.token_hex(24)
        source = token
    if not token.strip():
        print("codedesk hub: --token must not be empty", file=sys.stderr)
        return 2
    if args.warm < 0 or args.max_sessions < 1:
        print("codedesk hub: --warm must be 0 or more and --max-sessions 1 or more", file=sys.stderr)
        return 2
    store = Store(args.data or _data_dir())
    hub_id = store.meta("hub_id")
    if args.backend == "docker":
        from runtime.hub.docker_backend import DockerBackend

        backend = DockerBackend(hub_id, args.seccomp)
    else:
        from runtime.hub.kubernetes_backend import KubernetesBackend

        backend = KubernetesBackend(hub_id, namespace=args.namespace, context=args.kube_context,
                                    address=args.kube_address)
    from runtime.listener import listen_tcp

    host, port = args.http
    try:
        sock = listen_tcp(host, port)
    except OSError as exc:
        print(f"codedesk hub: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    public = (args.public_url or f"http://{url_host}:{port}").rstrip("/")
    settings = HubSettings(public_url=public, image=args.image, warm=args.warm, max_sessions=args.max_sessions,
                           max_cpus=args.max_cpus, max_memory_mb=args.max_memory_mb,
                           idle_timeout_s=args.idle_timeout or None)
    hub = SessionHub(store, backend, settings)
    print(f"codedesk hub: {public}  (backend {backend.name}, data {store.path.parent})\n"
          f"  API:         {public}/v1/sessions  (OpenAPI: {public}/v1/openapi.json)\n"
          f"  admin token: {source}", file=sys.stderr, flush=True)
    config = uvicorn.Config(HubApp(hub, token), log_level="warning", lifespan="on", timeout_graceful_shutdown=5,
                            ws="websockets-sansio")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
    return 0


# ---------------------------------------------------------------------- codedesk session
def session_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="codedesk session", description=(
        f"Drive a session hub: --hub URL (default ${URL_ENV}, else http://127.0.0.1:8780) and its admin "
        f"token --token (default ${TOKEN_ENV}). Prints the hub's JSON answers."))
    p.add_argument("--hub", default=None, help="the hub's URL")
    p.add_argument("--token", default=None, help="the hub's admin token")
    sub = p.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="create a session; prints its MCP URL, token and viewer link")
    create.add_argument("--image")
    create.add_argument("--cpus", type=float)
    create.add_argument("--memory-mb", type=int)
    create.add_argument("--idle-timeout", type=int, metavar="SECONDS", dest="idle_timeout_s")
    create.add_argument("--ttl", type=int, metavar="SECONDS", dest="ttl_s")
    create.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    listing = sub.add_parser("list", help="list sessions")
    listing.add_argument("--state")
    listing.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    for name, text in (("show", "a session and its timeline"), ("pause", "freeze it in memory"),
                       ("sleep", "stop it, keeping its disk"), ("wake", "resume or start it"),
                       ("delete", "end it: container, disk and secrets gone")):
        sub.add_parser(name, help=text).add_argument("id")
    link = sub.add_parser("link", help="a viewer link (or --revoke LINK_ID)")
    link.add_argument("id")
    link.add_argument("--mode", choices=["view", "control"], default="view")
    link.add_argument("--expires-in", type=int, default=3600, metavar="SECONDS")
    link.add_argument("--revoke", metavar="LINK_ID")
    return p


def _pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"codedesk session: --meta {item!r}: write KEY=VALUE")
        out[key] = value
    return out


def session_main(argv: list[str]) -> int:
    args = session_parser().parse_args(argv)
    from runtime.hub.client import Client

    with Client(args.hub, args.token) as hub:
        try:
            if args.action == "create":
                fields = {k: getattr(args, k) for k in ("image", "idle_timeout_s", "ttl_s") if getattr(args, k) is not None}
                resources = {k: v for k, v in (("cpus", args.cpus), ("memory_mb", args.memory_mb)) if v is not None}
                if resources:
                    fields["resources"] = resources
                if args.meta:
                    fields["metadata"] = _pairs(args.meta)
                result = hub.create(**fields)
            elif args.action == "list":
                result = hub.list(args.state, _pairs(args.meta))
            elif args.action == "link":
                result = (hub.revoke_link(args.id, args.revoke) if args.revoke
                          else hub.link(args.id, args.mode, args.expires_in))
            else:
                result = getattr(hub, args.action)(args.id)
        except HubError as exc:
            print(f"codedesk session: {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
            for line in exc.extra.get("log", []):
                print(f"  log: {line}", file=sys.stderr)
            return 1
    print(json.dumps(result, indent=2))
    return 0
