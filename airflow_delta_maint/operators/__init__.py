"""operators of airflow-delta-maint."""
