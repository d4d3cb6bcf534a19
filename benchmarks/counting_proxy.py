"""An HTTP reverse proxy on 127.0.0.1 that counts the S3 requests passing through it, by kind.

Moto keeps no request log, so the object-store benchmark points a client at this proxy for one
extra, untimed run and reads the counts. Requests are forwarded unchanged (the ``Host`` header
included, so signatures still match) over one keep-alive connection per proxy thread.
"""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


def request_kind(method: str, path: str) -> str:
    """``LIST``, ``DELETE (bulk)``, ``GET``, ``PUT``, ... for one S3 request."""
    query = parse_qs(urlsplit(path).query, keep_blank_values=True)
    if method == "GET" and ("list-type" in query or "prefix" in query or "delimiter" in query):
        return "LIST"
    if method == "POST" and "delete" in query:
        return "DELETE (bulk)"
    return method


class CountingProxy:
    """Forward ``http://127.0.0.1:<port>`` to ``target`` (an ``http://host:port`` URL) and count."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.counts: Counter[str] = Counter()
        lock = threading.Lock()
        local = threading.local()
        counts = self.counts

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _forward(self) -> None:
                with lock:
                    counts[request_kind(self.command, self.path)] += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                for attempt in (0, 1):
                    conn = getattr(local, "conn", None)
                    if conn is None:
                        conn = local.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
                    try:
                        conn.request(self.command, self.path, body=body, headers=headers)
                        response = conn.getresponse()
                        data = response.read()
                        break
                    except (http.client.HTTPException, OSError):
                        local.conn = None
                        if attempt:
                            raise
                self.send_response(response.status, response.reason)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def take(self) -> Counter[str]:
        """The counts since the last call, and start again from zero."""
        out = Counter(self.counts)
        self.counts.clear()
        return out

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
