"""Tables by name in Unity Catalog through databricks-sdk, against the contract server of ``unity_server.py`` (no
real Unity Catalog server): resolution, listing, temporary credentials (READ for reads, READ_WRITE for writes)
on moto's S3, the catalog-managed gate with ``allowed-maintenance-operations``, expiring credentials refused,
and the vended secrets kept off command lines, metrics, rendered fields and reprs."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.resolved import VendedCredentials
from airflow_delta_maint.catalogs.unity import check_lifetime, unity_lineage, vended
from airflow_delta_maint.hooks.catalogs import catalog_for
from airflow_delta_maint.hooks.catalogs.table_target import list_catalog_tables
from airflow_delta_maint.operators.maintenance import InspectTableOperator, OptimizeOperator, VacuumOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor
from tests.airflow.catalogs.test_glue_catalog import rows, write_appends
from tests.airflow.operators.conftest import argv_of

S3 = "s3://lake/uc"


def table_info(name: str, location: str | None, table_type: str = "EXTERNAL", fmt: str = "DELTA",
               **more: object) -> dict:
    catalog, schema, table = name.split(".")
    return {"name": table, "catalog_name": catalog, "schema_name": schema, "full_name": name,
            "table_type": table_type, "data_source_format": fmt, "storage_location": location,
            "table_id": f"id-{table}", **more}


@pytest.fixture(scope="module")
def uc(unity_catalog):
    """Schema ``main.shop``: ``orders`` (EXTERNAL Delta, 6 commits), ``managed`` (MANAGED Delta, 3), ``recent`` (a
    view), ``raw`` (parquet), ``tmp_x`` (EXTERNAL Delta, 2)."""
    options = unity_catalog.s3.s3_options
    for table, commits in (("orders", 6), ("managed", 3), ("tmp_x", 2)):
        write_appends(f"{S3}/{table}", options, commits)
    unity_catalog.update(tables={
        "main.shop.orders": table_info("main.shop.orders", f"{S3}/orders"),
        "main.shop.managed": table_info("main.shop.managed", f"{S3}/managed", "MANAGED"),
        "main.shop.recent": table_info("main.shop.recent", None, "VIEW", "DELTA"),
        "main.shop.raw": table_info("main.shop.raw", f"{S3}/raw", fmt="PARQUET"),
        "main.shop.tmp_x": table_info("main.shop.tmp_x", f"{S3}/tmp_x"),
    })
    return unity_catalog


def store_options(uc) -> dict[str, str]:
    """What a task names besides the catalog: the store's endpoint and region, no secret."""
    return {"AWS_ENDPOINT_URL": uc.s3.server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}


def test_names_resolve_with_credentials_for_the_operation(uc):
    catalog = catalog_for(uc.conn_id)
    before = len(uc.requests())
    orders = catalog.resolve("main.shop.orders")
    assert (orders.location, orders.catalog, orders.managed, orders.table_id) == (
        f"{S3}/orders", "unity", False, "id-orders")
    assert orders.lineage == (f"databricks://{uc.host}", "main.shop.orders") == unity_lineage(uc.host, "main.shop.orders")
    assert orders.credentials is not None and orders.credentials.env == {
        "AWS_ACCESS_KEY_ID": uc.vended["access_key_id"], "AWS_SECRET_ACCESS_KEY": uc.vended["secret_access_key"],
        "AWS_SESSION_TOKEN": uc.vended["session_token"]}
    writable = catalog.resolve("main.shop.orders", "READ_WRITE")
    assert writable.credentials is not None and writable.credentials.operation == "READ_WRITE"
    assert uc.requests()[before:] == [{"table_id": "id-orders", "operation": "READ"},
                                      {"table_id": "id-orders", "operation": "READ_WRITE"}]
    for secret in (uc.vended["secret_access_key"], uc.vended["session_token"]):
        assert secret not in repr(orders) and secret not in repr(orders.credentials)


def test_listing_keeps_delta_tables(uc):
    assert list_catalog_tables(uc.conn_id, "main.shop") == ["main.shop.managed", "main.shop.orders",
                                                            "main.shop.tmp_x"]
    assert list_catalog_tables(uc.conn_id, "main.shop", exclude="tmp_*", include=["o*"]) == ["main.shop.orders"]
    with pytest.raises(CatalogError, match=r"has no schema main.nope"):
        list_catalog_tables(uc.conn_id, "main.nope")
    with pytest.raises(CatalogError, match=r"Unity Catalog schema table name 'shop' is not of the form"):
        list_catalog_tables(uc.conn_id, "shop")


@pytest.mark.parametrize("name, message", [
    ("main.shop.nope", r"^Unity Catalog at 127.0.0.1:\d+ \(connection 'unity_lake'\) has no table main.shop.nope$"),
    ("main.shop.recent", r"^Unity Catalog table main.shop.recent is a view \(VIEW\), not a Delta table"),
    ("main.shop.raw", r"^Unity Catalog table main.shop.raw is not a Delta table \(its format is parquet\)$"),
    ("shop.orders", r"is not of the form catalog.schema.table"),
])
def test_bad_names_fail_in_one_line_and_write_nothing(uc, name, message):
    before = DeltaTable(f"{S3}/orders", storage_options=uc.s3.s3_options).version()
    with pytest.raises(CatalogError, match=message) as exc:
        OptimizeOperator(task_id="o", table_name=name, catalog_conn_id=uc.conn_id, execution="local",
                         storage_options=store_options(uc)).execute({})
    assert "\n" not in str(exc.value)
    assert DeltaTable(f"{S3}/orders", storage_options=uc.s3.s3_options).version() == before


def test_a_wrong_token_is_refused_in_one_line(uc, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_UNITY_WRONG", json.dumps({"conn_type": "databricks", "host": uc.server.endpoint,
                                                              "password": "not-the-token"}))
    with pytest.raises(CatalogError, match=r"\(connection 'unity_wrong'\) refused table main.shop.orders: "):
        catalog_for("unity_wrong").resolve("main.shop.orders")


def test_optimize_by_name_uses_the_vended_credentials_and_never_shows_them(uc):
    options = uc.s3.s3_options
    before = rows(f"{S3}/orders", options)
    op = OptimizeOperator(task_id="o", table_name="main.shop.orders", catalog_conn_id=uc.conn_id, execution="local",
                          storage_options=store_options(uc))
    metrics = op.execute({})
    assert metrics["status"] == "committed" and metrics["table_name"] == "main.shop.orders"
    assert metrics["numRemovedFiles"] == 12 and metrics["numAddedFiles"] == 2
    assert rows(f"{S3}/orders", options) == before
    assert uc.requests()[-1] == {"table_id": "id-orders", "operation": "READ_WRITE"}
    lineage = op.get_openlineage_facets_on_complete(None)
    assert (lineage.outputs[0].namespace, lineage.outputs[0].name) == (f"databricks://{uc.host}", "main.shop.orders")

    # the vended secrets: in the spark-submit child's environment only
    hidden = [uc.vended["secret_access_key"], uc.vended["session_token"], uc.token]
    hook = op.get_hook()
    cmd = hook.build_command("optimize", op.table_uri, argv_of(op), "/tmp/m.json", op.table_storage_options)
    env = hook.submit_env()
    assert env["AWS_SECRET_ACCESS_KEY"] == hidden[0] and env["AWS_SESSION_TOKEN"] == hidden[1]
    shown = [json.dumps(metrics), " ".join(cmd), json.dumps({f: getattr(op, f) for f in op.template_fields}, default=str),
             repr(op._resolved), json.dumps({k: str(v) for k, v in hook._conf.items()})]
    assert [(i, j) for i, text in enumerate(shown) for j, secret in enumerate(hidden) if secret in text] == []
    from airflow.sdk.log import _secrets_masker

    assert all(secret not in str(_secrets_masker().redact(f"x {secret} y")) for secret in hidden)


def test_reads_ask_for_read_credentials(uc):
    inspect = InspectTableOperator(task_id="i", table_name="main.shop.tmp_x", catalog_conn_id=uc.conn_id,
                                   execution="local", storage_options=store_options(uc)).execute({})
    assert inspect["version_read"] == 1 and uc.requests()[-1] == {"table_id": "id-tmp_x", "operation": "READ"}
    seen = CommitIntervalSensor(task_id="s", table_name="main.shop.tmp_x", catalog_conn_id=uc.conn_id, min_commits=2,
                                storage_options=store_options(uc)).poke({})
    assert seen.is_done and uc.requests()[-1]["operation"] == "READ"


def test_managed_tables_follow_the_allowed_maintenance_operations(uc):
    options = uc.s3.s3_options
    before = rows(f"{S3}/managed", options)
    version = DeltaTable(f"{S3}/managed", storage_options=options).version()

    def optimize() -> dict:
        return OptimizeOperator(task_id="o", table_name="main.shop.managed", catalog_conn_id=uc.conn_id,
                                execution="local", storage_options=store_options(uc)).execute({})

    with pytest.raises(CatalogError, match=r"^main.shop.managed is managed by Unity Catalog \(connection 'unity_lake', "
                                           r"the catalog\): .* reports no maintenance operation allowed; optimize refused"):
        optimize()
    assert DeltaTable(f"{S3}/managed", storage_options=options).version() == version
    uc.update(allowed={"main.shop.managed": ["OPTIMIZE"]})
    try:
        assert optimize()["status"] == "committed"
        with pytest.raises(CatalogError, match=r"it allows only OPTIMIZE; vacuum refused, nothing written"):
            VacuumOperator(task_id="v", table_name="main.shop.managed", catalog_conn_id=uc.conn_id, execution="local",
                           storage_options=store_options(uc)).execute({})
    finally:
        uc.update(allowed={})
    assert rows(f"{S3}/managed", options) == before


def test_credentials_about_to_expire_are_refused_before_anything_runs(uc):
    """delta-spark's engine does not ask again (its Hadoop store reads the environment once): 10 minutes at least."""
    version = DeltaTable(f"{S3}/tmp_x", storage_options=uc.s3.s3_options).version()
    uc.update(lifetime_s=60)
    try:
        with pytest.raises(CatalogError, match=r"^the credentials Unity Catalog vended for main.shop.tmp_x expire in "
                                               r"\d+ s, less than the 600 s a run needs at least; nothing was run$"):
            OptimizeOperator(task_id="o", table_name="main.shop.tmp_x", catalog_conn_id=uc.conn_id,
                             engine="delta-spark", storage_options=store_options(uc)).execute({})
    finally:
        uc.update(lifetime_s=3600)
    assert DeltaTable(f"{S3}/tmp_x", storage_options=uc.s3.s3_options).version() == version


def test_vended_azure_and_gcs_credentials():
    sas = vended({"azure_user_delegation_sas": {"sas_token": "?sv=2024&sig=abc"}, "expiration_time": 2_000_000_000_000},
                 "abfss://lake@acct.dfs.core.windows.net/t", "READ")
    assert (sas.family, sas.env, sas.secrets, sas.expires_at) == (
        "azure", {"AZURE_STORAGE_SAS_TOKEN": "sv=2024&sig=abc", "AZURE_STORAGE_ACCOUNT_NAME": "acct"},
        ("sv=2024&sig=abc",), 2_000_000_000.0)
    aad = vended({"azure_aad": {"aad_token": "eyJ-token"}}, "abfss://lake@acct.dfs.core.windows.net/t", "READ_WRITE")
    assert aad.env["AZURE_STORAGE_TOKEN"] == "eyJ-token" and aad.secrets == ("eyJ-token",) and aad.expires_at is None
    with pytest.raises(CatalogError, match="vended a GCS OAuth token, which this provider's store client cannot use"):
        vended({"gcp_oauth_token": {"oauth_token": "ya29.x"}}, "gs://b/t", "READ")
    with pytest.raises(CatalogError, match="vended no storage credentials"):
        vended({}, "s3://b/t", "READ")
    creds = VendedCredentials("s3", {}, (), expires_at=1000.0)
    check_lifetime(creds, "c.s.t", now=300.0)
    with pytest.raises(CatalogError, match=r"expire in 99 s, less than the 600 s"):
        check_lifetime(creds, "c.s.t", now=901.0)


def test_the_command_line_finds_tables_by_name_with_credentials_from_the_environment(uc, monkeypatch, capsys):
    """``delta-maint inspect --table-name``: Unity Catalog (its token from ``DATABRICKS_TOKEN``) and Glue (boto3's
    ``AWS_*`` chain); flags carry no secret, the metrics none either."""
    from airflow_delta_maint.app.cli import run
    from tests.airflow.catalogs.test_glue_catalog import spark_on_emr

    store = [f"--storage-option={k}={v}" for k, v in store_options(uc).items()]
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "")  # restored after the test: vended credentials land in the environment
    monkeypatch.setenv("DATABRICKS_TOKEN", uc.token)
    before = rows(f"{S3}/tmp_x", uc.s3.s3_options)
    code, metrics = run(["inspect", "--table-name", "main.shop.tmp_x", "--catalog", "unity", "--catalog-option",
                         f"host={uc.server.endpoint}", *store, "--json"])
    assert code == 0 and metrics["table_name"] == "main.shop.tmp_x" and metrics["table"] == f"{S3}/tmp_x"
    assert metrics["version_read"] == 1 and uc.requests()[-1]["operation"] == "READ"
    out = capsys.readouterr().out
    assert uc.vended["secret_access_key"] not in out and uc.token not in out
    assert rows(f"{S3}/tmp_x", uc.s3.s3_options) == before

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDGLUELAKE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", uc.s3.secret)
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    uc.s3.glue.create_database(DatabaseInput={"Name": "cli"})
    uc.s3.glue.create_table(DatabaseName="cli", TableInput=spark_on_emr("orders", "s3a://lake/uc/orders"))
    glue = ["--catalog", "glue", "--catalog-option", "region_name=us-east-1", "--catalog-option",
            f"endpoint_url={uc.s3.server.endpoint}", *store, "--json"]
    code, metrics = run(["inspect", "--table-name", "cli.orders", *glue])
    assert code == 0 and metrics["table_name"] == "cli.orders" and metrics["table"] == f"{S3}/orders"
    code, metrics = run(["inspect", "--table-name", "cli.nope", *glue])
    assert code == 2 and metrics["error"] == "Glue (connection '--catalog glue') has no table cli.nope"
    code, metrics = run(["optimize", "--table-name", "main.shop.managed", "--catalog", "unity", "--catalog-option",
                         f"host={uc.server.endpoint}", *store, "--json"])
    assert code == 2 and "managed by Unity Catalog" in metrics["error"] and "optimize refused" in metrics["error"]
