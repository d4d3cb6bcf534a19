"""Where the installed Spark is: the ``pyspark`` package folder (a valid ``SPARK_HOME``) and the
spark-submit command, found without importing pyspark."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys


def pyspark_home() -> str | None:
    """The folder of the installed ``pyspark`` package (a valid ``SPARK_HOME``), found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))


def resolve_binary(binary: str) -> str:
    """The command to run for ``binary``: a path as given; else found on ``PATH``, next to this
    interpreter, or in ``$SPARK_HOME/bin`` (the pyspark package's when unset); else ``binary``."""
    if os.sep in binary:
        return binary
    candidates = [os.environ.get("PATH", ""), os.path.dirname(sys.executable)]
    spark_home = os.environ.get("SPARK_HOME") or pyspark_home()
    if spark_home:
        candidates.append(os.path.join(spark_home, "bin"))
    return shutil.which(binary, path=os.pathsep.join(p for p in candidates if p)) or binary
