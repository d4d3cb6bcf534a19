"""spark-submit entry point of the maintenance application: ``spark-submit main.py JOB TABLE ...``."""

import sys

from airflow_delta_maint.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
