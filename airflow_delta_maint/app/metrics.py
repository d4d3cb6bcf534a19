"""The metrics object every run produces, and where it goes."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from typing import Any, Mapping
from urllib.parse import urlparse

from airflow_delta_maint.delta.storage.store_calls import empty_counts

STATUSES = ("committed", "skipped", "dry_run", "failed")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def base_metrics(operation: str, table: str) -> dict[str, Any]:
    """A metrics object with the contract's common fields filled in as far as known at start."""
    return {
        "operation": operation,
        "table": table,
        "status": "failed",
        "version_read": None,
        "version_committed": None,
        "started_at": now_iso(),
        "duration_s": 0.0,
        "storeCalls": empty_counts(),
        "_t0": time.perf_counter(),
    }


def finish(metrics: dict[str, Any]) -> dict[str, Any]:
    """Stamp the duration and drop private fields."""
    t0 = metrics.pop("_t0", None)
    if t0 is not None:
        metrics["duration_s"] = round(time.perf_counter() - t0, 3)
    return metrics


def write_metrics(metrics: Mapping[str, Any], uri: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Write the metrics JSON to a local path or an object-store URI (whole or not at all)."""
    data = json.dumps(metrics, sort_keys=True, default=str).encode()
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme == "file" else uri
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return
    import obstore
    from obstore.store import from_url

    parent, _, name = uri.rstrip("/").rpartition("/")
    config = {k: v for k, v in (storage_options or {}).items() if not k.startswith("client.")}
    store = from_url(parent, config=config)  # type: ignore[call-overload]  # options of any store family
    obstore.put(store, name, data)


def read_metrics(uri: str, storage_options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read a metrics object written by ``write_metrics``."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        with open(parsed.path if parsed.scheme == "file" else uri, "rb") as fh:
            return json.loads(fh.read())
    import obstore
    from obstore.store import from_url

    parent, _, name = uri.rstrip("/").rpartition("/")
    config = {k: v for k, v in (storage_options or {}).items() if not k.startswith("client.")}
    store = from_url(parent, config=config)  # type: ignore[call-overload]  # options of any store family
    return json.loads(bytes(obstore.get(store, name).bytes()))
