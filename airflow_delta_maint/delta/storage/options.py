"""Storage options and environment variables, sorted the way obstore wants them.

delta-rs and object_store users configure a store with storage options (``AWS_ENDPOINT_URL``,
``allow_http``, ``max_retries``, ...) and with environment variables. obstore reads the store's
own variables (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``) by itself, but not the HTTP client's
(``AWS_ALLOW_HTTP``, ``AZURE_ALLOW_HTTP``, ``GOOGLE_ALLOW_HTTP``, timeouts, proxy): those are
dropped as soon as any client option is passed. This module splits the options into obstore's
``config``, ``client_options`` and ``retry_config``, fills the client options from the
environment under explicit options, and leaves out the delta-rs options that obstore does not
know.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from typing import Any, Mapping

#: the HTTP client's options (obstore ``ClientConfig``)
CLIENT_KEYS = frozenset({
    "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type",
    "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate",
    "proxy_excludes", "randomize_addresses", "read_timeout", "timeout", "user_agent",
})
_BOOL_CLIENT_KEYS = frozenset({"allow_http", "allow_invalid_certificates", "randomize_addresses"})
#: delta-rs's retry options
RETRY_KEYS = frozenset({"max_retries", "retry_timeout"})
#: delta-rs options with no obstore meaning here (locking providers, unsafe renames: this project
#: commits with put-if-absent only, never with a lock or an unsafe rename)
IGNORED_KEYS = frozenset({
    "aws_s3_allow_unsafe_rename", "aws_s3_locking_provider", "delta_dynamo_table_name",
    "aws_s3_pool_idle_timeout", "aws_sts_pool_idle_timeout", "aws_s3_get_internal_server_error_retries",
    "aws_force_credential_load", "mount_allow_unsafe_rename",
})
_PREFIXES = ("aws_", "azure_", "google_")

#: the environment prefix of each store family
ENV_PREFIX = {"s3": "AWS", "azure": "AZURE", "gcs": "GOOGLE"}


def store_family(root: str) -> str:
    """``local``, ``s3``, ``azure``, ``gcs`` or ``other`` for a normalized table root."""
    scheme = root.split("://", 1)[0].lower()
    if scheme == "file":
        return "local"
    if scheme in ("s3", "s3a", "s3n"):
        return "s3"
    if scheme in ("az", "abfs", "abfss", "adl", "azure"):
        return "azure"
    if scheme in ("gs", "gcs"):
        return "gcs"
    if scheme in ("http", "https"):
        host = root.split("://", 1)[1].split("/", 1)[0].lower()
        if "amazonaws.com" in host or "r2.cloudflarestorage.com" in host:
            return "s3"
        if host.endswith((".windows.net", ".fabric.microsoft.com")):
            return "azure"
        if host.endswith("storage.googleapis.com"):
            return "gcs"
    return "other"


def _client_key(key: str) -> str | None:
    k = key.lower()
    if k.startswith("client."):
        k = k[len("client."):]
    if k in CLIENT_KEYS:
        return k
    for prefix in _PREFIXES:
        if k.startswith(prefix) and k[len(prefix):] in CLIENT_KEYS:
            return k[len(prefix):]
    return None


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _duration(value: str) -> dt.timedelta:
    """``"30s"``, ``"2m"``, ``"500ms"``, ``"1h"`` or a number of seconds."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m|h)?\s*", str(value))
    if not match:
        raise ValueError(f"not a duration: {value!r}")
    number, unit = float(match.group(1)), match.group(2) or "s"
    return dt.timedelta(seconds=number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit])


def split_options(family: str, options: Mapping[str, str],
                  environ: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """``(config, client_options, retry_config)`` for obstore's ``from_url``.

    Explicit options win over environment variables. Raises ValueError for an unreadable value.
    """
    environ = os.environ if environ is None else environ
    config: dict[str, str] = {}
    client: dict[str, Any] = {}
    retry: dict[str, Any] = {}
    prefix = ENV_PREFIX.get(family)
    if prefix:
        for key in CLIENT_KEYS:
            value = environ.get(f"{prefix}_{key.upper()}")
            if value is not None:
                client[key] = value
    for key, value in options.items():
        lower = key.lower()
        ck = _client_key(key)
        if ck is not None:
            client[ck] = value
        elif lower in RETRY_KEYS:
            retry[lower] = value
        elif lower in IGNORED_KEYS:
            continue
        else:
            config[key] = value
    for key in _BOOL_CLIENT_KEYS & set(client):
        client[key] = _truthy(client[key])
    if "max_retries" in retry:
        retry["max_retries"] = int(retry["max_retries"])
    if "retry_timeout" in retry:
        retry["retry_timeout"] = _duration(retry["retry_timeout"])
    return config, client, retry


def conditional_put_disabled(family: str, config: Mapping[str, str],
                             environ: Mapping[str, str] | None = None) -> bool:
    """True when an S3 store is configured without conditional put (``conditional_put=disabled``)."""
    if family != "s3":
        return False
    environ = os.environ if environ is None else environ
    value = None
    for key, v in config.items():
        if key.lower() in ("conditional_put", "aws_conditional_put"):
            value = v
    if value is None:
        value = environ.get("AWS_CONDITIONAL_PUT")
    return value is not None and str(value).strip().lower() == "disabled"


def store_environ(family: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that configure a store of this family (``AWS_*`` for S3, ...)."""
    environ = os.environ if environ is None else environ
    prefixes = {"s3": ("AWS_",), "azure": ("AZURE_", "AZURITE_"), "gcs": ("GOOGLE_",)}.get(family, ())
    return {k: v for k, v in environ.items() if k.startswith(prefixes)} if prefixes else {}
