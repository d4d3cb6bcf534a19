"""A small Unity Catalog server for the tests: the endpoints of the published OpenAPI contract this provider calls
(``GET /tables/{full_name}``, ``GET /tables``, ``POST /temporary-table-credentials``, and the Delta REST API's
table for ``allowed-maintenance-operations``), served from a JSON state file read on every request.

Run as ``python -m tests.airflow.catalogs.unity_server PORT STATE``; every credential request is appended to
``STATE.requests`` (table id, operation and time, never a secret). Vended credentials live ``lifetime_s`` seconds
(a float: a few seconds make a run ask again); with ``rotate`` each response's AWS values end in ``-N``, N the
request's number, so each request's credentials differ. State::

    {"token": "...", "tables": {"main.sales.orders": {TableInfo fields...}},
     "credentials": {"aws_temp_credentials": {...}}, "lifetime_s": 3600, "rotate": false,
     "allowed": {"main.sales.managed": ["OPTIMIZE"]}}
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

API = "/api/2.1/unity-catalog"


class Handler(BaseHTTPRequestHandler):
    state_file: Path

    def log_message(self, format: str, *args: object) -> None:  # quiet: the test reads the requests file
        pass

    def _state(self) -> dict:
        return json.loads(self.state_file.read_text())

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str) -> None:
        self._send(status, {"error_code": code, "message": message})

    def _authorized(self, state: dict) -> bool:
        if self.headers.get("Authorization") == f"Bearer {state['token']}":
            return True
        self._error(401, "UNAUTHENTICATED", "invalid token")
        return False

    def do_GET(self) -> None:
        state = self._state()
        if not self._authorized(state):
            return
        url = urlsplit(self.path)
        path = unquote(url.path)
        tables = state["tables"]
        if path.startswith(f"{API}/tables/"):
            name = path[len(f"{API}/tables/"):]
            if name in tables:
                return self._send(200, tables[name])
            return self._error(404, "TABLE_DOES_NOT_EXIST", f"Table not found: {name}")
        if path == f"{API}/tables":
            query = parse_qs(url.query)
            prefix = f"{query['catalog_name'][0]}.{query['schema_name'][0]}."
            if not any(n.startswith(prefix) for n in tables):
                return self._error(404, "SCHEMA_DOES_NOT_EXIST", f"Schema not found: {prefix[:-1]}")
            return self._send(200, {"tables": [t for n, t in sorted(tables.items()) if n.startswith(prefix)]})
        if path.startswith(f"{API}/delta/v1/catalogs/"):
            parts = path[len(f"{API}/delta/v1/"):].split("/")  # catalogs/C/schemas/S/tables/T
            name = f"{parts[1]}.{parts[3]}.{parts[5]}"
            if name in state.get("allowed", {}):
                return self._send(200, {"metadata": {"location": tables[name]["storage_location"]},
                                        "allowed-maintenance-operations": state["allowed"][name]})
            return self._error(404, "NOT_FOUND", "no Delta REST API table")
        return self._error(404, "ENDPOINT_NOT_FOUND", path)

    def do_POST(self) -> None:
        state = self._state()
        if not self._authorized(state):
            return
        if urlsplit(self.path).path != f"{API}/temporary-table-credentials":
            return self._error(404, "ENDPOINT_NOT_FOUND", self.path)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if body.get("operation") not in ("READ", "READ_WRITE"):
            return self._error(400, "INVALID_PARAMETER_VALUE", "operation must be READ or READ_WRITE")
        with open(f"{self.state_file}.requests", "a+") as log:
            log.seek(0)
            number = len(log.read().splitlines()) + 1
            log.write(json.dumps({"table_id": body.get("table_id"), "operation": body["operation"],
                                  "at": time.time()}) + "\n")
        credentials = dict(state["credentials"])
        if state.get("rotate") and "aws_temp_credentials" in credentials:
            credentials["aws_temp_credentials"] = {k: f"{v}-{number}"
                                                   for k, v in credentials["aws_temp_credentials"].items()}
        expires = int((time.time() + float(state.get("lifetime_s", 3600))) * 1000)
        self._send(200, {**credentials, "expiration_time": expires})


def main() -> None:
    port, state = int(sys.argv[1]), Path(sys.argv[2])
    Handler.state_file = state
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
