"""Speed guard (a benchmark, not a test): our ratios against delta-rs on the same data in one run,
compared with the ratios recorded in ``docs/benchmarks.md`` ("Speed guard"); fails when any is more
than 15% worse.

``make bench-guard`` (about 7 minutes on the 2-core reference machine once its tables are cached
under ``benchmarks/out/guard/``; the first run builds them, a few minutes more). What it measures:

- ``optimize``: bin-packing of 800 small files (about 360 MB, 8 partitions) into one file per
  partition; delta-rs ``optimize.compact``.
- ``zorder``: the same table Z-ordered by ``a, k``; delta-rs ``optimize.z_order``.
- ``vacuum_full``: full VACUUM of the 100,000-file table of ``bench_vacuum.py`` (100 folders, 50,000
  orphans: 25,000 removed from the log, 25,000 never in it); delta-rs ``vacuum(full=True)``.

  Each of these twice: excluding Spark's start (ours in this process on a ``local[2]``
  SparkSession started and warmed beforehand; delta-rs timed inside its process after its import)
  and including it (``*_with_start``: a fresh ``delta-maint`` process against a fresh delta-rs
  process, import included; process wall times).
- ``worker_check_1m``: the OptimizeOperator's check on the worker (``nothing_to_do``, no Spark) of
  a log of 1,000,000 checkpointed files and 1,000 commits; delta-rs loads the same log and lists its
  files (``DeltaTable`` + ``get_add_actions``). Each a fresh process, timed after its imports.
- ``checkpoint_1m``: writing a checkpoint of that log (ours in this process, the large-table path:
  Spark tasks write the parts); delta-rs ``create_checkpoint`` in a fresh process, after its import.
- ``optimize_copy``: bin-packing with row groups copied (``copy_row_groups`` ``auto``): the medium table of
  ``bench_optimize_copy.py`` (24 files of 40 MiB, one row group each, 960 MiB) into one file toward 1 GiB, ours
  on the warm session; ``optimize_copy_mixed``: its mixed table (12 of those files and 479 of 1 MiB);
  ``optimize_copy_worker``: the medium table's whole task as ``execution="auto"`` runs it on the worker (a fresh
  process choosing and running it on its threads, no Spark) against delta-rs's fresh process, import
  included. delta-rs ``optimize.compact`` with snappy, the inputs' codec (its default, zstd, costs it half as
  much again).
- ``s3_vacuum_full``, ``s3_optimize``, ``s3_worker_check_100k``: on S3 (moto) behind 20 ms a request
  (``bench_store_latency.py``, whose servers start once for the guard): a full VACUUM of 20,000 objects
  (10,000 orphans), our whole ``delta-maint vacuum`` process against delta-rs's; the OPTIMIZE table above
  (ours on the warm session); the worker's OPTIMIZE check of a 100,000-file log (one round unless
  ``--repeat-s3-check``: delta-rs reads its 1,000 commits one after the other, a minute).

Every run works on a fresh copy synced to disk (OPTIMIZE's data files hard-linked, the log copied;
VACUUM's table copied whole, so that its deletes free what they delete; ``vacuum_full_with_start``
is measured in the first round only, a copy of 100,000 files costing some 15 s). Ours and delta-rs
alternate; each side's best of ``--repeat`` rounds (Z-order: one round unless ``--repeat-zorder``):
on a shared machine other work only ever slows a run down, so the fastest run is the one nearest
the job's own cost, and best times move far less between runs than medians of two. A ratio more
than the tolerance worse than recorded is measured again, up to ``--confirm`` more rounds of its
job, before the guard fails: a real loss stays, a disturbed run does not. Prints a Markdown table
and writes it to ``benchmarks/out/guard.md``; ``docs/benchmarks.md`` is edited by hand from it.

Usage: python -m benchmarks.bench_guard [--repeat 2] [--confirm 2] [--only optimize vacuum_full ...]
[--tolerance 0.15]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "out"
WORK = OUT / "guard"
DOC = REPO / "docs" / "benchmarks.md"
LOCK = Path("/tmp/bench.lock")
TARGET = 256 << 20
FILES_PER_PARTITION = 100
#: the OPTIMIZE table's source: ``optimize`` (800 files), or ``optimize-<files per partition>``
OPTIMIZE_SOURCE = ["optimize"]
MEASURES = ("optimize", "optimize_with_start", "zorder", "zorder_with_start", "vacuum_full",
            "vacuum_full_with_start", "worker_check_1m", "checkpoint_1m", "s3_vacuum_full", "s3_optimize",
            "s3_worker_check_100k", "optimize_copy", "optimize_copy_mixed", "optimize_copy_worker")
#: the goals against delta-rs (ours ÷ delta-rs), where one is set
GOALS = {"optimize": 0.6, "zorder": 0.45, "vacuum_full": 0.6, "s3_vacuum_full": 0.5, "s3_optimize": 0.8,
         "s3_worker_check_100k": 0.5, "optimize_copy": 0.15, "optimize_copy_mixed": 0.4, "optimize_copy_worker": 0.6}
#: the S3 measures and the job of ``bench_store_latency`` that measures each
S3_JOBS = {"s3_vacuum_full": "vacuum", "s3_optimize": "optimize", "s3_worker_check_100k": "worker_check"}
S3_LATENCY_MS = 20
DELTA_MAINT = str(Path(sys.executable).with_name("delta-maint"))


# -- the tables ------------------------------------------------------------------------------------
def source(name: str) -> Path:
    """The cached source table ``name``, built on first use."""
    path = WORK / "src" / name
    if (path / ".done").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if name.startswith("optimize"):
        from benchmarks import bench_optimize

        bench_optimize.FILES_PER_PARTITION = int(name.partition("-")[2] or FILES_PER_PARTITION)
        bench_optimize.generate(path)
    elif name == "vacuum_full":
        from benchmarks.bench_vacuum import build

        build(path, tracked=75_000, removed=25_000)
    elif name == "log_1m":
        from benchmarks.bench_worker_checks import generate

        shutil.copytree(generate(1_000_000, "multipart"), path)
    else:
        raise ValueError(name)
    (path / ".done").touch()
    print(f"built {name} in {time.perf_counter() - started:.0f} s", flush=True)
    return path


def fresh_copy(src: Path, name: str, link_data: bool = True) -> Path:
    """A copy of ``src`` to run on. ``link_data``: the data files hard-linked (the jobs only read
    them, write new ones or unlink them, which leaves the source's name), the log copied whole (its
    files may be replaced). Creating 100,000 small files takes some 15 s on this machine; linking
    them under 2."""
    dest = WORK / "run" / name
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if link_data:
        subprocess.run(["cp", "-al", str(src), str(dest)], check=True)
        shutil.rmtree(dest / "_delta_log")
        subprocess.run(["cp", "-a", str(src / "_delta_log"), str(dest / "_delta_log")], check=True)
    else:
        subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    (dest / ".done").unlink(missing_ok=True)
    subprocess.run(["sync"], check=True)
    time.sleep(0.5)
    return dest


# -- the peers ---------------------------------------------------------------------------------------
_DELTA_RS = {
    "optimize": "dt.optimize.compact(target_size={target})",
    "zorder": "dt.optimize.z_order(['a', 'k'], target_size={target})",
    "vacuum_full": "dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)",
    "checkpoint": "dt.create_checkpoint()",
    "load": "dt.get_add_actions(flatten=True).num_rows",
    "compact_snappy": "dt.optimize.compact(target_size={target}, writer_properties=WriterProperties(compression='SNAPPY'))",
}
#: the row-group copy's target size: each table into one file
COPY_TARGET = 1 << 30
#: the whole task on the worker: ``execution="auto"``'s choice, then the run in this process
WORKER_RUN = ("import sys\nfrom airflow_delta_maint.app.execution import choose_execution, run_in_process\n"
              "where, why = choose_execution('auto', 'optimize', {'target_file_size': int(sys.argv[2])}, sys.argv[1])\n"
              "assert where == 'local', why\n"
              "code, m = run_in_process('optimize', sys.argv[1], ['--target-file-size', sys.argv[2]])\n"
              "assert code == 0 and m['status'] == 'committed', m\n")


def delta_rs(job: str, table: Path, target: int = TARGET) -> tuple[float, float]:
    """delta-rs's ``job`` in a fresh process: (seconds after its import, process wall seconds)."""
    code = ("import time\nfrom deltalake import DeltaTable, WriterProperties\nt = time.perf_counter()\n"
            f"dt = DeltaTable({str(table)!r})\n{_DELTA_RS[job].format(target=target)}\n"
            "print(time.perf_counter() - t)\n")
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1]), time.perf_counter() - started


def ours_in_process(args: list[str]) -> float:
    """Our job in this process, on the warm SparkSession."""
    from airflow_delta_maint.app.cli import run

    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the metrics it prints
        code, metrics = run([*args, "--json"])
    took = time.perf_counter() - started
    if code:
        raise RuntimeError(f"{args}: {metrics.get('error')}")
    return took


def ours_process(args: list[str]) -> float:
    """Our job in a fresh ``delta-maint`` process (Spark's start included): process wall seconds."""
    started = time.perf_counter()
    proc = subprocess.run([DELTA_MAINT, *args, "--json", "--master", "local[2]"], capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"{args}: {proc.stdout[-500:]} {proc.stderr[-500:]}")
    return took


# -- the measures ------------------------------------------------------------------------------------
def rewrite_round(results: dict[str, list[tuple[float, float]]], job: str, ours_args: list[str]) -> None:
    src = source(OPTIMIZE_SOURCE[0])
    rs_in, rs_wall = delta_rs(job, fresh_copy(src, "rs"))
    ours = ours_in_process([ours_args[0], str(fresh_copy(src, "ours")), *ours_args[1:]])
    ours_wall = ours_process([ours_args[0], str(fresh_copy(src, "ours")), *ours_args[1:]])
    results.setdefault(job, []).append((ours, rs_in))
    results.setdefault(f"{job}_with_start", []).append((ours_wall, rs_wall))
    print(f"{job}: ours {ours:.2f} s (with start {ours_wall:.2f} s), delta-rs {rs_in:.2f} s "
          f"(with start {rs_wall:.2f} s)", flush=True)


def copy_source(kind: str) -> Path:
    """The row-group copy's ``medium`` or ``mixed`` table, built on first use."""
    from benchmarks.bench_optimize_copy import build

    return build(OUT / "optimize_copy", 24, 40, 1)[kind]  # shared with bench_optimize_copy.py


def worker_process(table: Path) -> float:
    """The whole task as ``execution="auto"`` runs it on the worker, in a fresh process: wall seconds."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WORKER_RUN, str(table), str(COPY_TARGET)], capture_output=True,
                          text=True, cwd=REPO)
    took = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"the worker's run: {proc.stderr[-1000:]}")
    return took


def copy_round(results: dict[str, list[tuple[float, float]]]) -> None:
    """The medium table (on the warm session, and as the worker's whole task), then the mixed one."""
    for key, kind in (("optimize_copy", "medium"), ("optimize_copy_mixed", "mixed")):
        src = copy_source(kind)
        rs_in, rs_wall = delta_rs("compact_snappy", fresh_copy(src, "rs"), COPY_TARGET)
        ours = ours_in_process(["optimize", str(fresh_copy(src, "ours")), "--target-file-size", str(COPY_TARGET)])
        results.setdefault(key, []).append((ours, rs_in))
        line = f"{key}: ours {ours:.2f} s, delta-rs {rs_in:.2f} s (with its import {rs_wall:.2f} s)"
        if kind == "medium":
            worker = worker_process(fresh_copy(src, "ours"))
            results.setdefault("optimize_copy_worker", []).append((worker, rs_wall))
            line += f"; ours on the worker, whole task {worker:.2f} s"
        print(line, flush=True)


def vacuum_round(results: dict[str, list[tuple[float, float]]], with_start: bool) -> None:
    """Whole copies: deleting a hard link frees nothing, and costs a fraction of a real delete."""
    src = source("vacuum_full")
    rs_in, rs_wall = delta_rs("vacuum_full", fresh_copy(src, "rs", link_data=False))
    args = ["--retention-hours", "0", "--ignore-retention-check"]
    ours = ours_in_process(["vacuum", str(fresh_copy(src, "ours", link_data=False)), *args])
    results.setdefault("vacuum_full", []).append((ours, rs_in))
    line = f"vacuum_full: ours {ours:.2f} s, delta-rs {rs_in:.2f} s (with start {rs_wall:.2f} s)"
    if with_start:
        ours_wall = ours_process(["vacuum", str(fresh_copy(src, "ours", link_data=False)), *args])
        results.setdefault("vacuum_full_with_start", []).append((ours_wall, rs_wall))
        line += f"; ours with start {ours_wall:.2f} s"
    print(line, flush=True)


def _worker_check(check: str, table: Path) -> float:
    """One check of ``bench_worker_checks`` in a fresh process: seconds after its imports."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_worker_checks", "--child", check, "after", str(table)],
                          capture_output=True, text=True, cwd=REPO)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines or json.loads(lines[-1])["status"] != "ok":
        raise RuntimeError(f"{check}: {proc.stdout[-500:]} {proc.stderr[-1000:]}")
    return float(json.loads(lines[-1])["seconds"])


def worker_check_round(results: dict[str, list[tuple[float, float]]]) -> None:
    table = source("log_1m")
    ours, rs = _worker_check("optimize", table), _worker_check("delta_rs", table)
    results.setdefault("worker_check_1m", []).append((ours, rs))
    print(f"worker_check_1m: ours {ours:.2f} s, delta-rs {rs:.2f} s", flush=True)


def checkpoint_round(results: dict[str, list[tuple[float, float]]]) -> None:
    src = source("log_1m")
    rs_in, _ = delta_rs("checkpoint", fresh_copy(src, "rs", link_data=False))
    ours = ours_in_process(["checkpoint", str(fresh_copy(src, "ours", link_data=False))])
    results.setdefault("checkpoint_1m", []).append((ours, rs_in))
    print(f"checkpoint_1m: ours {ours:.2f} s, delta-rs {rs_in:.2f} s", flush=True)


_S3_BENCH: list = []


def s3_round(results: dict[str, list[tuple[float, float]]], key: str) -> None:
    """One round of an S3 measure behind the latency proxy (the servers start on first use)."""
    if not _S3_BENCH:
        from benchmarks.bench_store_latency import Bench

        _S3_BENCH.append(Bench(S3_LATENCY_MS))
    ours, rs = _S3_BENCH[0].round(S3_JOBS[key])
    results.setdefault(key, []).append((ours, rs))


@contextlib.contextmanager
def s3_servers() -> Iterator[None]:
    """Stop the S3 measures' servers (by their process ids) at the end, whatever happened."""
    try:
        yield
    finally:
        while _S3_BENCH:
            _S3_BENCH.pop().stop()


# -- the record --------------------------------------------------------------------------------------
_ROW = re.compile(r"^\| `(\w+)` \|[^|]*\|[^|]*\| \*?\*?([0-9.]+)\*?\*? \|")


def recorded(doc: Path = DOC) -> dict[str, float]:
    """The ratios recorded in the "Speed guard" section of ``docs/benchmarks.md``."""
    text = doc.read_text()
    start = text.find("\n## Speed guard")
    if start < 0:
        return {}
    end = text.find("\n## ", start + 5)
    out: dict[str, float] = {}
    for line in text[start:end if end > 0 else None].splitlines():
        m = _ROW.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def worse_measures(measured: dict[str, float], baseline: dict[str, float], tolerance: float) -> list[str]:
    """The measures whose ratio is more than ``tolerance`` worse than recorded."""
    return [k for k, v in measured.items() if k in baseline and v > baseline[k] * (1 + tolerance)]


def compare(measured: dict[str, float], baseline: dict[str, float], tolerance: float) -> list[str]:
    """The measures more than ``tolerance`` worse than recorded, each as a line."""
    return [f"{k}: {measured[k]:.2f}x against {baseline[k]:.2f}x recorded (more than {tolerance:.0%} worse)"
            for k in worse_measures(measured, baseline, tolerance)]


def best_ratios(results: dict[str, list[tuple[float, float]]]) -> dict[str, tuple[float, float]]:
    """Each measure's best time of ours and of delta-rs over its rounds."""
    return {key: (min(o for o, _ in runs), min(r for _, r in runs)) for key, runs in results.items() if runs}


#: the job (a step of the guard) that measures each measure
STEP_OF = {key: "optimize_copy" if key.startswith("optimize_copy") else key.removesuffix("_with_start")
           for key in MEASURES}


def looks_worse(results: dict[str, list[tuple[float, float]]], baseline: dict[str, float],
                tolerance: float) -> dict[str, str]:
    """The measures whose best ratio so far is more than ``tolerance`` worse than recorded, each with
    the job that measures it again."""
    ratios = {key: ours / peer for key, (ours, peer) in best_ratios(results).items()}
    return {key: STEP_OF[key] for key in worse_measures(ratios, baseline, tolerance)}


def table(results: dict[str, list[tuple[float, float]]], baseline: dict[str, float]) -> tuple[str, dict[str, float]]:
    ratios: dict[str, float] = {}
    lines = ["| measure | ours (s) | delta-rs (s) | ours ÷ delta-rs | recorded | goal |", "|---|---:|---:|---:|---:|---:|"]
    best = best_ratios(results)
    for key in MEASURES:
        if key not in best:
            continue
        ours, peer = best[key]
        ratios[key] = ours / peer
        rec = f"{baseline[key]:.2f}" if key in baseline else "-"
        goal = f"≤ {GOALS[key]:.2f}" if key in GOALS else "-"
        lines.append(f"| `{key}` | {ours:.2f} | {peer:.2f} | {ratios[key]:.2f} | {rec} | {goal} |")
    return "\n".join(lines), ratios


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """Hold ``/tmp/bench.lock`` (other benchmarks wait for it) while timing."""
    while True:
        try:
            with open(LOCK, "x") as fh:
                fh.write(str(os.getpid()))
            break
        except FileExistsError:
            print("waiting for another benchmark (/tmp/bench.lock)", flush=True)
            time.sleep(10)
    try:
        yield
    finally:
        LOCK.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="rounds of each measure but Z-order (best of)")
    parser.add_argument("--confirm", type=int, default=2,
                        help="more rounds of a job whose ratio looks more than the tolerance worse, before failing")
    parser.add_argument("--repeat-zorder", type=int, default=1)
    parser.add_argument("--repeat-s3-check", type=int, default=1, help="rounds of s3_worker_check_100k")
    parser.add_argument("--only", nargs="+", choices=("optimize", "zorder", "vacuum_full", "worker_check_1m",
                                                      "checkpoint_1m", "optimize_copy", *S3_JOBS))
    parser.add_argument("--tolerance", type=float, default=0.15)
    parser.add_argument("--files-per-partition", type=int, default=FILES_PER_PARTITION,
                        help="OPTIMIZE's and Z-order's table: this many files in each of 8 partitions (250: the "
                        "2,000 files, 900 MB, of bench_optimize.py); the record holds for the default only")
    parser.add_argument("--out", default=str(OUT / "guard.md"))
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import logging

    logging.basicConfig(level=logging.WARNING)
    wanted = set(args.only or ("optimize", "zorder", "vacuum_full", "worker_check_1m", "checkpoint_1m", "optimize_copy",
                               *S3_JOBS))
    if args.files_per_partition != FILES_PER_PARTITION:
        OPTIMIZE_SOURCE[0] = f"optimize-{args.files_per_partition}"
    for name in ("optimize", "vacuum_full", "log_1m"):  # built before the clock runs
        if name == "optimize":
            name = OPTIMIZE_SOURCE[0]
        if (name.startswith("optimize") and wanted & {"optimize", "zorder", "s3_optimize"}) or (name == "vacuum_full" and "vacuum_full" in wanted) \
                or (name == "log_1m" and wanted & {"worker_check_1m", "checkpoint_1m"}):
            source(name)
    if "s3_optimize" in wanted:
        source("optimize")
    if "optimize_copy" in wanted:
        copy_source("medium")
    if "s3_worker_check_100k" in wanted:
        from benchmarks.bench_store_latency import worker_check_log

        worker_check_log()
    started = time.perf_counter()
    results: dict[str, list[tuple[float, float]]] = {}
    with machine_lock(), s3_servers():
        from airflow_delta_maint.app.spark_session import get_spark

        spark = get_spark("local[2]", "bench-guard")
        spark.range(1).count()
        if wanted & {"optimize", "zorder", "vacuum_full", "checkpoint_1m", "s3_optimize", "optimize_copy"}:  # Python workers start
            ours_in_process(["optimize", str(fresh_copy(source(OPTIMIZE_SOURCE[0]), "warm")), "--target-file-size",
                             str(TARGET)])
        steps: list[tuple[str, int, Callable[[], None]]] = [
            ("optimize", args.repeat, lambda: rewrite_round(results, "optimize",
                                                           ["optimize", "--target-file-size", str(TARGET)])),
            ("zorder", args.repeat_zorder, lambda: rewrite_round(results, "zorder",
                                                                ["optimize", "--zorder-by", "a,k", "--target-file-size",
                                                                 str(TARGET)])),
            ("vacuum_full", args.repeat, lambda: vacuum_round(results, with_start[0])),
            ("worker_check_1m", args.repeat, lambda: worker_check_round(results)),
            ("checkpoint_1m", args.repeat, lambda: checkpoint_round(results)),
            ("optimize_copy", args.repeat, lambda: copy_round(results)),
            ("s3_vacuum_full", args.repeat, lambda: s3_round(results, "s3_vacuum_full")),
            ("s3_optimize", args.repeat, lambda: s3_round(results, "s3_optimize")),
            ("s3_worker_check_100k", args.repeat_s3_check, lambda: s3_round(results, "s3_worker_check_100k")),
        ]
        baseline = recorded() if args.files_per_partition == FILES_PER_PARTITION else {}
        with_start = [True]  # VACUUM's whole task: in the first round (and in confirmations) only
        for name, rounds, step in steps:
            if name in wanted:
                for _ in range(rounds):
                    step()
                    with_start[0] = with_start[0] and name != "vacuum_full"
        confirmed = 0
        while confirmed < args.confirm:
            suspects = looks_worse(results, baseline, args.tolerance)
            if not suspects:
                break
            confirmed += 1
            print(f"measuring again ({confirmed} of {args.confirm}): {', '.join(sorted(suspects))}", flush=True)
            with_start[0] = "vacuum_full_with_start" in suspects
            for name, _, step in steps:
                if name in suspects.values():
                    step()
        spark.stop()
    shutil.rmtree(WORK / "run", ignore_errors=True)
    text, ratios = table(results, baseline)
    worse = compare(ratios, baseline, args.tolerance)
    load = os.getloadavg()[0]
    report = (f"{text}\n\n{time.strftime('%Y-%m-%d')}, {time.perf_counter() - started:.0f} s, load average "
              f"{load:.1f} at the end; best of {args.repeat} rounds (Z-order {args.repeat_zorder}), "
              f"{confirmed} confirming round(s) of what looked slower.\n")
    print("\n" + report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report)
    if not baseline:
        print("no ratios recorded in docs/benchmarks.md (\"Speed guard\"): nothing to compare with")
    if worse:
        print("SLOWER than recorded:\n  " + "\n  ".join(worse))
        return 1
    print(f"no ratio more than {args.tolerance:.0%} worse than recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
