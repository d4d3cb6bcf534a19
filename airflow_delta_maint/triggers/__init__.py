"""triggers of airflow-delta-maint."""
