"""A real server for the tests that need one: the app under uvicorn on a free loopback
port, in a thread (the browser tests, schemathesis, raw-socket checks)."""

import contextlib
import socket
import threading
import time


@contextlib.contextmanager
def live_server(app, read_timeout_s: float | None = None):
    """The app under uvicorn on a free loopback port, in a thread, configured as `depthlab
    serve` runs it (depthlab.web.server); yields its base URL."""
    import uvicorn

    from depthlab.web.server import REQUEST_READ_TIMEOUT_S, server_config

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(server_config(app, read_timeout_s or REQUEST_READ_TIMEOUT_S))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
