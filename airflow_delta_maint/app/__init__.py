"""The maintenance application: the ``delta-maint`` CLI and the spark-submit entry point.

Modules here import pyspark only inside the functions that run Spark, so the Airflow side can
import the planners without it.
"""
