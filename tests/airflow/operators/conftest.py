"""Fixtures the operator tests share: spark-submit refused, or recorded instead of run."""

from __future__ import annotations

import pytest

from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook, application_args


@pytest.fixture
def no_spark_submit(monkeypatch):
    """Fail the test if an operator submits a Spark application."""

    def refuse(self, *args, **kwargs):
        pytest.fail(f"spark-submit was called: {args}")

    monkeypatch.setattr(DeltaMaintHook, "run_job", refuse)
    monkeypatch.setattr(DeltaMaintHook, "submit", refuse)


@pytest.fixture
def submits(monkeypatch) -> list[tuple]:
    """Record the jobs operators submit instead of starting Spark; each returns "committed" metrics."""
    calls: list[tuple] = []

    def record(self, job, table_uri, job_args, storage_options=None, history_uri=None, seen_version=None):
        calls.append((job, table_uri, application_args(job, job_args, history_uri, seen_version)))
        return {"operation": job, "table": table_uri, "status": "committed"}

    monkeypatch.setattr(DeltaMaintHook, "run_job", record)
    return calls


def argv_of(op) -> list[str]:
    """The application's arguments the hook builds from an operator's typed options."""
    return application_args(op.job, op.job_values())
