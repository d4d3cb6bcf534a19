"""The Delta protocol's vocabulary: actions, schema and column mapping, table features, file
statistics, deletion vectors, file paths, row tracking and type widening.

Imports storage (deletion vectors and parquet footers are read through it); never log, plans
or health.
"""
