"""The jobs of the application. Each module defines:

- ``NAME``: the sub-command (and the metrics ``operation``),
- ``add_arguments(parser)``: its options,
- ``run(args, ctx) -> dict``: does the work and returns the job's metrics (merged into the
  common metrics object); raises ``DeltaError`` for bad input, before anything is written.
"""

JOB_MODULES = {
    "inspect": "airflow_delta_maint.app.jobs.inspect",
    "vacuum": "airflow_delta_maint.app.jobs.vacuum",
    "optimize": "airflow_delta_maint.app.jobs.optimize",
    "checkpoint": "airflow_delta_maint.app.jobs.checkpoint",
    "compact-log": "airflow_delta_maint.app.jobs.compact_log",
    "cleanup-log": "airflow_delta_maint.app.jobs.cleanup_log",
}
