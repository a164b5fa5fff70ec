"""The README's example outputs are what the code prints (issue 15: examples regenerated from the code)."""

from __future__ import annotations

import pytest

from readme_examples import BLOCK, README, render

EXAMPLES = [(m.group("args"), m.group("body")) for m in BLOCK.finditer(README.read_text(encoding="utf-8"))]


def test_the_readme_has_replayed_examples():
    assert len(EXAMPLES) >= 4
    assert all("--facts tests/fixtures/facts/" in args for args, _ in EXAMPLES)


@pytest.mark.parametrize(("args", "body"), EXAMPLES, ids=[a.split("facts/")[-1].split()[0] for a, _ in EXAMPLES])
def test_each_example_is_what_the_code_prints(args, body):
    assert body == render(args), "README example drifted: run `python tests/readme_examples.py` and review the diff"
