"""Run the ptmkit_export server in a thread on a free loopback port, and talk to it with http.client."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any

import uvicorn

from ptmkit_export.server import bind, uvicorn_config


class ServerThread:
    """``with ServerThread(app) as server:`` serves ``app`` on ``server.url`` (127.0.0.1, a free port)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = bind("127.0.0.1", 0)
        self.host, self.port = self.sock.getsockname()[:2]
        self.url = f"127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn_config(app, graceful_timeout_s=10))  # as `ptmkit serve` runs it
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()

    def request(self, method: str, path: str, body: bytes | str | dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """One request on a new connection: ``(status, headers, body)``."""
        return request(self.url, method, path, body, headers)


def request(url: str, method: str, path: str, body: bytes | str | dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()
