"""hooks of airflow-delta-maint."""
