"""DuckDB reads a table on the test stores: ``delta_scan`` of its delta extension (delta-kernel-rs) through the
httpfs extension on moto's S3 and the azure extension on Azurite, the three loaded from their PyPI wheels
(``duckdb-ext-delta``, ``duckdb-ext-httpfs``, ``duckdb-ext-azure``: DuckDB's extension repository is not reachable
here). One connection a process; each read names the store with a DuckDB secret (endpoint, path-style URLs and
plain http on moto; Azurite's connection string) and reads straight from the store, never through a fault proxy."""

from __future__ import annotations

import functools
import sysconfig
from pathlib import Path
from typing import Any

import duckdb

from tests.storage.conftest import Store
from tests.storage.servers import AZURITE_ACCOUNT

EXTENSIONS = ("httpfs", "azure", "delta")


def extension_library(name: str) -> Path:
    """The library of one extension, as its ``duckdb-ext-<name>`` wheel installs it for this DuckDB release."""
    folder = Path(sysconfig.get_paths()["purelib"]) / "duckdb_ext" / "extensions" / f"v{duckdb.__version__}"
    found = sorted(folder.glob(f"*/{name}.duckdb_extension"))
    if len(found) != 1:
        raise RuntimeError(f"DuckDB's {name} extension is not installed in {folder}: the test extra installs "
                           f"duckdb-ext-{name} (run make test)")
    return found[0]


@functools.cache
def connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the three extensions loaded from their wheels, downloads and autoloading off, and
    without DuckDB's cache of file contents (a file deleted from the store would still be read from it)."""
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false",
                                 "enable_external_file_cache": "false"})
    for name in EXTENSIONS:
        con.execute(f"LOAD '{extension_library(name)}'")
    return con


def secret_sql(store: Store) -> str:
    """The ``CREATE SECRET`` statement that reaches the store's server straight (moto's test credentials and
    Azurite's well-known development key)."""
    if store.name == "s3":
        options = store.options
        return (f"CREATE OR REPLACE SECRET delta_maint_s3 (TYPE s3, KEY_ID '{options['AWS_ACCESS_KEY_ID']}', "
                f"SECRET '{options['AWS_SECRET_ACCESS_KEY']}', REGION '{options['AWS_REGION']}', "
                f"ENDPOINT '{store.server.host}:{store.server.port}', URL_STYLE 'path', USE_SSL false)")
    if store.name == "azure":
        string = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
                  f"AccountKey={store.options['account_key']};BlobEndpoint={store.options['endpoint']};")
        return f"CREATE OR REPLACE SECRET delta_maint_azure (TYPE azure, CONNECTION_STRING '{string}')"
    raise ValueError(f"DuckDB does not read {store.name} tables here")


def duckdb_rows(store: Store, uri: str) -> list[dict[str, Any]]:
    """Every row of the table's latest version as DuckDB's ``delta_scan`` reads it, partition columns included.
    A live file missing from the store fails the read. On Azurite, call it within
    :func:`~tests.storage.fault_harness.delta_rs_env`: the extension reads the log at the emulator's address
    that variable names (the data files it reads through the azure extension, at the secret's endpoint)."""
    con = connection()
    con.execute(secret_sql(store))
    cursor = con.execute("SELECT * FROM delta_scan(?)", [uri])
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]
