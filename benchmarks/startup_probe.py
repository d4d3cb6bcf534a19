"""Submitted by ``bench_startup.py``: the driver's start-up phases of an OPTIMIZE run, timed.

Prints one JSON line of wall-clock marks (``time.time()``): Python started, the application's
modules imported, the table's snapshot loaded and planned, the SparkSession up, the first
Spark task done. With ``PROBE_OVERLAP=1`` the SparkSession starts in a thread before planning,
as the application does under spark-submit.
"""

import json
import os
import sys
import time

marks = {"python": time.time()}
from airflow_delta_maint.app import cli  # noqa: E402,F401  (the application's own imports)
from airflow_delta_maint.app.jobs.optimize import nothing_to_do, options_from  # noqa: E402
from airflow_delta_maint.app.spark_session import get_spark, start_in_background  # noqa: E402

marks["imported"] = time.time()
if os.environ.get("PROBE_OVERLAP") == "1":
    start_in_background()
reason = nothing_to_do(sys.argv[1], {}, options_from({}))
marks["planned"] = time.time()
spark = get_spark()
marks["session"] = time.time()
spark.sparkContext.parallelize([0], 1).map(lambda x: x + 1).collect()
marks["first_task"] = time.time()
print("PROBE " + json.dumps({"marks": marks, "has_work": reason is None}), flush=True)
