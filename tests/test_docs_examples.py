"""The how-to pages include the example DAGs verbatim: after ``<!-- example: path -->`` comes a python
block equal to that file (tests/test_docs.py parses the blocks with Airflow)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- example: (\S+) -->\n```python\n(.*?)```\n", re.S)
HOWTO = sorted((REPO / "docs").glob("howto-*.md"))


@pytest.mark.parametrize("page", HOWTO, ids=[p.name for p in HOWTO])
def test_howto_page_includes_an_example_verbatim(page):
    text = page.read_text()
    includes = MARKER.findall(text)
    assert includes, f"{page.name}: no <!-- example: ... --> include"
    assert text.count("<!-- example:") == len(includes), f"{page.name}: a marker not followed by a python block"
    for path, code in includes:
        assert (REPO / path).read_text() == code, f"{page.name}: the block differs from {path}; copy the file again"


def test_every_example_dag_has_a_howto_page():
    included = {path for page in HOWTO for path, _ in MARKER.findall(page.read_text())}
    examples = {f"dags_example/{p.name}" for p in (REPO / "dags_example").glob("*.py")}
    assert examples <= included, sorted(examples - included)
