"""A Hive metastore's Thrift server for the tests: the ``HiveMetaStore`` of the Hive 2.3 jars pyspark ships, on an
embedded Derby database, started as a child process and stopped by its process id (``Server.stop``). The catalog
tests (``tests/airflow/catalogs``) and the delta-spark tests (``tests/delta_spark``) both start it from here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyspark

from tests.storage.servers import Server, free_port, wait_for_port


def start_hive_metastore(workdir: Path, port: int | None = None) -> Server:
    """``org.apache.hadoop.hive.metastore.HiveMetaStore`` from pyspark's jars (Hive 2.3) on ``127.0.0.1`` (on
    ``port``, a free one when None), its schema created in an embedded Derby database under ``workdir``; its log
    in ``workdir/metastore.log``."""
    port = free_port() if port is None else port
    jars = Path(pyspark.__file__).parent / "jars"
    argv = ["java", "-Xmx512m", "-cp", f"{jars}/*", "-Dhive.async.log.enabled=false",
            f"-Djavax.jdo.option.ConnectionURL=jdbc:derby:;databaseName={workdir / 'metastore_db'};create=true",
            "-Ddatanucleus.schema.autoCreateAll=true", "-Dhive.metastore.schema.verification=false",
            f"-Dhive.metastore.warehouse.dir={workdir / 'warehouse'}", f"-Dderby.system.home={workdir}",
            "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(port)]
    with open(workdir / "metastore.log", "wb") as log:
        proc = subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "HADOOP_USER_NAME": "maint"})
    server = Server("hive-metastore", port, proc)
    try:
        wait_for_port(port, proc, timeout=180)
    except Exception:
        server.stop()
        raise
    return server
