"""The fault proxy itself: request kinds, seeded draws that repeat, scripted faults on the n-th match, error
bodies in the store's format, and a multipart upload (S3 parts, Azure blocks) through it with failing parts."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import obstore
import pytest

from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.fault_harness import clean_env, proxied, through
from tests.storage.fault_proxy import Config, FaultState, error_body, request_kind

__all__ = ["clean_env", "proxied"]  # fixtures

pytestmark = pytest.mark.timeout(120)

KINDS = [
    ("GET", "/b/t/_delta_log/0.json", {}, "GET"),
    ("GET", "/b/t/x.parquet", {"Range": "bytes=0-9"}, "RANGE_GET"),
    ("GET", "/devstoreaccount1/c/x.parquet", {"x-ms-range": "bytes=0-9"}, "RANGE_GET"),
    ("GET", "/b?list-type=2&prefix=t%2F", {}, "LIST"),
    ("GET", "/devstoreaccount1/c?restype=container&comp=list", {}, "LIST"),
    ("HEAD", "/b/t/x.parquet", {}, "HEAD"),
    ("PUT", "/b/t/x.parquet", {}, "PUT"),
    ("PUT", "/b/t/_delta_log/1.json", {"If-None-Match": "*"}, "CONDITIONAL_PUT"),
    ("POST", "/b/t/big?uploads", {}, "MULTIPART_CREATE"),
    ("PUT", "/b/t/big?partNumber=1&uploadId=u", {}, "MULTIPART_PART"),
    ("PUT", "/devstoreaccount1/c/big?comp=block&blockid=AA", {}, "MULTIPART_PART"),
    ("POST", "/b/t/big?uploadId=u", {}, "MULTIPART_COMPLETE"),
    ("PUT", "/devstoreaccount1/c/big?comp=blocklist", {}, "MULTIPART_COMPLETE"),
    ("DELETE", "/b/t/x.parquet", {}, "DELETE"),
    ("POST", "/b?delete", {}, "DELETE_MANY"),
]


@pytest.mark.parametrize("method,target,headers,kind", KINDS, ids=[k[3] + ":" + k[1] for k in KINDS])
def test_request_kinds(method, target, headers, kind):
    assert request_kind(method, target, headers) == kind


def draws(seed: int, rates: dict, n: int = 200) -> list[str | None]:
    state = FaultState(Config.from_json({"rates": rates}, seed=seed))
    return [state.draw("GET", f"/b/t/{i % 7}.json") for i in range(n)]


def test_a_seed_draws_the_same_faults_again():
    rates = {"*": {"slowdown": 0.1, "reset": 0.1}, "GET": {"lost_reply": 0.1}}
    first = draws(3, rates)
    assert first == draws(3, rates) and first != draws(4, rates)
    assert {"slowdown", "reset", "lost_reply", None} == set(first)


def test_a_scripted_fault_hits_the_nth_match_only():
    state = FaultState(Config.from_json({"script": [{"path": r"_delta_log/0+2\.json$", "fault": "lost_reply",
                                                      "kind": "CONDITIONAL_PUT", "nth": 2}]}))
    got = [state.draw(kind, path) for kind, path in [
        ("CONDITIONAL_PUT", "/b/t/_delta_log/01.json"), ("CONDITIONAL_PUT", "/b/t/_delta_log/02.json"),
        ("GET", "/b/t/_delta_log/02.json"), ("CONDITIONAL_PUT", "/b/t/_delta_log/02.json"),
        ("CONDITIONAL_PUT", "/b/t/_delta_log/02.json")]]
    assert got == [None, None, None, "lost_reply", None]
    assert state.stats()["script"][0]["fired"] == 1


@pytest.mark.parametrize("store,code", [("s3", "SlowDown"), ("azure", "ServerBusy")])
def test_error_bodies_in_the_store_format(store, code):
    status, headers, body = error_body(store, "slowdown")
    assert status == 503 and ET.fromstring(body).findtext("Code") == code


def test_multipart_upload_through_failing_parts(proxied, clean_env):
    """A multipart upload (S3 parts, Azure blocks) is counted by kind; a 503 on the first part is retried."""
    store, proxy = proxied
    data = bytes(range(256)) * (6 * 4096 + 1)  # a little over 6 MiB: two parts of 5 MiB at most
    proxy.configure(script=[{"path": r"/big$", "kind": "MULTIPART_PART", "fault": "slowdown"}])
    storage = Storage(store.uri("proxy/multipart"), through(store, proxy))
    obstore.put(storage.store, "big", data, use_multipart=True, chunk_size=5 * 1024 * 1024)
    stats = proxy.stats()
    proxy.configure()
    assert Storage(store.uri("proxy/multipart"), store.options).read("big") == data
    assert stats["faults"] == {"MULTIPART_PART:slowdown": 1}, stats
    assert stats["requests"]["MULTIPART_PART"] == 3 and stats["requests"]["MULTIPART_COMPLETE"] == 1, stats
    assert stats["requests"].get("MULTIPART_CREATE", 0) == (1 if store.name == "s3" else 0), stats
