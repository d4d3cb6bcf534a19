"""The Delta protocol core: pure Python + pyarrow. Imports neither pyspark nor airflow."""
