"""A person's input through the viewer, and the input lease it takes (`capabilities/input_lease.py`).

websockify hands the viewer's RFB stream to `input.sock`, served here, which passes it on to
x11vnc's socket unchanged while reading what the client sends (`runtime.desktop.rfb`): a key or
pointer message is a person using the screen and makes the lease theirs (not the clipboard,
which noVNC sends by itself when it connects). The
viewer's hand-back button speaks on `lease.sock` (websockify's `<secret>.lease` token): a line
"release" gives the lease back to the agent, "state" asks who holds it; each is answered with
the holder. Both sockets are in the viewer's private folder, owned by the viewer user: only
websockify reaches them, never a program of the desktop user, which could otherwise take or
give back the screen on a person's behalf.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from capabilities import input_lease
from capabilities.input_lease import Lease

from .oversight import OversightRelay
from .rfb import HANDS, RfbClientMessages, RfbParseError

log = logging.getLogger("codedesk.desktop")

_WRITE_EVERY = 0.25  # seconds: a person's input refreshes the lease file at most this often


class LeaseKeeper:
    """The lease as the supervisor keeps it: in memory, and in `<data>/input-lease.json`."""

    def __init__(self, data: Path, view_only: bool, relay: OversightRelay | None = None) -> None:
        self._data = data
        self._view_only = view_only
        self._relay = relay  # told of a person's input (for the timeline) and of the holder changing
        self._lease = Lease(idle_seconds=input_lease.idle_seconds())
        self._written = 0.0
        input_lease.write(data, self._lease)

    @property
    def holder(self) -> str:
        return "person" if self._lease.person_holds() else "agent"

    def person_input(self, count: int) -> None:
        if self._view_only:  # a view-only session's viewers send nothing that reaches the screen
            return
        now = time.time()
        taken = not self._lease.person_holds(now)
        self._lease = Lease("person", now, self._lease.idle_seconds, self._lease.inputs + count)
        if taken or now - self._written >= _WRITE_EVERY:
            self._write(now)
            if taken:
                log.info("a person took the screen (the input lease) from the viewer")
        if self._relay is not None:
            self._relay.person_input(count, now)
            if taken:
                self._relay.lease_changed("person")

    def release(self) -> None:
        now = time.time()
        self._lease = Lease("agent", now, self._lease.idle_seconds, self._lease.inputs)
        self._write(now)
        log.info("the viewer handed the screen (the input lease) back to the agent")
        if self._relay is not None:
            self._relay.lease_changed("agent")

    def _write(self, now: float) -> None:
        try:
            input_lease.write(self._data, self._lease)
            self._written = now
        except OSError as exc:
            log.warning("the input lease could not be written: %s", exc)


async def serve(viewer_dir: Path, vnc_socket: Path, keeper: LeaseKeeper, owner: tuple[int, int] | None,
                ) -> list[asyncio.AbstractServer]:
    """Start the RFB pass-through (`input.sock`) and the lease channel (`lease.sock`), owned by
    `owner` (uid, gid: the viewer user's, when the supervisor runs as root; None: our own)."""

    async def pass_through(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(vnc_socket))
        except OSError:
            writer.close()
            return
        messages = RfbClientMessages()
        parsing = True

        async def down() -> None:
            while data := await up_reader.read(1 << 16):
                messages.saw_server(data)
                writer.write(data)
                await writer.drain()

        async def up() -> None:
            nonlocal parsing
            while data := await reader.read(1 << 16):
                if parsing:
                    try:
                        inputs = sum(1 for _, kind in messages.feed(data) if kind in HANDS)
                    except RfbParseError as exc:  # pass on what it cannot read; stop counting
                        log.warning("viewer input no longer watched on this connection: %s", exc)
                        parsing, inputs = False, 0
                    if inputs:
                        keeper.person_input(inputs)
                up_writer.write(data)
                await up_writer.drain()

        tasks = [asyncio.ensure_future(down()), asyncio.ensure_future(up())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except (ConnectionError, OSError):
            pass
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for end in (writer, up_writer):
                end.close()

    async def lease_channel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                command = line.decode(errors="replace").strip()
                if command == "release":
                    keeper.release()
                elif command != "state":
                    writer.write(b"error: send release or state\n")
                    continue
                writer.write(f"{keeper.holder}\n".encode())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    servers = []
    for name, handler in (("input.sock", pass_through), ("lease.sock", lease_channel)):
        path = viewer_dir / name
        servers.append(await asyncio.start_unix_server(handler, path=str(path)))
        if owner is not None:
            os.chown(path, *owner)
        os.chmod(path, 0o600)
    return servers
