"""The HTTP/1.1 connection: uvicorn's httptools protocol, with a response's writes sent as one.

uvicorn writes a response's status line and headers, then its body, each straight to the socket:
two system calls and two TCP segments, so the client wakes twice for one answer. Here the
connection's writes of one step of the event loop go out together at the end of it (one call,
one segment): the same bytes, in the same order, a few microseconds later.

uvicorn's httptools protocol is not its public API: where it is not there (another uvicorn, or no
httptools), `http_protocol()` leaves the choice to uvicorn, and responses go as uvicorn writes them.
"""

from __future__ import annotations

import asyncio
from typing import Any

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - the uvicorn and httptools the service extra pins have it
    HttpToolsProtocol = None  # type: ignore[misc,assignment]


class _Joined(asyncio.Transport):
    """A transport whose writes are kept until the loop's next turn, then written in one call."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport, self._loop = transport, loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._flush()
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()


def http_protocol() -> Any:
    """uvicorn's `http` option: the protocol that joins a response's writes, else "auto"."""
    if HttpToolsProtocol is None:
        return "auto"

    class Protocol(HttpToolsProtocol):
        """uvicorn's httptools HTTP/1.1 protocol over a `_Joined` transport."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(_Joined(transport, self.loop))

    return Protocol
