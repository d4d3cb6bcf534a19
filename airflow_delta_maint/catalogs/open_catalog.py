"""A catalog from the command line's choice of catalog (glue, hive or unity) and its settings ``K=V``, and the
environment: credentials come from each client's own chain (boto3's ``AWS_*`` variables and profiles, the
Databricks SDK's ``DATABRICKS_HOST`` / ``DATABRICKS_TOKEN`` and ``~/.databrickscfg``), never from flags."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.resolved import TableCatalog

KINDS = ("glue", "hive", "unity")
#: the options each catalog takes (none of them a secret)
OPTIONS = {"glue": ("region_name", "endpoint_url", "profile_name"), "hive": ("host", "port"),
           "unity": ("host", "profile", "vend_credentials")}


def open_catalog(kind: str, options: Mapping[str, str]) -> TableCatalog:
    """The catalog ``kind`` with ``options``; raises :class:`CatalogError` for an unknown kind or option."""
    kind = str(kind or "").strip().lower()
    if kind not in KINDS:
        raise CatalogError(f"--catalog must be one of {', '.join(KINDS)}, got {kind!r}")
    unknown = sorted(set(options) - set(OPTIONS[kind]))
    if unknown:
        raise CatalogError(f"--catalog {kind} takes the options {', '.join(OPTIONS[kind])}, not {', '.join(unknown)} "
                           "(credentials come from the environment, never from flags)")
    label = f"--catalog {kind}"
    if kind == "glue":
        from airflow_delta_maint.catalogs.glue import GlueCatalog

        session = _boto_session(options.get("profile_name"))
        home = session.client("glue", region_name=options.get("region_name"), endpoint_url=options.get("endpoint_url"))

        def client_for(region: str | None) -> Any:
            if not region:
                return home
            return session.client("glue", region_name=region, endpoint_url=options.get("endpoint_url"))

        return GlueCatalog(client_for, str(home.meta.region_name or ""), label)
    if kind == "hive":
        from airflow_delta_maint.catalogs.hive import DEFAULT_PORT, HiveCatalog

        if not options.get("host"):
            raise CatalogError("the hive catalog needs the catalog option host=METASTORE_HOST")
        return HiveCatalog(options["host"], int(options.get("port") or DEFAULT_PORT), label)
    from airflow_delta_maint.catalogs.unity import UnityCatalog, client_config, workspace_client

    if options.get("profile"):
        from databricks.sdk import WorkspaceClient

        client = WorkspaceClient(config=client_config(profile=options["profile"], host=options.get("host")))
    else:
        client = workspace_client(options.get("host"))
    vend = str(options.get("vend_credentials", "true")).strip().lower() not in ("false", "0", "no")
    return UnityCatalog(client, label, vend=vend)


def _boto_session(profile: str | None) -> Any:
    import boto3

    return boto3.session.Session(profile_name=profile) if profile else boto3.session.Session()


__all__ = ["KINDS", "OPTIONS", "open_catalog"]
