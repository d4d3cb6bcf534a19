"""The maintenance report: one HTML page from the maintenance history and the tables' logs, and
the ``delta-maint report`` command that writes it. Needs neither Spark nor Airflow."""
