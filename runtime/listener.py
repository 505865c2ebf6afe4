"""The listening TCP socket of an HTTP service (`codedesk serve --http`, `codedesk hub`), bound
before the service announces itself so a client that reads the banner can connect at once.

It is made with protocol IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off
(TCP_NODELAY) only on sockets whose protocol reads IPPROTO_TCP, and accepted sockets inherit
the listener's. With protocol 0 every response written in pieces (the headers, then the body,
as a streamed answer is) waited for the client's delayed ACK: about 40 ms a request.
"""

from __future__ import annotations

import socket


def listen_tcp(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A socket listening on `host:port` (port 0: a free one), Nagle off for its connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
