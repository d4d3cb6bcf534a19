"""A seeded fault-injecting HTTP proxy in front of an object-store server (moto's S3, Azurite).

Run it as its own process and stop it by process id::

    python -m tests.storage.fault_proxy --upstream http://127.0.0.1:9000 --port 9100 --seed 7 \\
        --config '{"store": "s3", "latency_ms": 20, "rates": {"PUT": {"slowdown": 0.05}}}'

Every request is forwarded unchanged (``Host`` included, so signatures still match), except where a
fault is drawn for it. Each request gets one draw from a generator seeded with the seed, its kind, its
path and how many requests of that kind and path came before it, so a run whose keys and per-key order
repeat draws the same faults. Faults (:data:`FAULTS`):

- ``slowdown`` / ``internal``: a 503 / 500 answer in the store's own error format, not forwarded;
- ``reset``: the connection is reset before the request reaches the store;
- ``reset_body``: forwarded; the answer's headers and half its body are sent, then the connection resets;
- ``lost_reply``: forwarded (the store applies it), then the connection resets without an answer;
- ``timeout``: not forwarded; the connection is held open without an answer for ``hold_s`` (bounded), then reset.

``latency_ms`` delays every request on its own thread (concurrent requests wait in parallel). A scripted
fault hits the n-th request of a kind whose path matches a regular expression (``script``).

Control endpoints (never forwarded): ``GET /__proxy__/stats`` (requests by kind, faults by kind and fault,
scripted faults fired), ``PUT /__proxy__/config`` (a new configuration; counts and script positions start
again from zero).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: request kinds
KINDS = ("GET", "RANGE_GET", "LIST", "HEAD", "PUT", "CONDITIONAL_PUT", "MULTIPART_CREATE", "MULTIPART_PART",
         "MULTIPART_COMPLETE", "DELETE", "DELETE_MANY", "OTHER")
#: faults, in the order a draw walks them
FAULTS = ("slowdown", "internal", "reset", "reset_body", "lost_reply", "timeout")
CONTROL = "/__proxy__/"
MAX_HOLD_S = 60.0
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}

_S3_ERRORS = {"slowdown": (503, "SlowDown", "Please reduce your request rate."),
              "internal": (500, "InternalError", "We encountered an internal error. Please try again.")}
_AZURE_ERRORS = {"slowdown": (503, "ServerBusy", "The server is busy."),
                 "internal": (500, "InternalError", "The server encountered an internal error. Please retry the request.")}


def request_kind(method: str, target: str, headers: Any) -> str:
    """The kind of one S3 or Azure Blob request (one of :data:`KINDS`)."""
    query = parse_qs(urlsplit(target).query, keep_blank_values=True)
    comp = (query.get("comp") or [""])[0]
    if method == "GET":
        if "list-type" in query or "prefix" in query or "delimiter" in query or comp == "list":
            return "LIST"
        return "RANGE_GET" if headers.get("Range") or headers.get("x-ms-range") else "GET"
    if method == "HEAD":
        return "HEAD"
    if method == "PUT":
        if "partNumber" in query or comp == "block":
            return "MULTIPART_PART"
        if comp == "blocklist":
            return "MULTIPART_COMPLETE"
        return "CONDITIONAL_PUT" if headers.get("If-None-Match") or headers.get("If-Match") else "PUT"
    if method == "POST":
        if "delete" in query or comp == "batch":
            return "DELETE_MANY"
        if "uploads" in query:
            return "MULTIPART_CREATE"
        if "uploadId" in query:
            return "MULTIPART_COMPLETE"
    if method == "DELETE":
        return "DELETE"
    return "OTHER"


@dataclass
class ScriptedFault:
    """``fault`` for the ``nth`` (1-based; 0: every) request of ``kind`` (any kind when None) whose path matches
    ``path``."""

    path: str
    fault: str
    nth: int = 1
    kind: str | None = None
    seen: int = 0
    fired: int = 0

    def hit(self, kind: str, path: str) -> bool:
        """Count a request; True when it is the one this fault is for."""
        if (self.kind is not None and self.kind != kind) or not re.search(self.path, path):
            return False
        self.seen += 1
        if self.nth in (0, self.seen):
            self.fired += 1
            return True
        return False


@dataclass
class Config:
    """What the proxy injects: fault rates by kind (``"*"`` for every kind), scripted faults, latency."""

    store: str = "s3"
    seed: int = 0
    rates: dict[str, dict[str, float]] = field(default_factory=dict)
    script: list[ScriptedFault] = field(default_factory=list)
    latency_ms: float = 0.0
    hold_s: float = 10.0

    @classmethod
    def from_json(cls, data: dict[str, Any], seed: int = 0) -> Config:
        """A configuration from its JSON form; unknown kinds or faults raise ValueError."""
        rates = {k: dict(v) for k, v in (data.get("rates") or {}).items()}
        for kind, faults in rates.items():
            if kind != "*" and kind not in KINDS:
                raise ValueError(f"unknown request kind {kind!r}")
            for fault in faults:
                if fault not in FAULTS:
                    raise ValueError(f"unknown fault {fault!r}")
        script = [ScriptedFault(s["path"], s["fault"], int(s.get("nth", 1)), s.get("kind"))
                  for s in data.get("script") or []]
        if any(s.fault not in FAULTS for s in script):
            raise ValueError("unknown scripted fault")
        return cls(store=data.get("store", "s3"), seed=int(data.get("seed", seed)), rates=rates, script=script,
                   latency_ms=float(data.get("latency_ms", 0)), hold_s=min(float(data.get("hold_s", 10)), MAX_HOLD_S))


class FaultState:
    """The configuration and the counts, shared by the handler threads."""

    def __init__(self, config: Config) -> None:
        self.lock = threading.Lock()
        self.configure(config)

    def configure(self, config: Config) -> None:
        """Install ``config`` and start the counts again."""
        with self.lock:
            self.config = config
            self.requests: Counter[str] = Counter()
            self.faults: Counter[str] = Counter()
            self.occurrences: Counter[tuple[str, str]] = Counter()

    def draw(self, kind: str, path: str) -> str | None:
        """Count one request and return the fault it gets, or None."""
        with self.lock:
            self.requests[kind] += 1
            self.occurrences[(kind, path)] += 1
            fault = next((s.fault for s in self.config.script if s.hit(kind, path)), None)
            if fault is None:
                n = self.occurrences[(kind, path)]
                u = random.Random(f"{self.config.seed}|{kind}|{path}|{n}").random()
                rates = {**self.config.rates.get("*", {}), **self.config.rates.get(kind, {})}
                for name in FAULTS:
                    u -= rates.get(name, 0.0)
                    if u < 0:
                        fault = name
                        break
            if fault is not None:
                self.faults[f"{kind}:{fault}"] += 1
            return fault

    def stats(self) -> dict[str, Any]:
        """Requests by kind, faults by ``kind:fault``, scripted faults and how often each fired."""
        with self.lock:
            return {"requests": dict(self.requests), "faults": dict(self.faults),
                    "script": [{"path": s.path, "fault": s.fault, "nth": s.nth, "kind": s.kind, "fired": s.fired}
                               for s in self.config.script]}


def error_body(store: str, fault: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a 503 or 500 answer as the store writes it."""
    if store == "azure":
        status, code, message = _AZURE_ERRORS[fault]
        body = (f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
                f"<Message>{message}</Message></Error>").encode()
        return status, {"Content-Type": "application/xml", "x-ms-error-code": code}, body
    status, code, message = _S3_ERRORS[fault]
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>fault-proxy</RequestId></Error>").encode()
    return status, {"Content-Type": "application/xml"}, body


def reset(conn: socket.socket) -> None:
    """Close ``conn`` with a TCP reset (RST), not an orderly close."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    except OSError:
        pass


class Upstream:
    """The store behind the proxy: one keep-alive connection per handler thread."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.local = threading.local()

    def forward(self, method: str, target: str, body: bytes | None,
                headers: dict[str, str]) -> http.client.HTTPResponse:
        """Send the request on this thread's connection (a new one if the old one broke)."""
        for attempt in (0, 1):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
            try:
                conn.request(method, target, body=body, headers=headers)
                return conn.getresponse()
            except (http.client.HTTPException, OSError):
                self.local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


class FaultHandler(BaseHTTPRequestHandler):
    """Forwards each request to ``upstream`` or injects the fault ``state`` draws for it."""

    protocol_version = "HTTP/1.1"
    #: TCP_NODELAY: an answer's headers and body go out in two writes, and without it the body waits for
    #: the client's delayed acknowledgement of the headers (some 40 ms a request, on top of ``latency_ms``)
    disable_nagle_algorithm = True
    state: FaultState
    upstream: Upstream

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> bytes | None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _send(self, status: int, headers: dict[str, str] | list[tuple[str, str]], data: bytes,
              cut: bool = False) -> None:
        self.send_response(status)
        for key, value in (headers.items() if isinstance(headers, dict) else headers):
            if key.lower() not in _HOP and key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data[: len(data) // 2] if cut else data)
        self.wfile.flush()

    def _drop(self) -> None:
        self.close_connection = True
        reset(self.connection)

    def _control(self, body: bytes | None) -> None:
        if self.command == "PUT" and self.path.startswith(CONTROL + "config"):
            self.state.configure(Config.from_json(json.loads(body or b"{}")))
        self._send(200, {"Content-Type": "application/json"}, json.dumps(self.state.stats()).encode())

    def _handle(self) -> None:
        body = self._body()
        if self.path.startswith(CONTROL):
            self._control(body)
            return
        config = self.state.config
        fault = self.state.draw(request_kind(self.command, self.path, self.headers), urlsplit(self.path).path)
        if config.latency_ms:
            time.sleep(config.latency_ms / 1000)
        if fault in ("slowdown", "internal"):
            self._send(*error_body(config.store, fault))
            return
        if fault in ("reset", "timeout"):
            if fault == "timeout":
                time.sleep(config.hold_s)
            self._drop()
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        response = self.upstream.forward(self.command, self.path, body, headers)
        data = response.read()
        if fault == "lost_reply":
            self._drop()
            return
        self._send(response.status, response.getheaders(), data, cut=fault == "reset_body")
        if fault == "reset_body":
            self._drop()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def make_handler(state: FaultState, upstream: str) -> type[FaultHandler]:
    """A handler class bound to ``state`` and the store at ``upstream``."""
    return type("BoundFaultHandler", (FaultHandler,), {"state": state, "upstream": Upstream(upstream)})


def serve(upstream: str, port: int, config: Config) -> None:
    """Serve on 127.0.0.1:``port`` until the process is stopped."""
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(FaultState(config), upstream))
    server.daemon_threads = True
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.storage.fault_proxy --upstream URL --port P --seed N --config JSON``."""
    parser = argparse.ArgumentParser(prog="fault_proxy", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--upstream", required=True, help="the store's endpoint, http://host:port")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default="{}", help="the configuration as JSON (see Config)")
    args = parser.parse_args(argv)
    serve(args.upstream, args.port, Config.from_json(json.loads(args.config), seed=args.seed))


if __name__ == "__main__":
    main()
