"""Unity Catalog's vended credentials asked for again during a run, against the contract server of
``unity_server.py`` vending credentials that live a few seconds (each request's values different) and moto's S3:
a local OPTIMIZE by name that outlives its first credentials asks the server again and commits with its rows
unchanged; the command line does the same with ``DATABRICKS_TOKEN``; paths that do not refresh still refuse
credentials about to expire; the provider pickles into a Storage and never shows its token."""

from __future__ import annotations

import json
import pickle
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.resolved import VendedCredentials
from airflow_delta_maint.catalogs.unity_credentials import (
    ENV_TOKEN,
    UnityCredentialProvider,
    obstore_credential,
    provider_from_environ,
    refresh_margin,
)
from airflow_delta_maint.delta.storage.store import Storage, credential_provider_for
from airflow_delta_maint.operators.maintenance import OptimizeOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor
from tests.airflow.catalogs.test_glue_catalog import rows, write_appends
from tests.airflow.catalogs.test_unity_catalog import store_options, table_info

S3 = "s3://lake/uc-refresh"
#: the vended credentials' life in these tests: shorter than each run
LIFETIME_S = 1.5


@pytest.fixture()
def short_lived(unity_catalog):
    """Credentials of :data:`LIFETIME_S` seconds, different on every request, for this test only."""
    unity_catalog.update(lifetime_s=LIFETIME_S, rotate=True)
    try:
        yield unity_catalog
    finally:
        unity_catalog.update(lifetime_s=3600, rotate=False)


def write_wide(uri: str, options: dict[str, str], partitions: int = 150, commits: int = 2) -> None:
    """A table of ``partitions`` partitions written ``commits`` times (a file per partition and commit): an OPTIMIZE
    of it reads and writes a few hundred objects, some seconds on moto."""
    for i in range(commits):
        ids = list(range(i * partitions, (i + 1) * partitions))
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()), "part": [f"p{j}" for j in range(partitions)]}),
                        mode="append", partition_by=["part"], storage_options=options)


def asked_during(uc, start: float, end: float) -> list[float]:
    return [r["at"] for r in uc.timed_requests() if start <= r["at"] <= end]


def test_a_local_run_longer_than_its_credentials_asks_the_catalog_again(short_lived):
    uc = short_lived
    table = f"{S3}/orders"
    write_wide(table, uc.s3.s3_options)
    uc.update(tables={**uc.state()["tables"], "main.refresh.orders": table_info("main.refresh.orders", table)})
    before = rows(table, uc.s3.s3_options)
    version = DeltaTable(table, storage_options=uc.s3.s3_options).version()

    op = OptimizeOperator(task_id="o", table_name="main.refresh.orders", catalog_conn_id=uc.conn_id,
                          execution="local", storage_options=store_options(uc))
    start = time.time()
    metrics = op.execute({})
    end = time.time()

    assert metrics["status"] == "committed" and metrics["version_committed"] == version + 1, metrics
    assert metrics["numRemovedFiles"] == 300 and metrics["numAddedFiles"] == 150
    assert rows(table, uc.s3.s3_options) == before
    asked = asked_during(uc, start, end)
    # the run outlived the first credentials it was vended, and asked again after they had expired
    assert end - asked[0] > LIFETIME_S and len(asked) >= 3, (end - start, asked)
    assert max(asked) > asked[0] + LIFETIME_S - refresh_margin(LIFETIME_S), asked
    assert credential_provider_for(table) is None  # the run's provider is gone with the run
    shown = [json.dumps(metrics), json.dumps({f: getattr(op, f) for f in op.template_fields}, default=str),
             repr(op._resolved), repr(op._storage_credentials)]
    hidden = [uc.vended["secret_access_key"], uc.vended["session_token"], uc.token]
    assert [(i, j) for i, text in enumerate(shown) for j, secret in enumerate(hidden) if secret in text] == []
    assert op._storage_credentials.refresh_env[ENV_TOKEN] == uc.token
    assert uc.token in op._storage_credentials.secrets
    assert op.get_hook().submit_env()[ENV_TOKEN] == uc.token  # spark-submit's environment, not its command line


def test_the_command_line_asks_again_with_the_databricks_token(short_lived, monkeypatch, capsys):
    """``--table-name --catalog unity`` with ``DATABRICKS_TOKEN``: the run's stores ask the catalog themselves
    (credentials of 1.5 s are accepted), then the provider is dropped with the run."""
    from airflow_delta_maint.app.cli import run

    uc = short_lived
    table = f"{S3}/cli"
    write_appends(table, uc.s3.s3_options, 2)
    uc.update(tables={**uc.state()["tables"], "main.refresh.cli": table_info("main.refresh.cli", table)})
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "")  # restored after the test: vended credentials land in the environment
    monkeypatch.setenv("DATABRICKS_TOKEN", uc.token)
    store = [f"--storage-option={k}={v}" for k, v in store_options(uc).items()]
    start = time.time()
    code, metrics = run(["inspect", "--table-name", "main.refresh.cli", "--catalog", "unity", "--catalog-option",
                         f"host={uc.server.endpoint}", *store, "--json"])
    end = time.time()
    assert code == 0 and metrics["version_read"] == 1, metrics
    asked = [r for r in uc.timed_requests() if start <= r["at"] <= end]
    assert [r["operation"] for r in asked] == ["READ", "READ"]  # the name's resolution, then the run's own store
    out = capsys.readouterr()
    assert uc.token not in out.out + out.err and uc.vended["secret_access_key"] not in out.out + out.err
    assert credential_provider_for(table) is None


def test_paths_that_do_not_refresh_still_refuse_credentials_about_to_expire(unity_catalog):
    uc = unity_catalog
    table = f"{S3}/short"
    write_appends(table, uc.s3.s3_options, 2)
    uc.update(tables={**uc.state()["tables"], "main.refresh.short": table_info("main.refresh.short", table)})
    version = DeltaTable(table, storage_options=uc.s3.s3_options).version()

    def optimize() -> dict:
        return OptimizeOperator(task_id="o", table_name="main.refresh.short", catalog_conn_id=uc.conn_id,
                                execution="local", storage_options=store_options(uc)).execute({})

    try:
        uc.update(lifetime_s=60)
        with pytest.raises(CatalogError, match=r"expire in \d+ s, less than the 600 s a run needs at least"):
            CommitIntervalSensor(task_id="s", table_name="main.refresh.short", catalog_conn_id=uc.conn_id,
                                 min_commits=1, storage_options=store_options(uc)).poke({})
        uc.update(lifetime_s=0.5)
        with pytest.raises(CatalogError, match=r"less than the 1 s a run needs at least; nothing was run"):
            optimize()
        assert DeltaTable(table, storage_options=uc.s3.s3_options).version() == version
        uc.update(lifetime_s=60)
        assert optimize()["version_committed"] == version + 1  # a run that refreshes takes a minute's credentials
    finally:
        uc.update(lifetime_s=3600)


def test_the_provider_travels_with_a_storage_and_never_shows_its_token(unity_catalog):
    uc = unity_catalog
    table = f"{S3}/small"
    write_appends(table, uc.s3.s3_options, 1)
    uc.update(tables={**uc.state()["tables"], "main.refresh.small": table_info("main.refresh.small", table)})
    provider = provider_from_environ({"DELTA_MAINT_UNITY_HOST": uc.server.endpoint, ENV_TOKEN: uc.token,
                                      "DELTA_MAINT_UNITY_TABLE": "main.refresh.small"})
    assert isinstance(provider, UnityCredentialProvider) and provider.operation == "READ_WRITE"
    assert provider_from_environ({"DELTA_MAINT_UNITY_HOST": uc.server.endpoint}) is None
    before = len(uc.requests())
    first = provider()
    assert first["access_key_id"] == uc.vended["access_key_id"] and first["expires_at"] is not None
    assert provider() is first and len(uc.requests()) == before + 1  # an hour's credentials are kept
    assert uc.token not in repr(provider) and uc.token not in str(provider)

    storage = Storage(table, store_options(uc), credential_provider=provider)
    copy = pickle.loads(pickle.dumps(storage))
    assert isinstance(copy.credential_provider, UnityCredentialProvider)
    assert copy.credential_provider is not provider and copy.credential_provider.full_name == "main.refresh.small"
    assert uc.token not in repr(copy) and uc.token not in repr(copy.credential_provider)
    assert copy.exists("_delta_log/00000000000000000000.json")  # it reached S3 with credentials it asked for
    assert len(uc.requests()) == before + 2
    assert Storage("s3://lake/other", store_options(uc)).credential_provider is None


def test_azure_credentials_in_obstore_form_and_gcs_refused():
    sas = obstore_credential(VendedCredentials("azure", {"AZURE_STORAGE_SAS_TOKEN": "sv=2024&sig=abc",
                                                         "AZURE_STORAGE_ACCOUNT_NAME": "acct"}, (), 2_000_000_000.0))
    assert sas["sas_token"] == "sv=2024&sig=abc" and sas["expires_at"].timestamp() == 2_000_000_000.0
    assert obstore_credential(VendedCredentials("azure", {"AZURE_STORAGE_TOKEN": "eyJ"}, ())) == {
        "token": "eyJ", "expires_at": None}
    with pytest.raises(CatalogError, match="credentials for a gcs store cannot be refreshed"):
        obstore_credential(VendedCredentials("gcs", {"GOOGLE_BEARER_TOKEN": "ya29"}, ()))
    assert refresh_margin(3600) == 60 and refresh_margin(2) == 0.5
