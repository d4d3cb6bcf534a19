"""The ``engine`` option, declared once for every job that has a choice of engine."""

from __future__ import annotations

from .definition import NATIVE
from .options import Option

#: who does the data work; the operators' own ``engine`` keyword sets it
ENGINE = Option("engine", "str", default=NATIVE, metavar="ENGINE", keyword=None, in_docs=False,
                help="who does the data work: native (default) or delta-spark (delta-spark's own commands; the "
                     "cluster needs its jars)")
