"""The delta-spark engine on object stores: Hadoop's file systems, set up from the table's storage settings.

delta-spark reads and writes a table through Hadoop's ``FileSystem`` (``s3a://``, ``abfss://``, ``gs://``),
whose connector jars are not part of Spark. Before any work, :func:`prepare_hadoop_store` checks that the
session has the connector for the table's scheme (else one line naming the package to add), and for S3
gives the table's bucket the non-secret settings our own engine uses: the endpoint of an S3-compatible
store (with path-style access, and no TLS for ``http://``) and the region, as per-bucket Hadoop settings
(``fs.s3a.bucket.<bucket>.*``) that a setting of the user's own (per bucket or global) overrides.

Credentials never go into Spark's or Hadoop's configuration (the Spark UI and event logs show it): S3A's
default credential chain reads them from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), where the Airflow connection's credentials already are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from . import EngineSetupError

#: Hadoop scheme -> (the connector's Maven artifact, what the store is called)
CONNECTORS = {
    "s3a": ("org.apache.hadoop:hadoop-aws", "S3"),
    "abfs": ("org.apache.hadoop:hadoop-azure", "Azure Data Lake Storage"),
    "abfss": ("org.apache.hadoop:hadoop-azure", "Azure Data Lake Storage"),
    "wasb": ("org.apache.hadoop:hadoop-azure", "Azure Blob Storage"),
    "wasbs": ("org.apache.hadoop:hadoop-azure", "Azure Blob Storage"),
    "gs": ("com.google.cloud.bigdataoss:gcs-connector", "Google Cloud Storage"),
}
_ENDPOINT = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT", "endpoint", "endpoint_url", "aws_endpoint",
             "aws_endpoint_url")
_REGION = ("AWS_REGION", "AWS_DEFAULT_REGION", "region", "aws_region")


def _lookup(options: Mapping[str, str], environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` in the storage options (any case), then in the environment."""
    lowered = {str(k).lower(): v for k, v in options.items()}
    for name in names:
        if lowered.get(name.lower()):
            return str(lowered[name.lower()])
    for name in names:
        if name.isupper() and environ.get(name):
            return environ[name]
    return None


def s3a_settings(bucket: str, options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The per-bucket S3A settings for ``bucket`` from the table's storage options and the environment:
    endpoint (path-style access; TLS off for ``http://``) and region. Never a credential."""
    environ = os.environ if environ is None else environ
    prefix = f"fs.s3a.bucket.{bucket}."
    out: dict[str, str] = {}
    endpoint = _lookup(options, environ, _ENDPOINT)
    if endpoint:
        out[prefix + "endpoint"] = endpoint
        out[prefix + "path.style.access"] = "true"
        if endpoint.lower().startswith("http://"):
            out[prefix + "connection.ssl.enabled"] = "false"
    region = _lookup(options, environ, _REGION)
    if region:
        out[prefix + "endpoint.region"] = region
    return out


def _global_key(key: str, bucket: str) -> str:
    return key.replace(f"fs.s3a.bucket.{bucket}.", "fs.s3a.", 1)


def _user_set(conf: Any, key: str) -> bool:
    """Whether ``key`` is set other than by Hadoop's own defaults (``core-default.xml``, ...)."""
    if conf.get(key) is None:
        return False
    sources = conf.getPropertySources(key)
    return not sources or not all(str(s).endswith("-default.xml") for s in sources)


def prepare_hadoop_store(spark: Any, hadoop_path: str, options: Mapping[str, str]) -> None:
    """Check that ``spark`` can reach ``hadoop_path`` through Hadoop, and give an S3 bucket our settings.

    Raises:
        EngineSetupError: the session has no file system for the path's scheme (one line: the package).
    """
    parts = urlsplit(hadoop_path)
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        return
    if scheme in ("az", "azure", "adl"):
        raise EngineSetupError(f"the delta-spark engine reaches Azure tables through Hadoop's ABFS file system, which "
                               f"has no {scheme}:// scheme: give the table as "
                               "abfss://<container>@<account>.dfs.core.windows.net/<path>")
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
    except Exception:  # noqa: BLE001 - py4j: no file system for the scheme, or its class is not on the classpath
        artifact, store = CONNECTORS.get(scheme, (None, scheme))
        hadoop = str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())
        add = (f"add {artifact}:{hadoop} (built for the session's Hadoop {hadoop}) to the Spark connection's "
               "packages" if artifact and artifact.startswith("org.apache.hadoop") else
               f"add {artifact} to the Spark connection's packages" if artifact else
               "configure a Hadoop file system for it")
        raise EngineSetupError(f"the delta-spark engine reaches {scheme}:// tables through Hadoop's file system for "
                               f"{store}, which is not on the session's classpath: {add}; or use engine 'native', "
                               "which needs no jars") from None
    if scheme == "s3a" and parts.netloc:
        for key, value in s3a_settings(parts.netloc, options).items():
            if not _user_set(conf, key) and not _user_set(conf, _global_key(key, parts.netloc)):
                conf.set(key, value)
