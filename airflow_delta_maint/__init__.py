"""airflow-delta-maint: an Apache Airflow provider that keeps Delta Lake tables healthy."""

__version__ = "0.1.0"
