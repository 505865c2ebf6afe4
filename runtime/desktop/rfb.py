"""What a VNC client sends, message by message (RFB 3.3-3.8 and the extensions noVNC uses).

`RfbClientMessages` splits the client's byte stream into its handshake and messages and says
which messages are a person's input (keys, pointer, clipboard, resize). Two places read it: the
session's viewer proxy (a person's input takes the input lease, `capabilities/input_lease.py`)
and the hub's view links (input dropped, `runtime/hub/viewer.py`). A message it cannot parse
raises `RfbParseError`, so a stream it does not understand is never half-read.
"""

from __future__ import annotations

import struct


class RfbParseError(ValueError):
    """A client message of a kind this parser does not know."""


class RfbClientMessages:
    _PASS_FIXED = {0: 20, 3: 10, 150: 10}     # SetPixelFormat, FramebufferUpdateRequest, continuous updates
    _INPUT_FIXED = {4: 8, 5: 6, 252: 4}       # key, pointer, xvp

    def __init__(self) -> None:
        self._buf = b""
        self._handshake: int | None = None    # client bytes before the first message
        self.server_version = b""

    def saw_server(self, data: bytes) -> None:
        """Bytes the server sent (its version string decides the handshake's length)."""
        if len(self.server_version) < 12:
            self.server_version += data[: 12 - len(self.server_version)]

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        """The complete pieces of the client stream so far, each (bytes, is a person's input);
        the handshake is one piece, never input. Bytes of an unfinished message are held."""
        self._buf += data
        pieces: list[tuple[bytes, bool]] = []
        if self._handshake is None:
            if len(self.server_version) < 12:
                return pieces  # the client cannot have spoken before the server's version
            # RFB 3.8/3.7: version (12), security type (1), ClientInit (1); 3.3: no type byte.
            self._handshake = 13 if self.server_version.startswith(b"RFB 003.003") else 14
        if self._handshake:
            take = min(self._handshake, len(self._buf))
            pieces.append((self._buf[:take], False))
            self._buf, self._handshake = self._buf[take:], self._handshake - take
            if self._handshake:
                return pieces
        while self._buf:
            size, is_input = self._message(self._buf)
            if size is None or size > len(self._buf):
                break  # the rest of the message is still to come
            pieces.append((self._buf[:size], is_input))
            self._buf = self._buf[size:]
        return pieces

    def _message(self, buf: bytes) -> tuple[int | None, bool]:
        kind = buf[0]
        if kind in self._PASS_FIXED:
            return (self._PASS_FIXED[kind] if len(buf) >= self._PASS_FIXED[kind] else None), False
        if kind in self._INPUT_FIXED:
            return (self._INPUT_FIXED[kind] if len(buf) >= self._INPUT_FIXED[kind] else None), True
        if kind == 2:  # SetEncodings
            return (4 + 4 * struct.unpack(">H", buf[2:4])[0] if len(buf) >= 4 else None), False
        if kind == 6:  # ClientCutText (extended: negative length)
            return (8 + abs(struct.unpack(">i", buf[4:8])[0]) if len(buf) >= 8 else None), True
        if kind == 248:  # ClientFence
            return (9 + buf[8] if len(buf) >= 9 else None), False
        if kind == 251:  # SetDesktopSize
            return (8 + 16 * buf[6] if len(buf) >= 8 else None), True
        if kind == 255:  # QEMU extended key event
            return (12 if len(buf) >= 12 else None), True
        raise RfbParseError(f"RFB client message {kind}")
