"""sensors of airflow-delta-maint."""
