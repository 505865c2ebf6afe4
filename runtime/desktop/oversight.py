"""The oversight relay: what the agent is doing, shown live to the people at the control viewers,
and the approvals the operator's policy asks of them (`runtime/oversight.py` is the runtime's end).

The supervisor serves two sockets and relays JSON lines between them:

    runtime side  <data>/oversight.sock (or $CODEDESK_OVERSIGHT_SOCKET), the runtime's user only
                  (0600; with $CODEDESK_SPAWN_FOR, that user's, and each peer's uid is checked)
    viewer side   <viewer dir>/oversight.sock, the viewer account's (0600), which websockify
                  reaches for the `<secret>.oversight` token; no program of the desktop user can
                  reach either, so none can approve its own request or watch the approvals

From a runtime:
    {"t": "event", "e": {...}}            a run or call began or ended: to every viewer (the last
                                          RECENT are kept for viewers that connect later)
    {"t": "ask", "id": ..., "request": {...}}   a call waits for a person's approval: to every
                                          viewer; answered {"t": "unwatched", "id"} at once when
                                          no control viewer is connected (the runtime then asks
                                          elsewhere, or refuses)
    {"t": "withdraw", "id": ...}          the ask is over (timed out, or answered elsewhere)
    {"t": "video", "id": ..., "action": "start" | "stop" | "status", "segmentSeconds"?: N}
                                          the screen recorder (`video.py`), answered
                                          {"t": "video", "id", "state": {...}} or {..., "error", "kind"}
From a viewer:
    {"t": "answer", "id": ..., "answer": "accept" | "decline"}   the first answer wins; the
                                          runtime that asked gets {"t": "answer", "id", "answer"}
To viewers, besides: {"t": "hello", "recent": [...], "pending": [...], "lease": holder} on
connecting, {"t": "closed", "id", "answer"} when an ask ends, {"t": "lease", "holder"}.
To runtimes, besides: {"t": "viewers", "count": N} when it changes (and on connecting), so a
runtime holds its veto window only while somebody watches.
To the session's recorder (the runtime connected longest): {"t": "input", "inputs": N,
"since": t0, "until": t1}, a person's input at the viewer coalesced per second, for its timeline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("codedesk.desktop.oversight")

SOCKET_ENV = "CODEDESK_OVERSIGHT_SOCKET"
SOCKET_NAME = "oversight.sock"
RECENT = 50
INPUT_EVERY = 1.0  # seconds: a person's input goes to the timeline at most this often
_VIEWER_LINE = 4096
_RUNTIME_LINE = 1 << 20
_ANSWERS = frozenset({"accept", "decline"})


def runtime_socket(data: Path) -> Path:
    """Where the runtime's end connects: `$CODEDESK_OVERSIGHT_SOCKET`, else `<data>/oversight.sock`."""
    given = os.environ.get(SOCKET_ENV)
    return Path(given) if given else data / SOCKET_NAME


class _Peer:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    def send(self, message: dict[str, Any]) -> None:
        if self.writer.is_closing():
            return
        if self.writer.transport.get_write_buffer_size() > 4 << 20:  # a peer that stopped reading
            self.writer.close()
            return
        self.writer.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")


class OversightRelay:
    """Between the session's runtimes and the people at its control viewers."""

    def __init__(self, view_only: bool, lease_holder: Callable[[], str],
                 video: Callable[[str, int | None], dict[str, Any]] | None = None) -> None:
        self.view_only = view_only  # a view-only session's viewers are never asked
        self._lease_holder = lease_holder
        self._video = video  # the screen recorder's requests: (action, segment seconds) -> its state
        self.viewers: set[_Peer] = set()
        self.runtimes: list[_Peer] = []  # in the order they connected: the first records input
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self.pending: dict[str, tuple[_Peer, dict[str, Any]]] = {}
        self._input: list[float] = []  # [count, since, until] not yet sent
        self._input_flush: asyncio.TimerHandle | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Future] = set()
        self._runtime_path: Path | None = None

    # -- serving ------------------------------------------------------------------------------

    async def serve(self, viewer_dir: Path, runtime_path: Path, viewer_owner: tuple[int, int] | None,
                    runtime_uid: int | None) -> None:
        """Listen on both ends. `viewer_owner` (uid, gid) owns the viewer's socket (None: ours);
        `runtime_uid` alone may connect to the runtime's (None: our own user; `spawn.client_uid`)."""
        from .spawn import socket_folder

        allowed = os.geteuid() if runtime_uid is None else runtime_uid
        socket_folder(runtime_path)
        runtime_path.unlink(missing_ok=True)
        self._runtime_path = runtime_path
        old = os.umask(0o177)
        try:
            self._servers.append(await asyncio.start_unix_server(
                lambda r, w: self._runtime(r, w, allowed), path=str(runtime_path), limit=_RUNTIME_LINE))
            self._servers.append(await asyncio.start_unix_server(
                self._viewer, path=str(viewer_dir / SOCKET_NAME), limit=_VIEWER_LINE))
        finally:
            os.umask(old)
        if os.geteuid() == 0:
            os.chown(runtime_path, allowed, -1)
            if viewer_owner is not None:
                os.chown(viewer_dir / SOCKET_NAME, *viewer_owner)
        os.chmod(runtime_path, 0o600)
        os.chmod(viewer_dir / SOCKET_NAME, 0o600)

    def close(self) -> None:
        for server in self._servers:
            server.close()
        for peer in [*self.viewers, *self.runtimes]:
            peer.writer.close()
        if self._runtime_path is not None:
            self._runtime_path.unlink(missing_ok=True)

    async def _runtime(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, allowed: int) -> None:
        from .spawn import peer

        _, uid = peer(writer.get_extra_info("socket"))
        if uid not in (allowed, os.geteuid()):
            log.warning("oversight: refused a runtime connection from uid %d", uid)
            writer.close()
            return
        peer = _Peer(writer)
        self.runtimes.append(peer)
        peer.send({"t": "viewers", "count": self._watching()})
        try:
            async for message in _lines(reader):
                kind = message.get("t")
                if kind == "event" and isinstance(message.get("e"), dict):
                    self.recent.append(message["e"])
                    self._to_viewers({"t": "event", "e": message["e"]})
                elif kind == "ask" and isinstance(message.get("id"), str) and isinstance(message.get("request"), dict):
                    if self.view_only or not self.viewers:
                        peer.send({"t": "unwatched", "id": message["id"]})
                        continue
                    self.pending[message["id"]] = (peer, message["request"])
                    self._to_viewers({"t": "ask", "id": message["id"], "request": message["request"]})
                elif kind == "video" and isinstance(message.get("id"), str):
                    # in a task: stopping waits for ffmpeg to finish its segment
                    task = asyncio.ensure_future(self._video_request(peer, message))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif kind == "withdraw" and isinstance(message.get("id"), str):
                    if self.pending.pop(message["id"], None) is not None:
                        self._to_viewers({"t": "closed", "id": message["id"], "answer": "withdrawn"})
        finally:
            self.runtimes.remove(peer)
            for ask_id in [i for i, (asker, _) in self.pending.items() if asker is peer]:
                del self.pending[ask_id]
                self._to_viewers({"t": "closed", "id": ask_id, "answer": "withdrawn"})
            writer.close()

    async def _viewer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _Peer(writer)
        self.viewers.add(peer)
        self._count_changed()
        peer.send({"t": "hello", "recent": list(self.recent), "lease": self._lease_holder(),
                   "pending": [{"id": i, "request": r} for i, (_, r) in self.pending.items()]})
        try:
            async for message in _lines(reader):
                if message.get("t") != "answer" or message.get("answer") not in _ANSWERS:
                    peer.send({"t": "error", "message": 'send {"t": "answer", "id": ..., "answer": "accept" | "decline"}'})
                    continue
                entry = self.pending.pop(str(message.get("id")), None)
                if entry is None:  # answered by another viewer, withdrawn, or unknown
                    continue
                entry[0].send({"t": "answer", "id": message["id"], "answer": message["answer"]})
                self._to_viewers({"t": "closed", "id": message["id"], "answer": message["answer"]})
                log.info("a person at the viewer answered %s to an approval", message["answer"])
        finally:
            self.viewers.discard(peer)
            self._count_changed()
            writer.close()

    async def _video_request(self, peer: _Peer, message: dict[str, Any]) -> None:
        from .video import VideoError

        action, seconds = message.get("action"), message.get("segmentSeconds")
        if self._video is None:
            answer = {"error": "this session has no screen recorder"}
        elif action not in ("start", "stop", "status") or not (seconds is None or type(seconds) is int):
            answer = {"error": 'send {"t": "video", "id", "action": "start" | "stop" | "status", "segmentSeconds"?}'}
        else:
            try:
                answer = {"state": await asyncio.to_thread(self._video, action, seconds)}
            except VideoError as exc:
                answer = {"error": str(exc), "kind": exc.kind}
        peer.send({"t": "video", "id": message["id"], **answer})

    def _watching(self) -> int:
        return 0 if self.view_only else len(self.viewers)

    def _count_changed(self) -> None:
        for peer in self.runtimes:
            peer.send({"t": "viewers", "count": self._watching()})

    def _to_viewers(self, message: dict[str, Any]) -> None:
        for peer in list(self.viewers):
            peer.send(message)

    # -- from the input lease -----------------------------------------------------------------

    def lease_changed(self, holder: str) -> None:
        self._to_viewers({"t": "lease", "holder": holder})

    def person_input(self, count: int, now: float | None = None) -> None:
        """A person's input at the viewer: counted, and sent to the recorder once a second."""
        now = time.time() if now is None else now
        if self._input:
            self._input[0] += count
            self._input[2] = now
        else:
            self._input = [count, now, now]
        if self._input_flush is None:
            self._input_flush = asyncio.get_running_loop().call_later(INPUT_EVERY, self._send_input)

    def _send_input(self) -> None:
        self._input_flush = None
        if not self._input:
            return
        count, since, until = self._input
        self._input = []
        if self.runtimes:
            self.runtimes[0].send({"t": "input", "inputs": int(count), "since": since, "until": until})


async def _lines(reader: asyncio.StreamReader):
    """The JSON objects a peer sends, one a line; a line too long or not an object ends the peer."""
    while True:
        try:
            line = await reader.readline()
        except (ValueError, asyncio.LimitOverrunError, ConnectionError):
            return
        if not line:
            return
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        yield message
