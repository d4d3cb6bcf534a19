"""The store and catalog clients' own loggers, kept quiet unless a run asks to see them.

Client libraries log a failure before our code turns it into one clear line: Thrift's ``TSocket`` logs
a refused connection with its traceback, botocore logs where it found credentials and its retries, the
Databricks SDK and azure-core log their requests. Unless ``--verbose`` (or, in a task, a logger at DEBUG),
those loggers are raised above CRITICAL for the run, so a failed run shows its one line and nothing else.
This module imports no pyspark: the Airflow side uses it too.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

__all__ = ["CLIENT_LOGGERS", "quiet_client_loggers", "quieted_client_loggers"]

#: the client libraries' logger names (a logger's children follow it)
CLIENT_LOGGERS = (
    "thrift", "hmsclient",  # the Hive metastore's Thrift client
    "botocore", "boto3", "s3transfer", "aiobotocore",  # Glue, S3 through the Amazon provider
    "databricks",  # Unity Catalog's SDK
    "azure", "google", "google_auth_httplib2",  # the Azure and Google clients of the storage connections
    "urllib3", "requests",  # the HTTP layer under them
)

#: a level above CRITICAL: nothing of these loggers is shown
SILENT = logging.CRITICAL + 10


def quiet_client_loggers(verbose: bool = False) -> dict[str, int]:
    """Silence the client loggers for the rest of the process (the command line); nothing when ``verbose``.

    Returns each logger's level before, for :func:`restore`.
    """
    if verbose:
        return {}
    before = {}
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        before[name] = logger.level
        logger.setLevel(SILENT)
    return before


def restore(levels: dict[str, int]) -> None:
    """Give the loggers :func:`quiet_client_loggers` silenced their levels back."""
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@contextlib.contextmanager
def quieted_client_loggers(verbose: bool = False) -> Iterator[None]:
    """The client loggers silenced while the block runs (a task on a worker that runs other tasks too)."""
    levels = quiet_client_loggers(verbose)
    try:
        yield
    finally:
        restore(levels)
