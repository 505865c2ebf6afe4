"""What a VNC client sends, message by message (RFB 3.3-3.8 and the extensions noVNC uses).

`RfbClientMessages` splits the client's byte stream into its handshake and messages, each with
its message type. Two places read it: the session's viewer proxy (a person's pointer or key,
`HANDS`, takes the input lease, `capabilities/input_lease.py`) and the hub's view links (every
message that changes the session, `INPUT`, is dropped: `runtime/hub/viewer.py`). A message it cannot parse
raises `RfbParseError`, so a stream it does not understand is never half-read.
"""

from __future__ import annotations

import struct


KEY, POINTER, CUT_TEXT, SET_DESKTOP_SIZE, XVP, QEMU = 4, 5, 6, 251, 252, 255
INPUT = frozenset({KEY, POINTER, CUT_TEXT, SET_DESKTOP_SIZE, XVP, QEMU})
"""What changes the session: keys, pointer, clipboard, screen size, power (xvp)."""
HANDS = frozenset({KEY, POINTER, QEMU})
"""A person at the viewer using the screen: keys and pointer (noVNC sends the clipboard by itself)."""
HANDSHAKE = -1


class RfbParseError(ValueError):
    """A client message of a kind this parser does not know."""


class RfbClientMessages:
    def __init__(self) -> None:
        self._buf = b""
        self._handshake: int | None = None    # client bytes before the first message
        self.server_version = b""

    def saw_server(self, data: bytes) -> None:
        """Bytes the server sent (its version string decides the handshake's length)."""
        if len(self.server_version) < 12:
            self.server_version += data[: 12 - len(self.server_version)]

    def feed(self, data: bytes) -> list[tuple[bytes, int]]:
        """The complete pieces of the client stream so far, each (bytes, its message type; the
        handshake's is `HANDSHAKE`). Bytes of an unfinished message are held."""
        self._buf += data
        pieces: list[tuple[bytes, int]] = []
        if self._handshake is None:
            if len(self.server_version) < 12:
                return pieces  # the client cannot have spoken before the server's version
            # RFB 3.8/3.7: version (12), security type (1), ClientInit (1); 3.3: no type byte.
            self._handshake = 13 if self.server_version.startswith(b"RFB 003.003") else 14
        if self._handshake:
            take = min(self._handshake, len(self._buf))
            pieces.append((self._buf[:take], HANDSHAKE))
            self._buf, self._handshake = self._buf[take:], self._handshake - take
            if self._handshake:
                return pieces
        while self._buf:
            size = self._size(self._buf)
            if size is None or size > len(self._buf):
                break  # the rest of the message is still to come
            pieces.append((self._buf[:size], self._buf[0]))
            self._buf = self._buf[size:]
        return pieces

    @staticmethod
    def _size(buf: bytes) -> int | None:
        """The length of the message starting `buf` (None: not all of its header is here)."""
        kind = buf[0]
        fixed = {0: 20, 3: 10, 150: 10, KEY: 8, POINTER: 6, XVP: 4, QEMU: 12}.get(kind)
        if fixed is not None:
            return fixed
        if kind == 2:  # SetEncodings
            return 4 + 4 * struct.unpack(">H", buf[2:4])[0] if len(buf) >= 4 else None
        if kind == CUT_TEXT:  # (extended: negative length)
            return 8 + abs(struct.unpack(">i", buf[4:8])[0]) if len(buf) >= 8 else None
        if kind == 248:  # ClientFence
            return 9 + buf[8] if len(buf) >= 9 else None
        if kind == SET_DESKTOP_SIZE:
            return 8 + 16 * buf[6] if len(buf) >= 8 else None
        raise RfbParseError(f"RFB client message {kind}")
