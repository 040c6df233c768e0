"""Serve one trace file to ui.perfetto.dev from a loopback-only HTTP server.

The Perfetto UI (a web page on https://ui.perfetto.dev) fetches the trace from the user's own
machine: ``https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/<file>``. Its Content Security
Policy only allows fetches from ``127.0.0.1:9001`` (the port trace_processor's RPC uses), so that
is the default port, as in Perfetto's own ``tools/open_trace_in_ui``. Responses carry
``Access-Control-Allow-Origin`` for the UI's origin and answer Chrome's private-network preflight.

The server binds 127.0.0.1 only and serves exactly one path; anything else is a 404.

>>> with TraceServer("trace.pftrace", port=0) as server:   # doctest: +SKIP
...     print(server.ui_url)
...     server.serve_forever()                           # Ctrl-C to stop
"""
from __future__ import annotations

import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

from zym.schemas.errors import InputError

UI_ORIGIN = "https://ui.perfetto.dev"
PERFETTO_PORT = 9001  # the only port the Perfetto UI's Content Security Policy lets it fetch from
HOST = "127.0.0.1"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _cors(self) -> None:
        self.send_header("Access-Control-Allow-Origin", self.server.origin)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Cache-Control", "no-cache")

    def do_OPTIONS(self) -> None:
        if not self._loopback_host():
            return
        self.send_response(HTTPStatus.NO_CONTENT)
        self._cors()
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self._send(body=False)

    def do_GET(self) -> None:
        self._send(body=True)

    def _loopback_host(self) -> bool:
        """Only requests addressed to a loopback name: a page on another site that points its
        own DNS name at 127.0.0.1 (DNS rebinding) sends that name as Host and is refused."""
        if is_loopback_host(self.headers.get("Host")):
            return True
        self.send_error(HTTPStatus.FORBIDDEN, "Host must be 127.0.0.1, localhost or [::1]")
        return False

    def _send(self, body: bool) -> None:
        if not self._loopback_host():
            return
        if self.path.split("?", 1)[0] != self.server.url_path:
            self.send_error(HTTPStatus.NOT_FOUND, "not the served trace")
            return
        data = self.server.trace.read_bytes()
        self.send_response(HTTPStatus.OK)
        self._cors()
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.server.fetches += 1  # before the body: a client that has it sees the count
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # quiet: the CLI prints what matters
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    trace: Path
    url_path: str
    origin: str
    fetches: int = 0


class TraceServer:
    """A loopback HTTP server for one trace (context manager)."""

    def __init__(self, trace: str | Path, port: int = PERFETTO_PORT, origin: str = UI_ORIGIN):
        self.trace = Path(trace)
        if not self.trace.is_file():
            raise InputError(f"{self.trace}: no such trace file")
        try:
            self.httpd = _Server((HOST, port), _Handler)
        except OSError as e:
            hint = (" (the Perfetto UI only fetches from 127.0.0.1:9001: stop what holds it, e.g. "
                    "a trace_processor_shell --httpd)" if port == PERFETTO_PORT else "")
            raise InputError(f"cannot listen on {HOST}:{port}: {e.strerror}{hint}") from None
        self.httpd.trace = self.trace
        self.httpd.url_path = "/" + quote(self.trace.name)
        self.httpd.origin = origin
        self.origin = origin

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def trace_url(self) -> str:
        return f"http://{HOST}:{self.port}{self.httpd.url_path}"

    @property
    def ui_url(self) -> str:
        return f"{self.origin}/#!/?url={self.trace_url}&referrer=zym"

    @property
    def fetches(self) -> int:
        return self.httpd.fetches

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> threading.Thread:
        """Serve from a background thread (tests, notebooks)."""
        t = threading.Thread(target=self.serve_forever, name="zym-view", daemon=True)
        t.start()
        return t

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> TraceServer:  # noqa: PYI034 (not subclassed)
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.server_close()


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback_host(host: str | None) -> bool:
    """True for a Host header naming the loopback interface (any port).

    >>> is_loopback_host("127.0.0.1:9001"), is_loopback_host("evil.example:9001")
    (True, False)
    """
    if not host:
        return False
    name = host.strip().lower()
    if name.startswith("["):
        name = name[:name.find("]") + 1]
    else:
        name = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
    return name in LOOPBACK_NAMES


def is_perfetto_trace(path: str | Path) -> bool:
    """A Perfetto protobuf trace: by suffix, or by its first byte (``Trace.packet`` key)."""
    path = Path(path)
    if path.suffix in (".pftrace", ".perfetto-trace", ".perfetto"):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head[:1] == b"\x0a" and head != b"PAR1"
