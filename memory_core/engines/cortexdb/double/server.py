"""Serve a double over real HTTP on loopback (``memory-core cortex-double --wire direct --port N``).

The stdlib ``ThreadingHTTPServer`` hands every request to ``CortexDouble.handle``, so the loopback double and
the in-process transport behave the same. Two extra routes serve tests in other processes: ``GET /_seen``
answers every request seen (bearer left out) and ``POST /_knobs`` sets knobs from a JSON object.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from memory_core.engines.cortexdb.auth import is_loopback
from memory_core.engines.cortexdb.double.app import CortexDouble
from memory_core.errors import ConfigError, InvalidRequest

__all__ = ["DoubleServer", "serve"]


def _handler(double: CortexDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # answer in one go: Nagle's algorithm against delayed ACKs costs ~40 ms per keep-alive request
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: object) -> None:  # quiet: tests read /_seen instead
            return

        def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                if name.lower() not in {"content-length", "transfer-encoding", "connection"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path == "/_seen" and self.command == "GET":
                seen = [s.to_json() for s in double.requests()]
                self._reply(200, json.dumps(seen).encode(), {"Content-Type": "application/json"})
                return
            if self.path == "/_knobs" and self.command == "POST":
                try:
                    double.knobs.update(json.loads(raw or b"{}"))
                except (InvalidRequest, ValueError, AttributeError) as exc:
                    self._reply(400, json.dumps({"message": str(exc)}).encode(), {"Content-Type": "application/json"})
                    return
                self._reply(200, b"{}", {"Content-Type": "application/json"})
                return
            url = f"http://{self.headers.get('Host', 'localhost')}{self.path}"
            request = httpx.Request(self.command, url, headers=list(self.headers.items()), content=raw)
            response = double.handle(request)
            self._reply(response.status_code, response.content, dict(response.headers))

        do_GET = do_POST = do_PUT = do_DELETE = _serve

    return Handler


class DoubleServer:
    """A double served on ``host:port`` in a background thread (``with DoubleServer(double) as s: s.url``).

    Raises:
        ConfigError: a host that is not loopback (the doubles never listen beyond the machine).
    """

    def __init__(self, double: CortexDouble, host: str = "127.0.0.1", port: int = 0) -> None:
        if not is_loopback(host):
            raise ConfigError(f"the CortexDB double listens on loopback only, not {host!r}")
        self.double = double
        self._server = ThreadingHTTPServer((host, port), _handler(double))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host = self._server.server_address[0]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{self.port}"

    def start(self) -> DoubleServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="cortex-double", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> DoubleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(double: CortexDouble, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve ``double`` in the foreground until interrupted."""
    server = DoubleServer(double, host, port)
    try:
        server._server.serve_forever()
    finally:
        server._server.server_close()
