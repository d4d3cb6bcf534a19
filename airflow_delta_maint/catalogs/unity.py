"""Tables by name in Unity Catalog (Databricks' or the open-source server), over the official ``databricks-sdk``.

A name is ``catalog.schema.table``. The table must be a Delta table (``data_source_format`` DELTA) of type
MANAGED or EXTERNAL with a ``storage_location``; views and other formats are refused in one line. The catalog
vends temporary credentials per table (``/temporary-table-credentials``): READ for inspect and the sensor,
READ_WRITE for the writing jobs; they become the store's variables (S3 keys and session token, an Azure SAS
or AAD token). Credentials that expire within :data:`MIN_LIFETIME_S` are refused before anything runs where
nothing asks for them again (the sensor, its trigger, a fleet, delta-spark's engine); a run that refreshes them
(:mod:`airflow_delta_maint.catalogs.unity_credentials`) needs only :data:`REFRESHED_MIN_LIFETIME_S`.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.names import select_names, split_name
from airflow_delta_maint.catalogs.resolved import ResolvedTable, VendedCredentials
from airflow_delta_maint.catalogs.table_entry import s3_uri

KIND = "unity"
#: the REST paths the open-source server and Databricks both serve
API = "/api/2.1/unity-catalog"
#: vended credentials must stay valid at least this long when a run starts
MIN_LIFETIME_S = 600
#: ... and this long on a run that asks for them again before they expire (they are replaced at its first request)
REFRESHED_MIN_LIFETIME_S = 1
VIEW_TYPES = frozenset({"VIEW", "MATERIALIZED_VIEW", "METRIC_VIEW", "STREAMING_TABLE"})
TABLE_TYPES = frozenset({"MANAGED", "EXTERNAL"})
OPERATIONS = ("READ", "READ_WRITE")
#: the property Databricks and Delta record a catalog-managed (catalog-owned commits) table with
CATALOG_FEATURE_PROPERTIES = ("delta.feature.catalogManaged", "delta.feature.catalogOwned-preview")


def unity_lineage(host: str, full_name: str) -> tuple[str, str]:
    """The OpenLineage ``(namespace, name)`` of a Unity Catalog table: ``databricks://{host}``,
    ``{catalog}.{schema}.{table}`` (the naming of Databricks' tables)."""
    return f"databricks://{host}", full_name


def _value(item: Any) -> str:
    return str(getattr(item, "value", item) or "")


def vended(response: dict[str, Any], location: str, operation: str) -> VendedCredentials | None:
    """A ``temporary-table-credentials`` response as store variables, for the table at ``location``; None for a
    table on a local path (``file://``), which needs none.

    :raises CatalogError: a response with no credentials this store client can use (a GCS OAuth token).
    """
    expires = response.get("expiration_time")
    expires_at = float(expires) / 1000 if expires else None
    aws = response.get("aws_temp_credentials") or {}
    if aws.get("access_key_id"):
        env = {"AWS_ACCESS_KEY_ID": str(aws["access_key_id"]),
               "AWS_SECRET_ACCESS_KEY": str(aws.get("secret_access_key", ""))}
        if aws.get("session_token"):
            env["AWS_SESSION_TOKEN"] = str(aws["session_token"])
        secrets = tuple(v for k, v in env.items() if k != "AWS_ACCESS_KEY_ID" and v)
        return VendedCredentials("s3", env, secrets, expires_at, operation)
    sas = (response.get("azure_user_delegation_sas") or {}).get("sas_token")
    aad = (response.get("azure_aad") or {}).get("aad_token")
    if sas or aad:
        env = {"AZURE_STORAGE_SAS_TOKEN": str(sas).lstrip("?")} if sas else {"AZURE_STORAGE_TOKEN": str(aad)}
        account = urlsplit(location).netloc.partition("@")[2].split(".", 1)[0]
        if account:
            env["AZURE_STORAGE_ACCOUNT_NAME"] = account
        secret = env.get("AZURE_STORAGE_SAS_TOKEN") or env["AZURE_STORAGE_TOKEN"]
        return VendedCredentials("azure", env, (secret,), expires_at, operation)
    if (response.get("gcp_oauth_token") or {}).get("oauth_token"):
        raise CatalogError("Unity Catalog vended a GCS OAuth token, which this provider's store client cannot use: "
                           "name a storage connection for the table's bucket instead")
    if urlsplit(location).scheme in ("", "file"):
        return None
    raise CatalogError("Unity Catalog vended no storage credentials for the table")


def check_lifetime(credentials: VendedCredentials, name: str, now: float | None = None,
                   min_lifetime_s: float = MIN_LIFETIME_S) -> None:
    """Refuse credentials that expire within ``min_lifetime_s`` (what a run needs that does not renew them, or
    the margin of one that does).

    :raises CatalogError: one line with the seconds left.
    """
    if credentials.expires_at is None:
        return
    left = credentials.expires_at - (time.time() if now is None else now)
    if left < min_lifetime_s:
        raise CatalogError(f"the credentials Unity Catalog vended for {name} expire in {max(0, int(left))} s, less "
                           f"than the {int(min_lifetime_s)} s a run needs at least; nothing was run")


#: how long the SDK retries a request the server did not answer: its own default, 300 s, left a run with an
#: unreachable catalog silent for ten minutes (the client's start probes the server too) before its one-line
#: error; a task's own retries cover a longer outage
RETRY_TIMEOUT_S = 10


class UnityCatalog:
    """A Unity Catalog server reached through a ``databricks-sdk`` ``WorkspaceClient``.

    :param client: the workspace client (its host and credentials: a token, or the SDK's own chain).
    :param conn_id: what the catalog was reached with, named in errors.
    :param vend: ask the catalog for temporary table credentials (off: a storage connection reaches the store).
    :param min_lifetime_s: how long vended credentials must stay valid at least (:data:`MIN_LIFETIME_S`; a run
        that refreshes them: :data:`REFRESHED_MIN_LIFETIME_S`).
    """

    kind = KIND

    def __init__(self, client: Any, conn_id: str, vend: bool = True, min_lifetime_s: float = MIN_LIFETIME_S) -> None:
        self.client = client
        self.conn_id = conn_id
        self.vend = vend
        self.min_lifetime_s = min_lifetime_s
        self.host = urlsplit(str(client.config.host)).netloc or str(client.config.host)

    def _where(self) -> str:
        return f"Unity Catalog at {self.host} (connection {self.conn_id!r})"

    def _call(self, what: str, call: Any) -> Any:
        from databricks.sdk.errors import DatabricksError, NotFound, PermissionDenied, Unauthenticated

        try:
            return call()
        except NotFound:
            raise CatalogError(f"{self._where()} has no {what}") from None
        except (PermissionDenied, Unauthenticated) as exc:
            raise CatalogError(f"{self._where()} refused {what}: {str(exc).splitlines()[0]}") from None
        except DatabricksError as exc:
            raise CatalogError(f"{self._where()} failed on {what}: {str(exc).splitlines()[0]}") from None
        except OSError as exc:  # requests' connection errors
            raise CatalogError(f"cannot reach {self._where()}: {str(exc).splitlines()[0]}") from None

    def _delta_rules(self, catalog: str, schema: str, table: str) -> frozenset[str] | None:
        """``allowed-maintenance-operations`` from the Delta REST API's table where the server sends it."""
        from databricks.sdk.errors import DatabricksError

        path = f"{API}/delta/v1/catalogs/{catalog}/schemas/{schema}/tables/{table}"
        try:
            loaded = self.client.api_client.do("GET", path) or {}
        except (DatabricksError, OSError, ValueError):
            return None
        for where in (loaded, loaded.get("metadata") or {}):
            allowed = where.get("allowed-maintenance-operations")
            if isinstance(allowed, list):
                return frozenset(str(a).upper() for a in allowed)
        return None

    def resolve(self, name: str, operation: str = "READ", with_credentials: bool = True) -> ResolvedTable:
        """The Delta table ``catalog.schema.table``, with temporary credentials for ``operation`` (unless
        ``with_credentials`` is false)."""
        catalog, schema, table = split_name(name, 3, "Unity Catalog")
        full = f"{catalog}.{schema}.{table}"
        info = self._call(f"table {full}", lambda: self.client.tables.get(full))
        table_type, fmt = _value(info.table_type).upper(), _value(info.data_source_format).upper()
        if table_type in VIEW_TYPES:
            raise CatalogError(f"Unity Catalog table {full} is a view ({table_type}), not a Delta table: views "
                               "cannot be maintained")
        if fmt != "DELTA":
            raise CatalogError(f"Unity Catalog table {full} is not a Delta table (its format is "
                               f"{fmt.lower() or 'not given'})")
        if table_type not in TABLE_TYPES:
            raise CatalogError(f"Unity Catalog table {full} is of type {table_type or 'unknown'}; only MANAGED and "
                               "EXTERNAL Delta tables can be maintained")
        if not info.storage_location:
            raise CatalogError(f"Unity Catalog table {full} has no storage location")
        location = s3_uri(str(info.storage_location))
        properties = {str(k): str(v) for k, v in (info.properties or {}).items()}
        managed = table_type == "MANAGED" or any(properties.get(p) for p in CATALOG_FEATURE_PROPERTIES)
        credentials = (self.credentials(full, str(info.table_id or ""), location, operation)
                       if self.vend and with_credentials else None)
        return ResolvedTable(
            name=full, location=location, catalog=KIND, catalog_conn_id=self.conn_id, credentials=credentials,
            managed=managed, allowed_operations=self._delta_rules(catalog, schema, table) if managed else None,
            lineage=unity_lineage(self.host, full), properties=properties, table_id=info.table_id)

    def credentials(self, full: str, table_id: str, location: str, operation: str) -> VendedCredentials | None:
        """Temporary credentials for the table, checked to outlive the start of a run."""
        operation = operation.upper()
        if operation not in OPERATIONS:
            raise CatalogError(f"credential operation must be READ or READ_WRITE, got {operation!r}")
        if not table_id:
            raise CatalogError(f"Unity Catalog gave no table id for {full}: no credentials can be asked for")
        response = self._call(f"credentials ({operation}) for {full}", lambda: self.client.api_client.do(
            "POST", f"{API}/temporary-table-credentials", body={"table_id": table_id, "operation": operation}))
        found = vended(response or {}, location, operation)
        if found is not None:
            check_lifetime(found, full, min_lifetime_s=self.min_lifetime_s)
        return found

    def list_tables(self, schema: str, include: list[str] | None = None,
                    exclude: list[str] | None = None) -> list[str]:
        """The Delta tables (MANAGED or EXTERNAL) of ``catalog.schema``."""
        catalog, schema_name = split_name(schema, 2, "Unity Catalog schema")
        infos = self._call(f"schema {catalog}.{schema_name}", lambda: list(
            self.client.tables.list(catalog_name=catalog, schema_name=schema_name)))
        delta = {str(i.name): i for i in infos if _value(i.data_source_format).upper() == "DELTA"
                 and _value(i.table_type).upper() in TABLE_TYPES}
        return [f"{catalog}.{schema_name}.{n}" for n in select_names(delta, include, exclude)]


def workspace_client(host: str | None = None, token: str | None = None) -> Any:
    """A ``databricks-sdk`` client: ``host`` and ``token`` when given, else the SDK's own chain
    (``DATABRICKS_HOST``, ``DATABRICKS_TOKEN``, ``~/.databrickscfg`` profiles, OAuth)."""
    from databricks.sdk import WorkspaceClient

    logging.getLogger("databricks.sdk").setLevel(logging.ERROR)  # its probe of /.well-known on other servers
    return WorkspaceClient(config=client_config(host=host, token=token, auth_type="pat" if token else None))


def client_config(**settings: Any) -> Any:
    """A ``databricks-sdk`` ``Config`` of the settings given (None left out) that gives up on an unanswered
    request after :data:`RETRY_TIMEOUT_S`."""
    from databricks.sdk.config import Config

    return Config(retry_timeout_seconds=RETRY_TIMEOUT_S, **{k: v for k, v in settings.items() if v is not None})


__all__ = ["MIN_LIFETIME_S", "REFRESHED_MIN_LIFETIME_S", "RETRY_TIMEOUT_S", "UnityCatalog", "check_lifetime", "unity_lineage", "vended", "workspace_client"]
