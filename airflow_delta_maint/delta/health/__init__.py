"""A table's health score and the maintenance history (a Delta table of job runs).

The top room: may import plans, log, protocol and storage.
"""
