"""How the page's server runs under uvicorn: h11, with a bound on reading a request.

uvicorn's keep-alive timer is cancelled by the first byte of a request, and h11 has no
header-read timeout of its own, so a client that sends half a request line, or half a
body, and then waits holds its connection (and a file descriptor) for ever: 40 such
connections were still open after a minute. `BoundedH11Protocol` gives each request
REQUEST_READ_TIMEOUT_S from the moment the server waits for it (the connection opens,
or the previous response ends) until its last body byte has arrived; a request still
incomplete then is dropped by closing the connection. Trickling bytes does not extend
the deadline. Once a request is read, computing its answer takes as long as it takes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

# A request to the page is a few hundred bytes of headers and at most MAX_BODY of JSON
# (depthlab.web.guard); a local browser sends it in milliseconds.
REQUEST_READ_TIMEOUT_S = 20.0


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on reading each whole request."""

    request_read_timeout_s: float = REQUEST_READ_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm_read_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):  # the request is all read
            self._cancel_read_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_read_deadline()  # the next request on this connection gets its own bound

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_deadline()
        super().connection_lost(exc)

    def _arm_read_deadline(self) -> None:
        self._cancel_read_deadline()
        self._read_deadline = self.loop.call_later(self.request_read_timeout_s,
                                                   self._read_timed_out)

    def _cancel_read_deadline(self) -> None:
        if getattr(self, "_read_deadline", None) is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if not self.transport.is_closing() and self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            self.transport.close()  # connection_lost tells a waiting app: http.disconnect


def bounded_protocol(seconds: float) -> type[BoundedH11Protocol]:
    """The protocol class with another read bound (the tests use a short one)."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"request_read_timeout_s": seconds})


def server_config(app: Any, read_timeout_s: float = REQUEST_READ_TIMEOUT_S) -> Any:
    """The uvicorn.Config every depthlab server runs with."""
    return uvicorn.Config(app, log_level="warning", access_log=False,
                          http=bounded_protocol(read_timeout_s))
