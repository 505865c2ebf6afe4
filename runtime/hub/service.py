"""The hub's logic: sessions' lifecycles over a backend, the limits, the idle policy, the warm
pool, the viewer links, and reconciliation of the store with the backend.

One `SessionHub` per process. Its records live in memory and are written through to the
store on every change; each session has a lock, held across a backend operation, so a wake, a
pause and a delete of one session never interleave. Backend calls block, so they run in
worker threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from runtime.hub.errors import (BackendUnavailable, HubError, InvalidRequest, LimitReached, SessionConflict,
                                SessionGone, SessionNotFound, SessionStartFailed, Unauthorized)
from runtime.hub.models import STATES, CreateSession, Resources
from runtime.hub.store import SessionRecord, Store

log = logging.getLogger("codedesk.hub")

RUNTIME_PORT = 8765  # the session's runtime (MCP over HTTP) and its viewer, inside the session
VIEWER_PORT = 6080
TICK_S = 1.0
# After a claim, the pool is refilled this much later: a new session's start takes the CPU for
# seconds, and the claimer's first requests (the reason for the pool) come first.
POOL_REFILL_DELAY_S = 3.0
RECONCILE_EVERY_S = 5.0
SECCOMP_HINT = ("the container's seccomp profile is missing: run it with --security-opt "
                "seccomp=desktop-image/seccomp-chromium.json")


@dataclass
class HubSettings:
    """What `codedesk hub` was started with."""

    public_url: str
    image: str = "codedesk:latest"
    warm: int = 0
    max_sessions: int = 20
    max_cpus: float = 4.0
    max_memory_mb: int = 8192
    default_resources: dict[str, Any] = field(default_factory=lambda: {"cpus": 2.0, "memory_mb": 3072, "pids": 4096})
    idle_timeout_s: int | None = 1800
    start_timeout_s: float = 180.0
    viewer_link_s: int = 3600


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class SessionHub:
    def __init__(self, store: Store, backend: Any, settings: HubSettings) -> None:
        self.store = store
        self.backend = backend
        self.settings = settings
        self.hub_id = store.meta("hub_id")
        self._link_key = store.meta("link_key", lambda: secrets.token_hex(32)).encode()
        self._records: dict[str, SessionRecord] = {r.id: r for r in store.all(include_deleted=True)}
        self._locks: dict[str, asyncio.Lock] = {}
        self._endpoints: dict[str, dict[int, str]] = {}  # session -> {inner port: "host:port"}
        self._activity: dict[str, float] = {}
        self._backend_up = False
        self._reconciled = False
        self._warming = 0
        self._last_claim = -POOL_REFILL_DELAY_S
        self._tasks: set[asyncio.Task] = set()
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None), trust_env=False,
                                      limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100))

    # ------------------------------------------------------------------ helpers
    def _lock(self, session_id: str) -> asyncio.Lock:
        return self._locks.setdefault(session_id, asyncio.Lock())

    def _event(self, rec: SessionRecord | None, event: str, detail: str = "") -> None:
        sid = rec.id if rec else None
        self.store.event(sid, event, detail)
        log.info("%s%s%s", f"session {sid} " if sid else "", event, f": {detail}" if detail else "")

    def _set_state(self, rec: SessionRecord, state: str, detail: str = "", error: str | None = None) -> None:
        assert state in STATES
        changed = rec.state != state
        rec.state = state
        rec.state_since = time.time()
        rec.error = error
        self.store.update(rec)
        if changed:
            self._event(rec, state, detail)

    async def _backend(self, fn, *args):  # noqa: ANN001, ANN202
        """A blocking backend call in a worker thread; marks the backend down when it is."""
        try:
            result = await anyio.to_thread.run_sync(lambda: fn(*args))
        except BackendUnavailable:
            if self._backend_up:
                self._event(None, "backend down", self.backend.name)
            self._backend_up = False
            raise
        if not self._backend_up:
            self._backend_up = True
        return result

    def record(self, session_id: str) -> SessionRecord:
        rec = self._records.get(session_id)
        if rec is None or (rec.claimed_at is None and rec.state != "deleted"):
            raise SessionNotFound(f"no session {session_id!r}",
                                  "list the sessions (GET /v1/sessions, codedesk session list) for their ids")
        if rec.state == "deleted":
            raise SessionGone(f"session {session_id} was {'ended (' + rec.ended_reason + ')' if rec.ended_reason else 'deleted'}"
                              f" at {rec.public()['state_since']}: its container and disk are gone",
                              "create a new session (POST /v1/sessions)")
        return rec

    def public(self, rec: SessionRecord, timeline: bool = False) -> dict[str, Any]:
        out = rec.public()
        out["mcp_url"] = self.mcp_url(rec.id)
        if timeline:
            out["timeline"] = self.store.events(rec.id)
        return out

    def mcp_url(self, session_id: str) -> str:
        return f"{self.settings.public_url}/v1/sessions/{session_id}/mcp"

    # ------------------------------------------------------------------ life of the hub
    async def start(self) -> None:
        try:
            await self._backend(self.backend.ping)
            await self.reconcile()
        except BackendUnavailable as exc:
            log.warning("backend %s is down: %s; %s", self.backend.name, exc.message, exc.fix)
        task = asyncio.get_running_loop().create_task(self._loop())
        self._tasks.add(task)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass
        self._flush_activity()
        await self.http.aclose()

    async def _loop(self) -> None:
        last_reconcile = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            try:
                if not self._backend_up or time.monotonic() - last_reconcile >= RECONCILE_EVERY_S:
                    last_reconcile = time.monotonic()
                    await self._backend(self.backend.ping)
                    await self.reconcile()
                self._flush_activity()
                await self._idle_policy()
                self._fill_pool()
            except BackendUnavailable:
                pass
            except Exception:  # noqa: BLE001 - the loop must outlive one bad tick
                log.exception("hub tick failed")

    def _flush_activity(self) -> None:
        if self._activity:
            activity, self._activity = self._activity, {}
            self.store.touch_many(activity)

    # ------------------------------------------------------------------ reconciliation
    async def reconcile(self) -> None:
        """Make the records agree with what the backend holds: a session whose container is gone
        is `failed` (never recreated behind the caller's back), one stopped or started outside the
        hub follows it, and an object of this hub that no record claims (an orphan) is removed."""
        listed_at = time.time()
        found = await self._backend(self.backend.list_sessions)
        for rec in list(self._records.values()):
            # A change made while the backend was listed is newer than the listing: keep it.
            if rec.state == "deleted" or self._lock(rec.id).locked() or rec.state_since >= listed_at:
                continue
            status = found.get(rec.id)
            if rec.claimed_at is None and status != "running":
                # A pool session that is not ready and running is of no use: remove it.
                async with self._lock(rec.id):
                    await self._backend(self.backend.remove, rec.id)
                    self._set_state(rec, "deleted", "warm pool session lost its container")
                continue
            if status in (None, "volume-only"):
                if rec.state != "failed":
                    self._set_state(rec, "failed", "container missing", error=(
                        "its container was removed outside the hub; it is not recreated. Delete the session "
                        f"(codedesk session delete {rec.id}) and create a new one"))
            elif status == "paused" and rec.state in ("running", "sleeping", "creating"):
                self._set_state(rec, "paused", "found paused in the backend")
            elif status == "running" and rec.state in ("sleeping", "paused", "creating"):
                self._set_state(rec, "running", "found running in the backend")
            elif status in ("exited", "created", "dead") and rec.state in ("running", "paused", "creating"):
                self._set_state(rec, "sleeping", f"its container stopped outside the hub ({status}); a request wakes it")
        for session_id in found:
            rec = self._records.get(session_id)
            if rec is None or rec.state == "deleted":
                if rec is not None and (self._lock(session_id).locked() or rec.state_since >= listed_at):
                    continue
                await self._backend(self.backend.remove, session_id)
                self._event(rec, "orphan removed", f"{self.backend.name} objects of session {session_id}")
        self._reconciled = True

    # ------------------------------------------------------------------ creation
    def _limits(self, body: CreateSession) -> dict[str, Any]:
        resources = dict(self.settings.default_resources)
        if body.resources is not None:
            resources.update({k: v for k, v in body.resources.model_dump().items() if v is not None})
        if resources.get("cpus", 0) > self.settings.max_cpus:
            raise LimitReached(f"resources.cpus {resources['cpus']} is over the hub's limit of "
                               f"{self.settings.max_cpus} per session", "ask for fewer, or start the hub "
                               "with a higher --max-cpus", limit="max_cpus", field="resources.cpus")
        if resources.get("memory_mb", 0) > self.settings.max_memory_mb:
            raise LimitReached(f"resources.memory_mb {resources['memory_mb']} is over the hub's limit of "
                               f"{self.settings.max_memory_mb} per session", "ask for less, or start the "
                               "hub with a higher --max-memory-mb", limit="max_memory_mb", field="resources.memory_mb")
        claimed = [r for r in self._records.values() if r.claimed_at is not None and r.state != "deleted"]
        if len(claimed) >= self.settings.max_sessions:
            raise LimitReached(f"the hub holds {len(claimed)} sessions, its limit (--max-sessions "
                               f"{self.settings.max_sessions})", "delete a session (codedesk session list, then "
                               "codedesk session delete ID), or start the hub with a higher --max-sessions",
                               limit="max_sessions")
        return resources

    async def create(self, body: CreateSession) -> dict[str, Any]:
        if body.egress not in (None, "default"):
            raise InvalidRequest("egress: only 'default' is offered", "leave egress out", field="egress")
        resources = self._limits(body)
        image = body.image or self.settings.image
        token = secrets.token_hex(24)
        claimed = self._claim_warm(image, resources)
        if claimed is not None:
            rec = claimed
        else:
            await self._backend(self.backend.ping)  # refuse before anything is written
            await self._backend(self.backend.check_image, image)
            rec = self._new_record(image, resources)
            rec.claimed_at = rec.created_at
        rec.token_hash = token_hash(token)
        rec.metadata = dict(body.metadata or {})
        rec.idle_timeout_s = body.idle_timeout_s if body.idle_timeout_s is not None else self.settings.idle_timeout_s
        rec.ttl_s = body.ttl_s
        if claimed is not None:
            rec.claimed_at = rec.last_activity = time.time()
            self.store.update(rec)
            self._event(rec, "claimed", "from the warm pool")
            self._last_claim = time.monotonic()  # the hub's loop refills the pool POOL_REFILL_DELAY_S later
        else:
            self.store.insert(rec)
            self._records[rec.id] = rec
            self._event(rec, "creating", f"image {image}, resources {resources}")
            await self._start_new(rec)
        out = self.public(rec)
        out["token"] = token
        out["viewer_url"] = self.viewer_link(rec.id, "control", self.settings.viewer_link_s)["url"]
        return out

    def _new_record(self, image: str, resources: dict[str, Any]) -> SessionRecord:
        now = time.time()
        return SessionRecord(id=secrets.token_hex(6), state="creating", image=image, resources=resources,
                             idle_timeout_s=None, ttl_s=None, metadata={}, token_hash=None,
                             runtime_token=secrets.token_hex(24), created_at=now, last_activity=now,
                             state_since=now)

    async def _start_new(self, rec: SessionRecord, warm_up: bool = False) -> None:
        """Create and start the session; with `warm_up` (a pool session) it becomes claimable only
        once warmed up, holding its lock until then."""
        async with self._lock(rec.id):
            try:
                rec.backend_ref = await self._backend(self.backend.create, rec.id, rec.image, rec.resources,
                                                      rec.runtime_token)
                self.store.update(rec)
                await self._wait_ready(rec)
            except HubError as exc:
                self._set_state(rec, "failed", "did not start", error=f"{exc.message}. {exc.fix}".strip())
                raise
            detail = "runtime answers"
            if warm_up:
                detail = ("warmed up: its engine ran, its desktop is up" if await self._warm_up(rec)
                          else "runtime answers (the warm-up did not finish; see the hub's log)")
            rec.last_activity = time.time()  # idleness counts from when the session could be used
            self._set_state(rec, "running" if rec.claimed_at else "warm", detail)

    async def _wait_ready(self, rec: SessionRecord) -> str:
        """Wait until the session's runtime answers /healthz; its base URL. A container that exits
        meanwhile fails the start with its log's last lines (and the fix, when it is known)."""
        deadline = time.monotonic() + self.settings.start_timeout_s
        checked = 0.0
        base = None
        while time.monotonic() < deadline:
            # The backend is asked again every second, or every quarter second while the session has
            # no address yet (a pod being scheduled); its runtime's /healthz every 50 ms.
            if time.monotonic() - checked > (0.25 if base is None else 1.0):
                checked = time.monotonic()
                status = await self._backend(self.backend.status, rec.id)
                if status["status"] in ("exited", "dead", "missing"):
                    raise self._start_failure(rec, status)
                self._endpoints[rec.id] = status.get("addresses", {})
                address = self._endpoints[rec.id].get(RUNTIME_PORT)
                base = f"http://{address}" if address else None
            if base:
                try:
                    r = await self.http.get(base + "/healthz", timeout=2.0)
                    if r.status_code == 200:
                        return base
                except httpx.HTTPError:
                    pass
            await asyncio.sleep(0.05)
        raise SessionStartFailed(f"session {rec.id}'s runtime did not answer within "
                                 f"{self.settings.start_timeout_s:.0f} s",
                                 f"see the session's log ({self.backend.logs_hint(rec.id)})")

    def _start_failure(self, rec: SessionRecord, status: dict[str, Any]) -> SessionStartFailed:
        logs = self.backend.logs(rec.id, 20) if status["status"] != "missing" else ""
        tail = [line for line in logs.splitlines() if line.strip()][-8:]
        fix = f"see the session's log below ({self.backend.logs_hint(rec.id)})"
        if "seccomp" in logs:
            fix = ("the session's container ran without the seccomp profile Chromium needs: pass "
                   "--security-opt seccomp=desktop-image/seccomp-chromium.json (the hub's --seccomp FILE)")
        reason = f", {status['reason']}" if status.get("reason") else ""
        return SessionStartFailed(f"session {rec.id}'s container {status['status']} during start "
                                  f"(exit code {status.get('exit_code')}{reason})", fix, log=tail)

    # ------------------------------------------------------------------ warm pool
    def _claim_warm(self, image: str, resources: dict[str, Any]) -> SessionRecord | None:
        if image != self.settings.image or resources != self.settings.default_resources:
            return None
        for rec in self._records.values():
            if rec.claimed_at is None and rec.state == "warm" and not self._lock(rec.id).locked():
                rec.state = "running"
                rec.state_since = time.time()
                return rec
        return None

    def _fill_pool(self) -> None:
        if not self._backend_up or not self._reconciled:
            return
        if time.monotonic() - self._last_claim < POOL_REFILL_DELAY_S:
            return  # the claimer's first requests first: a session starting beside them would slow them
        pool = [r for r in self._records.values() if r.claimed_at is None and r.state in ("warm", "creating")]
        if len(pool) + self._warming < self.settings.warm and self._warming == 0:
            self._warming += 1
            task = asyncio.get_running_loop().create_task(self._make_warm())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _make_warm(self) -> None:
        try:
            rec = self._new_record(self.settings.image, dict(self.settings.default_resources))
            self.store.insert(rec)
            self._records[rec.id] = rec
            self._event(rec, "creating", "for the warm pool")
            await self._start_new(rec, warm_up=True)
        except HubError as exc:
            log.warning("warm pool: %s %s", exc.message, exc.fix)
        finally:
            self._warming -= 1

    async def _warm_up(self, rec: SessionRecord) -> bool:
        """Ready a pool session for its first caller: one empty run_js (the runtime compiles its JS
        engine on its first run, about a second here), then its desktop up (the viewer's secret is
        written once every part of it is ready), so neither lands on the caller's first request.
        Whether both happened; a session that did not warm up is handed out all the same."""
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        import httpx2

        base = f"http://{self._endpoints[rec.id][RUNTIME_PORT]}"
        try:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {rec.runtime_token}"},
                                          timeout=httpx2.Timeout(30.0, read=120)) as client:
                async with streamable_http_client(f"{base}/mcp", http_client=client) as (read, write, *_):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        await session.call_tool("run_js", {"code": "1"})
            deadline = time.monotonic() + self.settings.start_timeout_s
            while not await self._backend(self.backend.viewer_secret, rec.id):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"its desktop was not up within {self.settings.start_timeout_s:.0f} s")
                await asyncio.sleep(0.5)
        except Exception as exc:  # noqa: BLE001 - a pool session that cannot warm up is still usable
            log.warning("warm pool: session %s did not warm up: %s", rec.id, exc)
            return False
        return True

    # ------------------------------------------------------------------ state changes
    async def pause(self, session_id: str, reason: str = "asked") -> dict[str, Any]:
        """Freeze the session in memory; on a backend that cannot (Kubernetes), put it to sleep."""
        if not getattr(self.backend, "can_pause", True):
            return await self.sleep(session_id, f"{reason} (a pause is a sleep on {self.backend.name})")
        rec = self.record(session_id)
        async with self._lock(session_id):
            if rec.state == "running":
                await self._backend(self.backend.pause, session_id)
                self._set_state(rec, "paused", reason)
            elif rec.state != "paused":
                raise self._conflict(rec, "pause")
        return self.public(rec)

    async def sleep(self, session_id: str, reason: str = "asked") -> dict[str, Any]:
        rec = self.record(session_id)
        async with self._lock(session_id):
            if rec.state in ("running", "paused"):
                if rec.state == "paused":
                    await self._backend(self.backend.unpause, session_id)
                await self._backend(self.backend.stop, session_id)
                self._endpoints.pop(session_id, None)
                self._set_state(rec, "sleeping", reason)
            elif rec.state != "sleeping":
                raise self._conflict(rec, "sleep")
        return self.public(rec)

    async def wake(self, session_id: str, reason: str = "asked") -> dict[str, Any]:
        await self.ready(session_id, reason)
        return self.public(self.record(session_id))

    async def ready(self, session_id: str, reason: str = "MCP request") -> str:
        """The base URL of the session's runtime, waking or resuming the session first."""
        rec = self.record(session_id)
        address = self._endpoints.get(session_id, {}).get(RUNTIME_PORT)
        if rec.state == "running" and address:
            return f"http://{address}"
        async with self._lock(session_id):
            if rec.state == "paused":
                await self._backend(self.backend.unpause, session_id)
                self._activity[session_id] = time.time()
                rec.last_activity = time.time()
                self._set_state(rec, "running", f"resumed: {reason}")
            elif rec.state == "sleeping":
                await self._backend(self.backend.start, session_id)
                rec.last_activity = time.time()
                self._event(rec, "waking", reason)
                await self._wait_ready(rec)
                self._set_state(rec, "running", f"woken: {reason}")
            elif rec.state not in ("running",):
                raise self._conflict(rec, "reach")
            if not self._endpoints.get(session_id, {}).get(RUNTIME_PORT):
                status = await self._backend(self.backend.status, session_id)
                if status["status"] == "missing":
                    self._set_state(rec, "failed", "container missing",
                                    error="its container was removed outside the hub; it is not recreated")
                    raise self._conflict(rec, "reach")
                self._endpoints[session_id] = status.get("addresses", {})
            return f"http://{self._endpoints[session_id][RUNTIME_PORT]}"

    def lost(self, session_id: str) -> None:
        """The runtime did not answer: forget its address, so the next request asks the backend."""
        self._endpoints.pop(session_id, None)

    async def delete(self, session_id: str, reason: str | None = None) -> dict[str, Any]:
        rec = self.record(session_id)
        async with self._lock(session_id):
            await self._backend(self.backend.remove, session_id)
            self._endpoints.pop(session_id, None)
            self.store.revoke_links_of(session_id)
            rec.runtime_token = ""
            rec.token_hash = None
            rec.ended_reason = reason
            self._set_state(rec, "deleted", reason or "asked")
        return self.public(rec)

    def _conflict(self, rec: SessionRecord, action: str) -> HubError:
        if rec.state == "failed":
            return SessionConflict(f"session {rec.id} failed: {rec.error}",
                                   f"delete it (codedesk session delete {rec.id}) and create a new one")
        return SessionConflict(f"session {rec.id} is {rec.state}; it cannot {action} now",
                               "wait until it is running (GET /v1/sessions/{id} shows its state) and retry")

    # ------------------------------------------------------------------ listing
    def list(self, state: str | None = None, metadata: dict[str, str] | None = None) -> list[dict[str, Any]]:
        if state is not None and state not in STATES:
            raise InvalidRequest(f"unknown state {state!r}", f"use one of: {', '.join(STATES)}", field="state")
        out = []
        for rec in self._records.values():
            if rec.claimed_at is None and state != "warm":
                continue
            if state is None and rec.state == "deleted":
                continue
            if state is not None and rec.state != state:
                continue
            if metadata and any(rec.metadata.get(k) != v for k, v in metadata.items()):
                continue
            out.append(self.public(rec))
        return out

    # ------------------------------------------------------------------ MCP access
    def check_token(self, session_id: str, given: str) -> SessionRecord:
        rec = self._records.get(session_id)
        if rec is None or rec.claimed_at is None or rec.token_hash is None:
            if rec is not None and rec.state == "deleted":
                self.record(session_id)  # raises SessionGone
            raise SessionNotFound(f"no session {session_id!r}", "check the MCP URL the hub gave at creation")
        if not hmac.compare_digest(token_hash(given), rec.token_hash):
            raise Unauthorized(f"this token is not session {session_id}'s",
                               "send 'Authorization: Bearer <token>' with the token POST /v1/sessions returned "
                               "for this session")
        return rec

    def touch(self, session_id: str) -> None:
        now = time.time()
        self._activity[session_id] = now
        rec = self._records.get(session_id)
        if rec is not None:
            rec.last_activity = now

    # ------------------------------------------------------------------ idle policy
    async def _idle_policy(self) -> None:
        now = time.time()
        for rec in list(self._records.values()):
            if rec.claimed_at is None or rec.state in ("deleted", "failed", "creating") or self._lock(rec.id).locked():
                continue
            try:
                if rec.ttl_s is not None and now - rec.claimed_at >= rec.ttl_s:
                    await self.delete(rec.id, reason=f"ttl {rec.ttl_s} s reached")
                    continue
                idle = now - rec.last_activity
                if rec.idle_timeout_s is None:
                    continue
                if rec.state == "running" and idle >= rec.idle_timeout_s:
                    await self.pause(rec.id, f"idle: no MCP request for {idle:.0f} s")
                elif rec.state == "paused" and idle >= 2 * rec.idle_timeout_s:
                    await self.sleep(rec.id, f"idle: no MCP request for {idle:.0f} s")
            except HubError as exc:
                log.warning("idle policy: session %s: %s", rec.id, exc.message)

    # ------------------------------------------------------------------ viewer links
    def _sign(self, link_id: str, session_id: str, mode: str, expires_at: int) -> str:
        msg = f"{link_id}.{session_id}.{mode}.{expires_at}".encode()
        return hmac.new(self._link_key, msg, hashlib.sha256).hexdigest()[:32]

    def viewer_link(self, session_id: str, mode: str, expires_in_s: int) -> dict[str, Any]:
        rec = self.record(session_id)
        link_id = secrets.token_hex(8)
        expires_at = int(time.time() + expires_in_s)
        token = f"{link_id}.{expires_at}.{self._sign(link_id, rec.id, mode, expires_at)}"
        self.store.add_link(link_id, rec.id, mode, expires_at)
        self._event(rec, "viewer link", f"{mode} link {link_id} until {expires_at}")
        url = f"{self.settings.public_url}/v1/viewer/{token}/viewer.html?token={token}"
        if mode == "view":
            url += "&view_only=1"
        return {"id": link_id, "mode": mode, "url": url,
                "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))}

    def revoke_link(self, session_id: str, link_id: str) -> None:
        self.record(session_id)
        link = self.store.link(link_id)
        if link is None or link["session_id"] != session_id:
            raise SessionNotFound(f"session {session_id} has no viewer link {link_id!r}",
                                  "use the id POST /v1/sessions/{id}/viewer-links returned")
        self.store.revoke_link(link_id)
        self._event(self._records[session_id], "viewer link revoked", link_id)

    def check_link(self, token: str) -> tuple[SessionRecord, str]:
        """The session and mode a viewer link opens, or Unauthorized saying why not."""
        try:
            link_id, expires, sig = token.split(".")
            expires_at = int(expires)
        except ValueError:
            raise Unauthorized("not a viewer link", "ask for one: POST /v1/sessions/{id}/viewer-links") from None
        link = self.store.link(link_id)
        if link is None or not hmac.compare_digest(sig, self._sign(link_id, link["session_id"], link["mode"], expires_at)) \
                or int(link["expires_at"]) != expires_at:
            raise Unauthorized("this viewer link is not valid", "ask for a new one: codedesk session link ID")
        if link["revoked_at"] is not None:
            raise Unauthorized("this viewer link was revoked", "ask for a new one: codedesk session link ID")
        if time.time() >= expires_at:
            raise Unauthorized("this viewer link has expired", "ask for a new one: codedesk session link ID")
        return self.record(link["session_id"]), link["mode"]

    async def viewer_upstream(self, session_id: str) -> tuple[str, str]:
        """The session's viewer address ("host:port") and secret, waking the session first."""
        await self.ready(session_id, "viewer")
        self.touch(session_id)
        secret = await self._backend(self.backend.viewer_secret, session_id)
        if not secret:
            raise SessionConflict(f"session {session_id}'s desktop is still starting", "reload the page in a few seconds")
        return self._endpoints[session_id][VIEWER_PORT], secret


def resources_schema() -> dict[str, Any]:
    return Resources.model_json_schema()
