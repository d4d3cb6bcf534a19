"""Errors of the Delta core. Each names what is wrong in one sentence."""

from __future__ import annotations


class DeltaError(Exception):
    """Base class of every error the core raises on purpose."""


class TableNotFoundError(DeltaError):
    """The table path does not exist."""


class NotADeltaTableError(DeltaError):
    """The path exists but has no `_delta_log` with commits or checkpoints."""


class CorruptLogError(DeltaError):
    """A commit, checkpoint or compaction file cannot be parsed, or the log is inconsistent."""


class MissingVersionError(CorruptLogError):
    """The log has a gap in its commit versions, or a requested version is gone."""


class UnsupportedFeatureError(DeltaError):
    """The table uses a reader or writer feature this project does not implement."""


class CommitConflictError(DeltaError):
    """A concurrent commit conflicts with ours."""


class CommitFailedError(DeltaError):
    """Committing failed after every retry."""


class InvalidArgumentError(DeltaError):
    """A caller passed an invalid argument (bad predicate, column, retention, ...)."""


class InconsistentStateError(CorruptLogError):
    """A table state breaks the reconciliation invariant (a file live twice, or live and removed).

    Raised instead of returning or writing such a state: by the reader when no trustworthy log
    files reconstruct the version, and by every writer before it writes."""


class StateTooLargeError(DeltaError, MemoryError):
    """The table state did not fit in this process's memory (the log is not corrupt); a
    ``MemoryError``, so code that handles running out of memory still does."""


class StorageError(DeltaError):
    """The object store refused or failed a request: missing bucket or container, rejected
    credentials, permission denied, unreachable endpoint, bad storage option."""


class PutIfAbsentUnsupportedError(StorageError):
    """The store cannot create an object only if it is absent, so a commit could overwrite another;
    writing jobs are refused before they write anything."""
