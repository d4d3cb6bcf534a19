"""Storage: the store (list, read, put-if-absent, delete on local disk and object stores through
obstore), its options and environment, and object-store failures as one-line errors.

The bottom room with ``delta.errors``: imports nothing else of the core.
"""
