"""The Airflow worker's checks on large logs: peak memory and time, streamed against in-memory.

Synthetic logs (cached under ``benchmarks/out/worker_checks/``, no data files): a checkpoint at
version 1 holding N add actions with JSON statistics over 10,000 partitions, written directly
with pyarrow in row groups of 100,000 rows, once as a multi-part classic checkpoint (parts of
500,000 adds) and once as a V2 checkpoint whose adds live in sidecars (500,000 each), its top-level
file parquet (``v2``) or JSON (``v2json``, the same sidecars); then
1,000 commits, each appending 2 files and removing 1 file of the checkpoint (every tenth commit
instead replaces a checkpoint file's deletion vector: a remove and an add of the same path).

Each check runs in a fresh interpreter that reports its own peak RSS (``VmHWM``, imports
included) and the check's wall time; ``before`` runs the in-memory code path (``Snapshot.load`` and the plan, as
the checks did until now), ``after`` the streamed one the checks use now. A ``before`` run is
capped with ``RLIMIT_AS`` (``--cap-gib``) so that it cannot take a shared machine's memory; a run
that hits the cap is reported as such.

Checks: ``optimize`` (OptimizeOperator's skip check, default options), ``optimize_auto`` (the
auto-compaction policy's decision), ``vacuum_lite`` (VACUUM lite's check, retention 0 so that
every commit is read and every removed file looked up in the valid set), ``log_distrust``
(log compaction's check of the state, run when compaction files follow the checkpoint),
``compact_log`` (LogCompactionOperator's whole check), ``execution`` (the execution choice
under ``auto``), ``commit_count`` (the sensor's and trigger's commit counting, Airflow imported),
``fleet`` (MaintainTablesOperator's decision: OPTIMIZE and VACUUM lite), ``optimize_clustered``
(the skip check of a liquid-clustered table: the log with one more commit that clusters it by
``id``, no file clustered yet), ``optimize_target_files`` (``--target-files 1``),
``optimize_type_widened`` (``--rewrite-type-widened`` on the log with one more commit that widens
``id`` from integer to long; the first 256 adds' data files exist, in the old type), ``delta_rs``
(``DeltaTable(path)`` and ``get_add_actions()``).

Run: ``.venv/bin/python -m benchmarks.bench_worker_checks --files 1000000 10000000``; prints a
Markdown table. ``--clean`` deletes the generated logs afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out" / "worker_checks"
PARTITIONS = 10_000
ROW_GROUP = 100_000
PART_ADDS = 500_000
COMMITS = 1_000
NOW_MS = int(time.time() * 1000)
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}}]}
PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors"]}
METADATA = {"id": "bench-worker-checks", "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(SCHEMA), "partitionColumns": ["p"],
            "configuration": {"delta.enableDeletionVectors": "true"}, "createdTime": 1}
CHECKS = ("optimize", "optimize_auto", "vacuum_lite", "log_distrust", "compact_log", "execution", "commit_count",
          "fleet", "optimize_clustered", "optimize_target_files", "optimize_type_widened")
#: OPTIMIZE skip checks with options, and the variant of the log each runs on (None: the log itself)
OPTIMIZE_CHECKS: dict[str, tuple[dict, str | None]] = {
    "optimize": ({}, None),
    "optimize_auto": ({"auto": True}, None),
    "optimize_clustered": ({}, "clustered"),
    "optimize_target_files": ({"target_files": 1}, None),
    "optimize_type_widened": ({"rewrite_type_widened": True}, "widened"),
}
#: data files written (with ``id`` in its old type) for the first adds of the widened variant
WIDENED_DATA_FILES = 256


# -- generation ---------------------------------------------------------------------------------
def _path(i: int) -> str:
    return f"p={i % PARTITIONS:05d}/part-{i:08d}-6f1c2a7e-{i % 9973:04d}-4b1e-9c3d-c000.snappy.parquet"


def _adds(lo: int, hi: int):
    import numpy as np
    import pyarrow as pa

    from airflow_delta_maint.delta.protocol.actions import ADD

    idx = np.arange(lo, hi)
    rng = np.random.default_rng(lo)
    sizes = rng.integers(1 << 20, 200 << 20, hi - lo)
    records = rng.integers(1_000, 1_000_000, hi - lo)
    paths = pa.array([_path(int(i)) for i in idx], pa.string())
    parts = pa.array([f"{int(i) % PARTITIONS:05d}" for i in idx], pa.string())
    stats = pa.array([f'{{"numRecords":{int(r)},"minValues":{{"id":{int(i)},"amount":0.5}},'
                      f'"maxValues":{{"id":{int(i) + int(r)},"amount":99.5}},"nullCount":{{"id":0,"amount":0}}}}'
                      for i, r in zip(idx, records)], pa.string())
    offsets = pa.array(np.arange(hi - lo + 1, dtype=np.int32))
    pvs = pa.MapArray.from_arrays(offsets, pa.array(["p"] * (hi - lo), pa.string()), parts)
    n = hi - lo
    children = {"path": paths, "partitionValues": pvs, "size": pa.array(sizes, pa.int64()),
                "modificationTime": pa.array(np.full(n, NOW_MS - 86_400_000 * 30), pa.int64()),
                "dataChange": pa.array(np.zeros(n, bool)), "stats": stats}
    arrays = [children[f.name] if f.name in children else pa.nulls(n, f.type) for f in ADD]
    return pa.StructArray.from_arrays(arrays, fields=list(ADD))


def _schema():
    import pyarrow as pa

    from airflow_delta_maint.delta.protocol.actions import ADD, REMOVE

    protocol = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32()),
                          ("readerFeatures", pa.list_(pa.string())), ("writerFeatures", pa.list_(pa.string()))])
    metadata = pa.struct([("id", pa.string()), ("format", pa.struct([("provider", pa.string()),
                                                                      ("options", pa.map_(pa.string(), pa.string()))])),
                          ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                          ("configuration", pa.map_(pa.string(), pa.string())), ("createdTime", pa.int64())])
    return pa.schema([("add", ADD), ("remove", REMOVE), ("protocol", protocol), ("metaData", metadata)])


def _header_rows(schema):
    import pyarrow as pa

    meta = dict(METADATA, format={"provider": "parquet", "options": []},
                configuration=list(METADATA["configuration"].items()))
    return pa.table({
        "add": pa.nulls(2, schema.field("add").type), "remove": pa.nulls(2, schema.field("remove").type),
        "protocol": pa.array([PROTOCOL, None], schema.field("protocol").type),
        "metaData": pa.array([None, meta], schema.field("metaData").type)}, schema=schema)


def _write_adds(path: Path, lo: int, hi: int, schema) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        for start in range(lo, hi, ROW_GROUP):
            end = min(hi, start + ROW_GROUP)
            adds = _adds(start, end)
            columns = {"add": adds}
            columns.update({f.name: pa.nulls(end - start, f.type) for f in schema if f.name != "add"})
            writer.write_table(pa.table(columns, schema=schema), row_group_size=ROW_GROUP)


def _write_commits(log: Path, files: int) -> None:
    import numpy as np

    rng = np.random.default_rng(7)
    victims = rng.choice(files, size=COMMITS, replace=False)
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in (
        {"commitInfo": {"timestamp": NOW_MS - 10**8, "operation": "CREATE TABLE"}},
        {"protocol": PROTOCOL}, {"metaData": METADATA})) + "\n")
    (log / f"{1:020d}.json").write_text(json.dumps({"commitInfo": {"timestamp": NOW_MS - 10**8 + 1,
                                                                   "operation": "WRITE"}}) + "\n")
    for k in range(COMMITS):
        version = k + 2
        victim = int(victims[k])
        part = {"p": f"{victim % PARTITIONS:05d}"}
        ts = NOW_MS - 10**8 + version * 1000
        actions: list[dict] = [{"commitInfo": {"timestamp": ts, "operation": "DELETE" if k % 10 == 0 else "WRITE"}}]
        removed = {"path": _path(victim), "deletionTimestamp": ts, "dataChange": True, "partitionValues": part,
                   "size": 1 << 20}
        actions.append({"remove": removed})
        if k % 10 == 0:  # a deletion vector replaces the file's
            actions.append({"add": {"path": _path(victim), "partitionValues": part, "size": 1 << 20,
                                    "modificationTime": ts, "dataChange": True,
                                    "stats": json.dumps({"numRecords": 1000}),
                                    "deletionVector": {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91",
                                                       "offset": None, "sizeInBytes": 40, "cardinality": 3}}})
        else:
            for j in range(2):
                n = files + 2 * k + j
                actions.append({"add": {"path": f"p={n % PARTITIONS:05d}/new-{n}.parquet",
                                        "partitionValues": {"p": f"{n % PARTITIONS:05d}"}, "size": 4 << 20,
                                        "modificationTime": ts, "dataChange": True,
                                        "stats": json.dumps({"numRecords": 4000})}})
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def generate(files: int, kind: str) -> Path:
    """The log of ``files`` checkpointed adds as a ``multipart``, ``v2`` or ``v2json`` checkpoint (cached)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = OUT / f"{files}-{kind}"
    if (root / "_delta_log" / "_last_checkpoint").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    log = root / "_delta_log"
    log.mkdir(parents=True)
    started = time.perf_counter()
    schema = _schema()
    pieces = [(lo, min(files, lo + PART_ADDS)) for lo in range(0, files, PART_ADDS)]
    count = len(pieces) + 1
    if kind == "multipart":  # the adds in parts of PART_ADDS, protocol and metaData in a last part of their own
        for i, (lo, hi) in enumerate(pieces):
            _write_adds(log / f"{1:020d}.checkpoint.{i + 1:010d}.{count:010d}.parquet", lo, hi, schema)
        pq.write_table(_header_rows(schema), log / f"{1:020d}.checkpoint.{count:010d}.{count:010d}.parquet")
        hint = {"version": 1, "size": files + 2, "parts": count}
    else:  # the same add files as sidecars (hard links of the multi-part log's parts when it exists)
        (log / "_sidecars").mkdir()
        twin = OUT / f"{files}-multipart" / "_delta_log"
        sidecars = []
        for i, (lo, hi) in enumerate(pieces):
            name = f"{uuid.uuid4()}.parquet"
            full = log / "_sidecars" / name
            part = twin / f"{1:020d}.checkpoint.{i + 1:010d}.{count:010d}.parquet"
            if part.exists():
                os.link(part, full)
            else:
                _write_adds(full, lo, hi, schema)
            sidecars.append({"path": name, "sizeInBytes": full.stat().st_size, "modificationTime": NOW_MS})
        if kind == "v2json":  # the top-level file as JSON lines: protocol, metaData, checkpointMetadata, sidecars
            lines = [{"protocol": PROTOCOL}, {"metaData": METADATA}, {"checkpointMetadata": {"version": 1}}]
            lines += [{"sidecar": s} for s in sidecars]
            (log / f"{1:020d}.checkpoint.{uuid.uuid4()}.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
        else:
            header = _header_rows(schema).drop_columns(["add", "remove"])
            top = pa.concat_tables([header, pa.table({c: pa.nulls(len(sidecars) + 1, header.schema.field(c).type)
                                                      for c in header.column_names})])
            top = top.append_column("checkpointMetadata", pa.array(
                [None, None, {"version": 1}] + [None] * len(sidecars), pa.struct([("version", pa.int64())])))
            top = top.append_column("sidecar", pa.array(
                [None, None, None] + sidecars, pa.struct([("path", pa.string()), ("sizeInBytes", pa.int64()),
                                                          ("modificationTime", pa.int64())])))
            pq.write_table(top, log / f"{1:020d}.checkpoint.{uuid.uuid4()}.parquet")
        hint = {"version": 1, "size": files + 3 + len(sidecars)}
    _write_commits(log, files)
    (log / "_last_checkpoint").write_text(json.dumps(hint))
    print(f"generated {root.name} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return root


def variant(table: Path, name: str) -> Path:
    """The log of ``table`` (hard links) with one more commit that makes it a liquid-clustered
    table (``clustered``: clustering by ``id``, no file clustered yet) or a table whose ``id`` was
    widened from integer to long (``widened``: the first adds' data files written in the old type)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = table.parent / f"{table.name}-{name}"
    version = COMMITS + 2
    log = root / "_delta_log"
    if (log / f"{version:020d}.json").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    for src in (table / "_delta_log").rglob("*"):
        dst = log / src.relative_to(table / "_delta_log")
        if src.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.link(src, dst)
    actions: list[dict] = [{"commitInfo": {"timestamp": NOW_MS, "operation": "ALTER TABLE"}}]
    if name == "clustered":
        actions += [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                  "readerFeatures": ["deletionVectors"],
                                  "writerFeatures": ["deletionVectors", "clustering", "domainMetadata"]}},
                    {"metaData": dict(METADATA, partitionColumns=[])},
                    {"domainMetadata": {"domain": "delta.clustering", "removed": False,
                                        "configuration": json.dumps({"clusteringColumns": [["id"]]})}}]
    else:
        fields = [dict(f, metadata={"delta.typeChanges": [{"fromType": "integer", "toType": "long"}]})
                  if f["name"] == "id" else f for f in SCHEMA["fields"]]
        actions += [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                  "readerFeatures": ["deletionVectors", "typeWidening"],
                                  "writerFeatures": ["deletionVectors", "typeWidening"]}},
                    {"metaData": dict(METADATA, schemaString=json.dumps(dict(SCHEMA, fields=fields)))}]
        for i in range(WIDENED_DATA_FILES):
            path = root / _path(i)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"id": pa.array([i], pa.int32()), "amount": pa.array([0.5])}), path)
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return root


# -- one check in this process ------------------------------------------------------------------
def run_check(check: str, impl: str, table: str) -> object:
    if check == "delta_rs":
        from deltalake import DeltaTable

        return DeltaTable(table).get_add_actions(flatten=True).num_rows
    if impl == "before":
        return _before(check, table)
    if check in OPTIMIZE_CHECKS:
        from airflow_delta_maint.app.jobs.optimize import nothing_to_do, options_from

        return nothing_to_do(table, None, options_from(OPTIMIZE_CHECKS[check][0]))
    if check == "vacuum_lite":
        from airflow_delta_maint.delta.plans.vacuum import nothing_to_do as vacuum_check
        from airflow_delta_maint.delta.plans.vacuum_options import VacuumOptions

        return vacuum_check(table, None, VacuumOptions(mode="lite", retention_hours=0, ignore_retention_check=True))
    if check == "log_distrust":
        from airflow_delta_maint.delta.log.compaction import _distrusted
        from airflow_delta_maint.delta.storage.store import Storage

        return _distrusted(Storage(table))
    if check == "compact_log":
        from airflow_delta_maint.delta.log.compaction import nothing_to_do as compaction_check

        return compaction_check(table, None, None)
    if check == "execution":
        from airflow_delta_maint.app.execution import choose_execution

        return choose_execution("auto", "optimize", {}, table)
    if check == "commit_count":
        from airflow_delta_maint.triggers.commit_interval import count_commits

        return count_commits(table, 10)
    if check == "fleet":
        from airflow_delta_maint.app.fleet import FleetJob, FleetSpec, FleetTable, decide

        spec = FleetSpec([FleetTable(table, [FleetJob("optimize", []), FleetJob(
            "vacuum", ["--mode", "lite", "--retention-hours", "0", "--ignore-retention-check"])], {})], None)
        return [[(m or {}).get("status") for m in known] for known in decide(spec).known]
    raise SystemExit(f"unknown check {check!r}")


def _before(check: str, table: str) -> object:
    """The in-memory code path the checks ran until now."""
    from airflow_delta_maint.delta.log.snapshot import Snapshot
    from airflow_delta_maint.delta.protocol.features import check_supported

    if check in OPTIMIZE_CHECKS:
        from airflow_delta_maint.app.jobs.optimize import options_from
        from airflow_delta_maint.delta.plans.optimize_decision import (auto_decision, plan_from_options,
                                                                       plan_outline, skip_reason)

        options = options_from(OPTIMIZE_CHECKS[check][0])
        snapshot = Snapshot.load(table)
        check_supported(snapshot.protocol, "optimize", snapshot.metadata)
        decision = auto_decision(snapshot, options)
        return skip_reason(plan_outline(plan_from_options(snapshot, options, decision), decision), options)
    if check == "vacuum_lite":
        from airflow_delta_maint.delta.plans.vacuum import lite_candidates, plan_vacuum

        snapshot = Snapshot.load(table, paths_only=True)
        check_supported(snapshot.protocol, "vacuum", snapshot.metadata)
        plan = plan_vacuum(snapshot, 0, "lite", True, with_valid=False)
        found = lite_candidates(plan, snapshot.storage, snapshot)
        return len(found.files), found.watermark
    if check == "log_distrust":
        return bool(Snapshot.load(table).distrusted)
    raise SystemExit(f"no in-memory path for {check!r}")


def _peak_rss() -> int:
    """This process's peak RSS in bytes: ``VmHWM``, which starts afresh at exec (``ru_maxrss``
    carries the high-water mark of the process that forked it over)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(args: argparse.Namespace) -> None:
    if args.cap_gib:
        cap = int(args.cap_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    started = time.perf_counter()
    try:
        result = run_check(args.check, args.impl, args.table)
        status = "ok"
    except MemoryError:
        result, status = None, "memory cap"
    elapsed = time.perf_counter() - started
    rss = _peak_rss()
    print(json.dumps({"status": status, "seconds": elapsed, "rss": rss, "result": str(result)[:200]}))


LOCK = Path("/tmp/bench.lock")


def _wait_for_quiet() -> None:
    """Wait while another timing run holds the machine (``/tmp/bench.lock``)."""
    while LOCK.exists():
        time.sleep(30)


def measure(check: str, impl: str, table: Path, cap_gib: float | None) -> dict:
    _wait_for_quiet()
    cmd = [sys.executable, "-m", "benchmarks.bench_worker_checks", "--child", check, impl, str(table)]
    if cap_gib:
        cmd += ["--cap-gib", str(cap_gib)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    wall = time.perf_counter() - started
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        status = "memory cap" if "MemoryError" in proc.stderr or "bad_alloc" in proc.stderr or \
            "Cannot allocate" in proc.stderr or "OutOfMemory" in proc.stderr else f"failed: {tail[:120]}"
        return {"check": check, "impl": impl, "status": status, "wall": wall}
    out = json.loads(lines[-1])
    out.update(check=check, impl=impl, wall=wall)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--kinds", nargs="+", default=["multipart", "v2", "v2json"])
    parser.add_argument("--checks", nargs="+", default=list(CHECKS))
    parser.add_argument("--before", nargs="*", default=["optimize", "optimize_auto", "vacuum_lite", "log_distrust",
                                                        "optimize_clustered", "optimize_target_files"],
                        help="checks also measured on the in-memory path")
    parser.add_argument("--delta-rs", action="store_true", help="also measure delta-rs (multipart logs)")
    parser.add_argument("--cap-gib", type=float, default=12.0, help="address-space cap of the in-memory runs")
    parser.add_argument("--delta-rs-cap-gib", type=float, default=None,
                        help="address-space cap of the delta-rs runs (default: --cap-gib)")
    parser.add_argument("--clean", action="store_true", help="delete the generated logs afterwards")
    parser.add_argument("--child", nargs=3, metavar=("CHECK", "IMPL", "TABLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.check, args.impl, args.table = args.child
        child(args)
        return
    rows = []
    for files in args.files:
        for kind in args.kinds:
            _wait_for_quiet()
            table = generate(files, kind)
            for check in args.checks:
                runs = [("after", None)] + ([("before", args.cap_gib)] if check in (args.before or []) else [])
                on = OPTIMIZE_CHECKS.get(check, ({}, None))[1]
                for impl, cap in runs:
                    r = measure(check, impl, variant(table, on) if on else table, cap)
                    r.update(files=files, kind=kind)
                    rows.append(r)
                    print(json.dumps(r), file=sys.stderr, flush=True)
            if args.delta_rs and kind == "multipart":
                r = measure("delta_rs", "delta-rs", table, args.delta_rs_cap_gib or args.cap_gib)
                r.update(files=files, kind=kind)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
            if args.clean:
                for on in ("clustered", "widened"):
                    shutil.rmtree(table.parent / f"{table.name}-{on}", ignore_errors=True)
                shutil.rmtree(table, ignore_errors=True)
    print("| files | checkpoint | check | code path | peak RSS | check time | result |")
    print("|---:|---|---|---|---:|---:|---|")
    for r in rows:
        rss = f"{r['rss'] / 2**20:,.0f} MiB" if "rss" in r else "-"
        secs = f"{r['seconds']:.1f} s" if "seconds" in r else "-"
        print(f"| {r['files']:,} | {r['kind']} | {r['check']} | {r['impl']} | {rss} | {secs} | "
              f"{r['status'] if r['status'] != 'ok' else r.get('result', '')[:60]} |")


if __name__ == "__main__":
    main()
