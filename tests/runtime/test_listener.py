"""The HTTP services' listening socket (`codedesk serve --http`, `codedesk hub`)."""

from __future__ import annotations

import asyncio
import socket

from runtime.listener import listen_tcp


def test_connections_accepted_on_the_listener_have_nagle_off():
    """asyncio sets TCP_NODELAY only on sockets whose protocol reads IPPROTO_TCP; with Nagle on,
    a response written in pieces waited ~40 ms for the client's delayed ACK (the hub's proxy
    added that to every run_js)."""
    sock = listen_tcp("127.0.0.1", 0)
    seen: list[int] = []

    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname())
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()
            await writer.wait_closed()

    asyncio.run(main())
    assert seen == [1]


def test_the_listener_is_bound_before_it_is_handed_over():
    """A client that read the service's banner may connect at once: the socket already listens."""
    sock = listen_tcp("127.0.0.1", 0)
    with sock, socket.create_connection(sock.getsockname(), timeout=5):
        conn, _ = sock.accept()
        conn.close()
