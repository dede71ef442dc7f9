"""What keeps other web pages and oversized requests out of the page's server.

Any site the learner visits can send requests to http://127.0.0.1:8000: a form or
a `fetch(..., {mode: "no-cors"})` with `Content-Type: text/plain` goes out without
a CORS preflight. So every POST (they compute, and one starts a training run) must
pass three checks, in this order, before its body is even parsed:

1. Origin. A browser names the page that sent a request in `Origin` (every POST)
   and `Sec-Fetch-Site`. If either is present it must say "this server": `Origin`
   equal to `http://` + the request's `Host`, `Sec-Fetch-Site: same-origin`. When
   both are absent the client is not a browser (curl, scripts, the tests), which no
   web page can make the learner's machine run; it goes on to the next checks.
2. `Content-Type: application/json` (else 415). The three content types a page may
   send cross-site without a preflight are all refused.
3. The header `X-Depthlab-Token` equal to this server's token (a random value made
   at start-up and given out by `GET /api/meta`). A cross-site page cannot read
   `/api/meta` (no CORS headers are ever sent) and cannot send a custom header
   without a preflight that this server does not answer, so it cannot pass.

Refusals are 403 (415 for the content type) with a one-line JSON `error`, in the
language the request asks for (depthlab.web.messages).

`BodyLimit` caps every request body at MAX_BODY bytes (413), counted as the bytes
arrive, so a chunked body without `Content-Length` is cut off after the limit
instead of being read whole into memory. `CloseUnread` closes the connection after
any answer given before its request's body was read (a refusal), so the server never
reads a refused body: uvicorn keeps a connection alive by reading the rest of the body
and throwing it away, which took 9.3 s for a refused 1 GiB upload.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from depthlab.web.messages import error_body, request_lang

TOKEN_HEADER = "X-Depthlab-Token"
MAX_BODY = 64 * 1024  # the largest valid request (a 64-number vector) is under 2 KB
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def new_token() -> str:
    return secrets.token_urlsafe(32)


def _error(request: Request, status: int, key: str, headers: dict[str, str] | None = None,
           **params: str | int) -> JSONResponse:
    return JSONResponse(error_body(key, params, request_lang(request.headers)), status_code=status,
                        headers=headers)


def refuse_write(request: Request, token: str) -> Response | None:
    """The refusal for a request that may not write, or None if it may (module docstring)."""
    if request.method in SAFE_METHODS:
        return None
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    if origin is not None and origin != own:
        return _error(request, 403, "err.origin", origin=origin, own=own)
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return _error(request, 403, "err.fetch_site", site=site)
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        if not media:
            return _error(request, 415, "err.content_type_none")
        return _error(request, 415, "err.content_type", media=media)
    sent = request.headers.get(TOKEN_HEADER, "")
    if not hmac.compare_digest(sent.encode(), token.encode()):
        if not sent:
            return _error(request, 403, "err.token_missing", header=TOKEN_HEADER.lower())
        return _error(request, 403, "err.token_wrong", header=TOKEN_HEADER.lower())
    return None


def _host_name(header: str) -> str:
    """The host a Host header names ("[::1]:8000" -> "::1"), or "" for a malformed one (a
    port that is no number or out of range, a bracket left open)."""
    try:
        parts = urlsplit("//" + header)
        if parts.port is None and ":" in header.rpartition("]")[2]:
            return ""  # "127.0.0.1:" names no port
    except ValueError:  # raised by .port too
        return ""
    return parts.hostname or ""


class HostGuard:
    """ASGI middleware: a request whose Host header names none of `allowed_hosts` gets 400
    with the app's JSON refusal, in the page's language. A page of another site whose name
    was pointed at 127.0.0.1 (DNS rebinding) sends its own name and is refused here."""

    def __init__(self, app: ASGIApp, allowed_hosts: list[str]) -> None:
        self.app = app
        self.allowed = {h.lower().strip("[]") for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            sent = Headers(scope=scope).get("host", "")
            if _host_name(sent) not in self.allowed:
                refused = _error(Request(scope), 400, "err.host", host=repr(sent),
                                 allowed=", ".join(sorted(self.allowed)))
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class WriteGuard:
    """ASGI middleware: `refuse_write` for every request that a route of the app would
    execute (its path and method match), whichever router added the route. A method no
    route takes still gets the app's 405, and a refused request never reaches the body
    parser or the endpoint."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            app = scope["app"]
            if any(route.matches(scope)[0] == Match.FULL for route in app.router.routes):
                refused = refuse_write(Request(scope), app.state.write_token)
                if refused is not None:
                    await refused(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes gets 413 and the connection
    is closed; bodies within it are buffered (at most `limit` bytes) and replayed."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        first: Message | None = None
        while first is None:
            message = await receive()
            if message["type"] != "http.request":
                first = message  # a disconnect: hand it on as it is
                break
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                await self._too_large(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                first = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = _error(Request(scope), 413, "err.body_too_large", {"connection": "close"},
                          limit=self.limit, kib=self.limit // 1024)  # do not read the rest of it
        await response(scope, receive, send)


def _has_body(scope: Scope) -> bool:
    """Whether the request announces a body (a Content-Length above 0, or chunked)."""
    headers = Headers(scope=scope)
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip() not in ("", "0"))


class CloseUnread:
    """ASGI middleware: an answer sent before its request's body was received whole says
    `Connection: close`, and uvicorn then closes the connection once the answer is out
    instead of reading the rest of the body to keep the connection alive."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        received = False

        async def receive_counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                received = True
            return message

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and not received:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive_counted, send_closing)
