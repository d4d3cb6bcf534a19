"""Run every ``benchmarks/bench_*.py`` module's ``main()`` in turn (``make bench``).

Usage: ``python -m benchmarks.run [NAME ...]``, where a NAME selects the modules whose name
contains it (``snapshot`` runs ``bench_snapshot_load``). Each module parses its own options
from an empty command line, so every benchmark runs with its defaults.

Everything a run writes goes to ``benchmarks/out/`` (not tracked): what each benchmark prints is
also kept in ``benchmarks/out/<module>.txt``, and benchmarks that write a Markdown section or a
cache write them there too. No benchmark writes to ``docs/``: ``docs/benchmarks.md`` is edited
by hand from these outputs.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import sys
import time
import traceback
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


class _Tee:
    """A text stream that writes to the terminal and to a file."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


def bench_modules() -> list[str]:
    """The ``bench_*`` module names of this package, sorted."""
    here = Path(__file__).resolve().parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))


def main(argv: list[str] | None = None) -> int:
    wanted = sys.argv[1:] if argv is None else argv
    names = [n for n in bench_modules() if not wanted or any(w in n for w in wanted)]
    if not names:
        print(f"no benchmark matches {' '.join(wanted)}; known: {', '.join(bench_modules())}", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        print(f"\n## {name}\n", flush=True)
        started = time.perf_counter()
        saved = sys.argv
        sys.argv = [f"benchmarks/{name}.py"]
        OUT.mkdir(exist_ok=True)
        with open(OUT / f"{name}.txt", "w") as log, contextlib.redirect_stdout(_Tee(sys.stdout, log)):
            try:
                importlib.import_module(f"benchmarks.{name}").main()
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    failed.append(name)
            except Exception:
                traceback.print_exc()
                failed.append(name)
            finally:
                sys.argv = saved
        print(f"\n({name}: {time.perf_counter() - started:.0f} s; output in {OUT / (name + '.txt')})", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
