"""Unity Catalog's temporary table credentials asked for again while a run lasts: a credential provider for
obstore (:class:`airflow_delta_maint.delta.storage.store.Storage`'s ``credential_provider``).

A :class:`UnityCredentialProvider` holds what asking again takes: the catalog's URL, a token for it, the table's
full name and the operation (``READ`` or ``READ_WRITE``). obstore calls it before a request whenever the
credentials it holds are within minutes of expiring; the provider answers from its last credentials until less
than :func:`refresh_margin` of them is left, then asks the catalog (``POST /temporary-table-credentials``). It
pickles (the token included, never its client or credentials), so a Spark task that unpickles a ``Storage``
asks the catalog itself. Its ``repr`` names the host, table and operation only.

The application builds one from its environment (:func:`provider_from_environ`): the Airflow hook sets
``DELTA_MAINT_UNITY_HOST``, ``DELTA_MAINT_UNITY_TOKEN``, ``DELTA_MAINT_UNITY_TABLE`` and
``DELTA_MAINT_UNITY_OPERATION`` in spark-submit's environment, never on its command line.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Mapping
from typing import Any

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.resolved import VendedCredentials

#: the variables the application learns the catalog, its token, the table and the operation from
ENV_HOST = "DELTA_MAINT_UNITY_HOST"
ENV_TOKEN = "DELTA_MAINT_UNITY_TOKEN"  # noqa: S105 - the variable's name, not a secret
ENV_TABLE = "DELTA_MAINT_UNITY_TABLE"
ENV_OPERATION = "DELTA_MAINT_UNITY_OPERATION"
#: credentials are asked for again once less than this is left of them (or a quarter of their life, if shorter)
REFRESH_MARGIN_S = 60.0


def refresh_margin(lifetime_s: float) -> float:
    """How long before they expire credentials of ``lifetime_s`` seconds are replaced."""
    return max(0.0, min(REFRESH_MARGIN_S, lifetime_s / 4))


def obstore_credential(credentials: VendedCredentials) -> dict[str, Any]:
    """Vended credentials as obstore's credential dict (``S3Credential``, ``AzureSASToken`` or
    ``AzureBearerToken``) with their ``expires_at``."""
    expires = (dt.datetime.fromtimestamp(credentials.expires_at, dt.timezone.utc)
               if credentials.expires_at is not None else None)
    env = credentials.env
    if credentials.family == "s3":
        return {"access_key_id": env["AWS_ACCESS_KEY_ID"], "secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
                "token": env.get("AWS_SESSION_TOKEN"), "expires_at": expires}
    if credentials.family == "azure":
        if "AZURE_STORAGE_SAS_TOKEN" in env:
            return {"sas_token": env["AZURE_STORAGE_SAS_TOKEN"], "expires_at": expires}
        return {"token": env["AZURE_STORAGE_TOKEN"], "expires_at": expires}
    raise CatalogError(f"credentials for a {credentials.family} store cannot be refreshed")


class UnityCredentialProvider:
    """Temporary credentials of one Unity Catalog table, asked for again before they expire.

    :param host: the catalog's URL (``https://adb-1.azuredatabricks.net``, ``http://127.0.0.1:8080``).
    :param token: a token for it (a secret: kept out of ``repr`` and every message).
    :param full_name: the table, ``catalog.schema.table``.
    :param operation: ``READ`` or ``READ_WRITE``.
    """

    def __init__(self, host: str, token: str, full_name: str, operation: str) -> None:
        self.host = host
        self._token = token
        self.full_name = full_name
        self.operation = operation.upper()
        self.requests = 0
        self._catalog: Any = None
        self._table: tuple[str, str] | None = None  # (table id, location)
        self._current: tuple[dict[str, Any], float, float] | None = None  # (credential, expires_at, margin)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"UnityCredentialProvider(host={self.host!r}, table={self.full_name!r}, operation={self.operation!r})"

    __str__ = __repr__

    def __getstate__(self) -> dict[str, Any]:
        return {"host": self.host, "token": self._token, "full_name": self.full_name, "operation": self.operation,
                "table": self._table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["host"], state["token"], state["full_name"], state["operation"])  # type: ignore[misc]
        self._table = state.get("table")

    def __call__(self) -> dict[str, Any]:
        with self._lock:
            now = time.time()
            if self._current is not None:
                credential, expires_at, margin = self._current
                if expires_at - now > margin:
                    return credential
            fresh = self.fetch()
            credential = obstore_credential(fresh)
            expires_at = fresh.expires_at if fresh.expires_at is not None else float("inf")
            self._current = (credential, expires_at, refresh_margin(expires_at - now))
            return credential

    def fetch(self) -> VendedCredentials:
        """New credentials from the catalog (the table's id and location looked up once)."""
        from airflow_delta_maint.catalogs.unity import UnityCatalog, workspace_client

        if self._catalog is None:
            self._catalog = UnityCatalog(workspace_client(self.host, self._token), "the run's credential refresh",
                                         min_lifetime_s=0)
        if self._table is None:
            resolved = self._catalog.resolve(self.full_name, self.operation, with_credentials=False)
            self._table = (str(resolved.table_id or ""), resolved.location)
        table_id, location = self._table
        self.requests += 1
        found = self._catalog.credentials(self.full_name, table_id, location, self.operation)
        if found is None:
            raise CatalogError(f"Unity Catalog vended no storage credentials for {self.full_name}")
        return found


def provider_from_environ(environ: Mapping[str, str]) -> UnityCredentialProvider | None:
    """The provider the Airflow hook described in the environment (all four variables set), else None."""
    host, token = environ.get(ENV_HOST), environ.get(ENV_TOKEN)
    table, operation = environ.get(ENV_TABLE), environ.get(ENV_OPERATION) or "READ_WRITE"
    if not (host and token and table):
        return None
    return UnityCredentialProvider(host, token, table, operation)


def provider_for_client(client: Any, full_name: str, operation: str) -> UnityCredentialProvider | None:
    """A provider for a ``databricks-sdk`` client that holds a personal access token (the command line's
    ``DATABRICKS_HOST``/``DATABRICKS_TOKEN``); None for other authentication, which nothing here renews."""
    config = getattr(client, "config", None)
    token, host = getattr(config, "token", None), getattr(config, "host", None)
    if not (token and host):
        return None
    return UnityCredentialProvider(str(host), str(token), full_name, operation)


def provider_environ(host: str, token: str, full_name: str, operation: str) -> dict[str, str]:
    """The variables :func:`provider_from_environ` reads."""
    return {ENV_HOST: host, ENV_TOKEN: token, ENV_TABLE: full_name, ENV_OPERATION: operation.upper()}


__all__ = ["ENV_HOST", "ENV_OPERATION", "ENV_TABLE", "ENV_TOKEN", "REFRESH_MARGIN_S", "UnityCredentialProvider",
           "obstore_credential", "provider_environ", "provider_for_client", "provider_from_environ",
           "refresh_margin"]
