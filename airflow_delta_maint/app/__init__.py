"""app of airflow-delta-maint."""
