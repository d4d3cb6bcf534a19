"""State reconstruction of a large log: ours streamed against delta-rs's load, per million files.

Logs: those of :mod:`benchmarks.bench_worker_checks` (a multi-part checkpoint of N adds with JSON
statistics over 10,000 partitions, then 1,000 commits), cached under ``benchmarks/out/worker_checks/``.
Each run is a fresh interpreter that reports its wall time and peak RSS (``VmHWM``):

- ``ours``: :func:`~airflow_delta_maint.delta.log.state_stream.open_state`, then every live file's
  whole add action (every column, as Arrow pieces) through :meth:`StreamedState.scan`, the
  reconciliation invariant checked, the commits after the checkpoint applied;
- ``ours_paths``: the same with the columns VACUUM and the checkpoint's invariant pass read (``path``,
  ``deletionVector``);
- ``delta_rs``: ``DeltaTable(path).get_add_actions(flatten=True)`` with ``deltalake`` (its whole
  state in memory), under an address-space cap (``--delta-rs-cap-gib``).

The runs alternate; figures are medians. The script holds ``/tmp/bench.lock`` while it measures.

Run: ``.venv/bin/python -m benchmarks.bench_state_reconstruction --files 1000000 10000000``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_worker_checks import LOCK, _peak_rss, _wait_for_quiet, generate

IMPLS = ("ours", "ours_paths", "delta_rs")


def child(impl: str, table: str, cap_gib: float | None) -> None:
    if cap_gib:
        cap = int(cap_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    started = time.perf_counter()
    if impl == "delta_rs":
        from deltalake import DeltaTable

        files = DeltaTable(table).get_add_actions(flatten=True).num_rows
    else:
        from airflow_delta_maint.delta.log.state_stream import open_state
        from airflow_delta_maint.delta.protocol.actions import ADD_SCHEMA

        columns = ADD_SCHEMA.names if impl == "ours" else ["path", "deletionVector"]
        files = sum(t.num_rows for kind, t in open_state(table).scan(columns) if kind == "add")
    print(json.dumps({"seconds": time.perf_counter() - started, "rss": _peak_rss(), "files": files}), flush=True)


def measure(impl: str, table: Path, cap_gib: float | None) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.bench_state_reconstruction", "--child", impl, str(table)]
    if cap_gib:
        cmd += ["--cap-gib", str(cap_gib)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"impl": impl, "status": f"failed: {tail[:120]}"}
    return {"impl": impl, "status": "ok", **json.loads(lines[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--impls", nargs="+", default=list(IMPLS))
    parser.add_argument("--delta-rs-cap-gib", type=float, default=11.0)
    parser.add_argument("--cap-gib", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=2, metavar=("IMPL", "TABLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.cap_gib)
        return
    tables = {n: generate(n, "multipart") for n in args.files}
    _wait_for_quiet()
    LOCK.write_text(str(Path("/proc/self").resolve().name))
    results: dict[tuple[int, str], list[dict]] = {}
    try:
        for n in args.files:
            for _ in range(args.repeat):
                for impl in args.impls:
                    r = measure(impl, tables[n], args.delta_rs_cap_gib if impl == "delta_rs" else None)
                    print(json.dumps({"files": n, **r}), file=sys.stderr, flush=True)
                    results.setdefault((n, impl), []).append(r)
    finally:
        LOCK.unlink(missing_ok=True)
    print("| files | reader | median time | s per million files | peak RSS | ours ÷ delta-rs, per file |")
    print("|---:|---|---:|---:|---:|---:|")
    rs_per_million = {}
    for (n, impl), runs in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][1] != "delta_rs")):
        ok = [r for r in runs if r["status"] == "ok"]
        if not ok:
            print(f"| {n:,} | {impl} | {runs[0]['status']} | | | |")
            continue
        secs = statistics.median(r["seconds"] for r in ok)
        per = secs / (n / 1e6)
        if impl == "delta_rs":
            rs_per_million[n] = per
        rss = max(r["rss"] for r in ok) / 2**20
        largest_rs = max(rs_per_million) if rs_per_million else None
        ratio = f"{per / rs_per_million[largest_rs]:.2f} (vs delta-rs at {largest_rs:,})" \
            if largest_rs is not None and impl != "delta_rs" else ""
        print(f"| {n:,} | {impl} | {secs:.1f} s | {per:.2f} s | {rss:,.0f} MiB | {ratio} |")


if __name__ == "__main__":
    main()
