"""Object-store credentials from Airflow connections, kept out of command lines, logs and XCom.

An operator, the sensor or the trigger names a connection with ``storage_conn_id``: type ``aws``,
``wasb`` / ``adls`` (Azure) or ``google_cloud_platform``. :func:`resolve_storage_credentials`
turns it into the variables obstore and delta-rs read (``AWS_ACCESS_KEY_ID``,
``AZURE_STORAGE_ACCOUNT_KEY``, ``GOOGLE_SERVICE_ACCOUNT_KEY``, ...). The result is used two ways:

- as the environment of the spark-submit child process only (never ``--conf`` flags, never
  application arguments), so the Spark driver reads them as it reads a shell's variables;
- as in-process storage options for the checks that run on the worker or in the triggerer.

Every secret value is registered with Airflow's secrets masker, so a stray log line is redacted.
Where the official Amazon provider is installed, its ``AwsBaseHook`` resolves the connection
(role assumption, session tokens, profiles); otherwise the connection's fields are read directly.
Azure and Google connections are read field by field, with the field conventions of their
providers' hooks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.delta.storage.options import store_family

if TYPE_CHECKING:
    from airflow.sdk import Connection

#: parts of a storage option key that name a secret (case-insensitive)
SECRET_KEY_PATTERN = re.compile(
    r"secret|password|passwd|token|account_key|access_key|sas|private_key|credential|service_account_key|"
    r"client_assertion|connection_string",
    re.IGNORECASE,
)
#: keys that match the pattern but name no secret (a file path, a switch, the key's public id)
_NOT_SECRET = re.compile(
    r"(_file|_path|_url|_endpoint)$|^(aws_)?access_key_id$|^(aws_)?force_credential_load$|"
    r"^google_application_credentials$|^aws_skip_signature$|^(azure_)?use_azure_cli$",
    re.IGNORECASE,
)

#: connection types per store family
CONN_TYPES = {"aws": "s3", "s3": "s3", "wasb": "azure", "adls": "azure", "azure_data_lake": "azure",
              "google_cloud_platform": "gcs", "gcpcloudsql": "gcs"}

#: the credential variables of each family that a connection replaces in the spark-submit environment
#: (so an ambient session token or profile never mixes with the connection's keys)
AMBIENT_CREDENTIAL_VARS = {
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE",
           "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
           "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN"),
    "azure": ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_MASTER_KEY", "AZURE_STORAGE_KEY",
              "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_TOKEN", "AZURE_CLIENT_ID",
              "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_STORAGE_USE_EMULATOR"),
    "gcs": ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS"),
}


@dataclass(frozen=True)
class StorageCredentials:
    """What a connection gives a store: variables, which of their values are secrets, and what they replace.

    ``env`` holds obstore / delta-rs variable names (``AWS_ACCESS_KEY_ID``, ...); the same names
    are valid storage options, so ``env`` is also what in-process checks pass to the core.
    ``refresh_env`` holds what the application asks the catalog again with (``DELTA_MAINT_UNITY_*``, a token
    among them): spark-submit's environment only, never a storage option.
    """

    conn_id: str
    family: str
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    unset: tuple[str, ...] = ()
    refresh_env: dict[str, str] = field(default_factory=dict)

    @property
    def options(self) -> dict[str, str]:
        """The variables as storage options for the Delta core, in this process only."""
        return dict(self.env)

    def __repr__(self) -> str:  # never show a value
        return (f"StorageCredentials(conn_id={self.conn_id!r}, family={self.family!r}, keys={sorted(self.env)}, "
                f"refreshed={bool(self.refresh_env)})")

    __str__ = __repr__


# -- refusing secrets in storage_options ---------------------------------------------------------
def secret_option_keys(options: Mapping[str, Any] | None) -> list[str]:
    """The keys of ``options`` that name a secret (``AWS_SECRET_ACCESS_KEY``, ``account_key``, ``sas_token``, ...)."""
    return [str(k) for k in (options or {}) if SECRET_KEY_PATTERN.search(str(k)) and not _NOT_SECRET.search(str(k))]


def refuse_secret_options(options: Mapping[str, Any] | None, where: str) -> None:
    """Raise when ``storage_options`` holds a secret: those are stored and shown as plain values.

    :param options: the storage options given to an operator, the sensor or the trigger.
    :param where: the task or class named in the message.
    :raises AirflowException: naming the keys and pointing to ``storage_conn_id``.
    """
    if not isinstance(options, Mapping):
        return
    keys = secret_option_keys(options)
    if keys:
        raise AirflowException(
            f"{where}: storage_options must not hold secrets ({', '.join(sorted(keys))}): they would be stored "
            "in the DAG, the rendered task fields and the spark-submit command line. Put the credentials in an "
            "Airflow connection (type aws, wasb, adls or google_cloud_platform) and pass its id as storage_conn_id; "
            "keep storage_options for non-secret settings such as the endpoint or the region."
        )


# -- the secrets masker --------------------------------------------------------------------------
def mask_value(value: str) -> None:
    """Register ``value`` with Airflow's secrets masker, so no log line shows it."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDKs
        try:
            from airflow.sdk.execution_time.secrets_masker import mask_secret  # type: ignore[no-redef]
        except ImportError:
            from airflow.utils.log.secrets_masker import mask_secret  # type: ignore[no-redef]
    mask_secret(value)


# -- connections ---------------------------------------------------------------------------------
def get_connection(conn_id: str) -> Connection:
    """The Airflow connection ``conn_id`` (the task SDK's lookup: secrets backends, ``AIRFLOW_CONN_*``, API)."""
    from airflow.sdk.bases.hook import BaseHook

    return BaseHook.get_connection(conn_id)


async def aget_connection(conn_id: str) -> Connection:
    """The connection, fetched without blocking an event loop (for the triggerer)."""
    from airflow.sdk.bases.hook import BaseHook

    return await BaseHook.aget_connection(conn_id)


def _extra(conn: Connection) -> dict[str, Any]:
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else json.loads(conn.extra or "{}")
    out = {}
    for key, value in (extra or {}).items():
        # providers of old wrote their extras with a prefix: extra__google_cloud_platform__key_path
        short = key.split("__")[-1] if key.startswith("extra__") else key
        if value not in (None, ""):
            out[short] = value
    return out


def _allow_http(env: dict[str, str], prefix: str, endpoint: str | None) -> None:
    if endpoint and urlparse(endpoint).scheme == "http":
        env[f"{prefix}_ALLOW_HTTP"] = "true"


def _aws(conn: Connection, use_provider: bool) -> tuple[dict[str, str], list[str]]:
    extra = _extra(conn)
    hook_cls = _aws_hook_class() if use_provider else None
    env: dict[str, str] = {}
    if hook_cls is not None:
        hook = hook_cls(aws_conn_id=conn.conn_id, client_type="s3")
        hook.get_connection = lambda _conn_id: conn  # the connection already fetched (also in the triggerer)
        config = hook.conn_config
        region = config.region_name
        creds = hook.get_credentials(region_name=region)
        access_key, secret_key, token = creds.access_key, creds.secret_key, creds.token
        endpoint = config.get_service_endpoint_url("s3")
    else:
        for unsupported in ("role_arn", "profile_name", "assume_role_method"):
            if extra.get(unsupported):
                raise AirflowException(
                    f"the AWS connection {conn.conn_id!r} sets {unsupported!r}, which needs the Amazon provider: "
                    "pip install 'airflow-delta-maint[amazon]' (apache-airflow-providers-amazon)"
                )
        access_key = conn.login or extra.get("aws_access_key_id")
        secret_key = conn.password or extra.get("aws_secret_access_key")
        token = extra.get("aws_session_token")
        region = extra.get("region_name") or extra.get("region")
        endpoint = extra.get("endpoint_url") or (conn.host if conn.host and "://" in conn.host else None)
    if access_key:
        env["AWS_ACCESS_KEY_ID"] = str(access_key)
    if secret_key:
        env["AWS_SECRET_ACCESS_KEY"] = str(secret_key)
    if token:
        env["AWS_SESSION_TOKEN"] = str(token)
    if region:
        env["AWS_REGION"] = str(region)
    if endpoint:
        env["AWS_ENDPOINT_URL"] = str(endpoint)
        _allow_http(env, "AWS", str(endpoint))
    return env, [v for v in (secret_key, token) if v]


def _aws_hook_class() -> Any | None:
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        return None
    return AwsBaseHook


def _parse_connection_string(value: str) -> dict[str, str]:
    parts = {}
    for item in value.split(";"):
        key, sep, val = item.partition("=")
        if sep:
            parts[key.strip().lower()] = val.strip()
    return parts


def _account_from_host(host: str | None) -> str | None:
    if not host:
        return None
    netloc = urlparse(host).netloc if "://" in host else host
    name = netloc.split(".", 1)[0].split(":", 1)[0]
    return name or None


def _azure(conn: Connection) -> tuple[dict[str, str], list[str]]:
    extra = _extra(conn)
    env: dict[str, str] = {}
    secrets: list[str] = []
    host = conn.host or extra.get("account_url")
    endpoint = host if host and "://" in host else None
    if conn.conn_type == "adls":  # AzureDataLakeStorageV2Hook: host = account name, login = client id
        account = extra.get("account_name") or (None if endpoint else host) or _account_from_host(endpoint)
    else:  # WasbHook: login = account name (or client id with a tenant), host = account URL
        account = extra.get("account_name") or (conn.login if not extra.get("tenant_id") else None)
        account = account or _account_from_host(endpoint)
    connection_string = extra.get("connection_string")
    if connection_string:
        parts = _parse_connection_string(str(connection_string))
        account = parts.get("accountname", account)
        if parts.get("accountkey"):
            env["AZURE_STORAGE_ACCOUNT_KEY"] = parts["accountkey"]
            secrets.append(parts["accountkey"])
        if parts.get("sharedaccesssignature"):
            env["AZURE_STORAGE_SAS_TOKEN"] = parts["sharedaccesssignature"]
            secrets.append(parts["sharedaccesssignature"])
        endpoint = parts.get("blobendpoint", endpoint)
        secrets.append(str(connection_string))
    elif extra.get("tenant_id") and conn.login and conn.password:
        env.update(AZURE_CLIENT_ID=conn.login, AZURE_CLIENT_SECRET=conn.password,
                   AZURE_TENANT_ID=str(extra["tenant_id"]))
        secrets.append(conn.password)
    elif extra.get("sas_token"):
        env["AZURE_STORAGE_SAS_TOKEN"] = str(extra["sas_token"]).lstrip("?")
        secrets.append(env["AZURE_STORAGE_SAS_TOKEN"])
    elif conn.password or extra.get("shared_access_key"):
        key = conn.password or str(extra["shared_access_key"])
        env["AZURE_STORAGE_ACCOUNT_KEY"] = key
        secrets.append(key)
    if account:
        env["AZURE_STORAGE_ACCOUNT_NAME"] = str(account)
    if endpoint:
        env["AZURE_ENDPOINT"] = str(endpoint).rstrip("/")
        _allow_http(env, "AZURE", str(endpoint))
    return env, secrets


def _google(conn: Connection) -> tuple[dict[str, str], list[str]]:
    extra = _extra(conn)
    env: dict[str, str] = {}
    secrets: list[str] = []
    keyfile = extra.get("keyfile_dict")
    if keyfile:
        text = keyfile if isinstance(keyfile, str) else json.dumps(keyfile)
        env["GOOGLE_SERVICE_ACCOUNT_KEY"] = text
        secrets.append(text)
        with_key = json.loads(text) if isinstance(keyfile, str) else keyfile
        if isinstance(with_key, dict) and with_key.get("private_key"):
            secrets.append(str(with_key["private_key"]))
    elif extra.get("key_path"):
        env["GOOGLE_SERVICE_ACCOUNT"] = str(extra["key_path"])
    elif extra.get("key_secret_name"):
        raise AirflowException(
            f"the Google connection {conn.conn_id!r} names a Secret Manager key (key_secret_name), which is not "
            "supported here; put the key in keyfile_dict or key_path"
        )
    return env, secrets


def credentials_from_connection(conn: Connection, table_uri: str | None = None,
                                use_provider: bool = True) -> StorageCredentials:
    """
    Turn a fetched connection into store variables and register its secrets with the masker.

    :param conn: an Airflow connection of type ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform``.
    :param table_uri: the table it is for: the connection must be of the table's store family.
    :param use_provider: use the Amazon provider's hook when it is installed.
    :raises AirflowException: for another connection type, or a type that does not fit the table.
    """
    family = CONN_TYPES.get(str(conn.conn_type or "").lower())
    if family is None:
        raise AirflowException(
            f"storage connection {conn.conn_id!r} has type {conn.conn_type!r}; use a connection of type aws (S3), "
            "wasb or adls (Azure), or google_cloud_platform (GCS)"
        )
    if table_uri is not None:
        from airflow_delta_maint.delta.storage.store import normalize_table_uri

        table_family = store_family(normalize_table_uri(table_uri))
        if table_family != family:
            raise AirflowException(
                f"storage connection {conn.conn_id!r} (type {conn.conn_type}) does not fit the table {table_uri} "
                f"({'a local path' if table_family == 'local' else table_family})"
            )
    if family == "s3":
        env, secrets = _aws(conn, use_provider)
    elif family == "azure":
        env, secrets = _azure(conn)
    else:
        env, secrets = _google(conn)
    for value in secrets:
        mask_value(str(value))
    return StorageCredentials(conn_id=conn.conn_id, family=family, env=env, secrets=tuple(str(s) for s in secrets),
                              unset=AMBIENT_CREDENTIAL_VARS.get(family, ()))


def resolve_storage_credentials(conn_id: str | None, table_uri: str | None = None,
                                use_provider: bool = True) -> StorageCredentials | None:
    """The store variables of connection ``conn_id`` (None without a connection: ambient credentials apply).

    :raises AirflowException: when the connection is missing or does not fit the table.
    """
    if not conn_id:
        return None
    return credentials_from_connection(get_connection(conn_id), table_uri, use_provider)


def worker_options(credentials: StorageCredentials | None, options: Mapping[str, Any] | None) -> dict[str, str]:
    """Storage options for the Delta core in this process: the connection's, under the explicit options."""
    merged = dict(credentials.options) if credentials is not None else {}
    merged.update({str(k): str(v) for k, v in (options or {}).items()})
    return merged


__all__ = [
    "StorageCredentials", "SECRET_KEY_PATTERN", "secret_option_keys", "refuse_secret_options",
    "credentials_from_connection", "resolve_storage_credentials", "worker_options", "get_connection",
    "aget_connection", "mask_value",
]
