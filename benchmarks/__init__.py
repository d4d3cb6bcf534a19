"""Benchmarks of the Delta core and the maintenance jobs against delta-rs (``make bench``)."""
