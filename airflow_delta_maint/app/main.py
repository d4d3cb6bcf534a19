"""spark-submit entry point of the maintenance application: ``spark-submit main.py JOB TABLE ...``.

The Airflow hook runs this file (under spark-submit, or as the client process of a Spark Connect run);
its output is the task's log, so Spark's output stays as it is (``console=False``).
"""

import sys

from airflow_delta_maint.app.cli import main

if __name__ == "__main__":
    sys.exit(main(console=False))
