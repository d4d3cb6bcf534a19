"""The transaction log: listing and segments, snapshot replay and reconciliation, transactions,
checkpoints, log compaction, expired-log cleanup, and cheap questions about a table's own
history.

Imports protocol and storage; never plans or health.
"""
