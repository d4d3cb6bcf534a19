"""What a Spark Connect session started by the command line (no Airflow hook, so no
``$DELTA_MAINT_CONNECT_PY_FILES``) adds as the application's modules: the package zip spark-submit
ships, importable on its own by an interpreter that has only pyarrow and numpy beside it; the token
in the server's URL reaches the session only, not the log, the zip or a process's arguments."""

from __future__ import annotations

import logging
import secrets
import subprocess
import sys
import sysconfig
import zipfile

import pyspark.sql

from airflow_delta_maint.app.runners import connect_tasks


class _Session:
    """The session a Spark Connect server would give: records what the application adds."""

    def __init__(self) -> None:
        self.added: list[tuple[str, dict]] = []

    def addArtifacts(self, path: str, **kind: bool) -> None:  # noqa: N802 - pyspark's name
        self.added.append((path, kind))


class _Builder:
    def __init__(self, session: _Session) -> None:
        self.session = session
        self.urls: list[str] = []

    def remote(self, url: str) -> "_Builder":
        self.urls.append(url)
        return self

    def getOrCreate(self) -> _Session:  # noqa: N802 - pyspark's name
        return self.session


def test_the_modules_added_are_the_whole_package(monkeypatch, tmp_path, caplog):
    monkeypatch.delenv(connect_tasks.ENV_PY_FILES, raising=False)
    monkeypatch.delenv(connect_tasks.ENV_ARCHIVE, raising=False)
    monkeypatch.setenv("DELTA_MAINT_CACHE_DIR", str(tmp_path))
    session = _Session()
    builder = _Builder(session)
    monkeypatch.setattr(pyspark.sql.SparkSession, "builder", builder)
    spawned: list[list[str]] = []
    real_popen = subprocess.Popen.__init__

    def record(self, args, *rest, **kwargs):
        spawned.append([str(a) for a in args])
        real_popen(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", record)
    token = secrets.token_hex(16)
    url = f"sc://127.0.0.1:15002/;token={token}"
    with caplog.at_level(logging.DEBUG):
        assert connect_tasks.connect_session(url) is session
    assert builder.urls == [url]  # the token goes to the session, and nowhere else
    assert "sc://127.0.0.1:15002" in caplog.text and token not in caplog.text
    assert not [argv for argv in spawned if any(token in a for a in argv)]
    [(path, kind)] = session.added
    assert token not in path
    assert kind == {"pyfile": True} and path.startswith(str(tmp_path))
    names = set(zipfile.ZipFile(path).namelist())
    for module in ("app/main.py", "app/rewrite/data_files.py", "delta/storage/store.py"):
        assert f"airflow_delta_maint/{module}" in names and f"airflow_delta_maint/{module}c" in names
    # an interpreter without this checkout or its installed package: the modules come from the zip
    code = ("import sys; sys.path[:0] = [sys.argv[1]]; sys.path.append(sys.argv[2])\n"
            "import airflow_delta_maint.app.rewrite.data_files as m\n"
            "assert m.__file__.startswith(sys.argv[1]), m.__file__\n")
    subprocess.run([sys.executable, "-S", "-c", code, path, sysconfig.get_paths()["purelib"]], check=True,
                   cwd=tmp_path)
