"""The runnable example of docs/vys-python.md runs as written."""

import os

import pytest

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "vys-python.md")


def test_docs_example_runs():
    if not os.path.exists(DOC):
        pytest.skip("docs/vys-python.md is not beside this package (installed elsewhere)")
    text = open(DOC).read()
    start = text.index("```python\nimport os, random")
    code = text[start + len("```python\n"): text.index("```", start + 10)]
    exec(compile(code, "docs/vys-python.md", "exec"), {})
