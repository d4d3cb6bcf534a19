"""The jobs' decisions, from the log alone: OPTIMIZE's plan (bins, partition predicates, liquid
clustering, the auto-compaction policy, partition reservations) and VACUUM's (what may be
deleted, listing and deleting files, inventories, kept versions, the early listing).

Imports log, protocol and storage; never health.
"""
