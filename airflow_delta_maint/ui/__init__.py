"""The "Delta maintenance" page of the Airflow UI (a plugin mounted in the API server)."""
