"""The one reading of an engine release (core/releases.py) that the checks and the planner share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops.core.releases import OLD_ENGINE, at_least, release


@pytest.mark.parametrize("text, want", [
    ("0.11.1rc2.dev45", (0, 11, 1)),
    ("0.21", (0, 21, 0)),
    ("v0.20.0-cu130", (0, 20, 0)),  # a container tag as users paste it; once misread as the old V0 engine
    ("0.20.0 (vllm/vllm-openai:v0.20.0-cu130-ubuntu2404, WSL2)", (0, 20, 0)),  # logs.yaml's form
    ("V0", OLD_ENGINE),
    ("V0 engine, late 2024 (0.6.x)", OLD_ENGINE),
    ("v0", OLD_ENGINE),
    ("", None),
    (None, None),
    ("nightly", None),
])
def test_release_reads_what_users_and_logs_name(text, want):
    assert release(text) == want


def test_boundaries():
    assert at_least(release("0.19.2rc1.dev134"), "0.19.2")
    assert not at_least(release("0.19.1"), "0.19.2")
    assert at_least(release("0.21.0"), "0.21") and not at_least(release("0.20.9"), "0.21")
    assert not at_least(OLD_ENGINE, "0.9")
    assert at_least(None, "0.99") and not at_least(None, "0.99", unknown_is_current=False)
    with pytest.raises(ValueError):
        at_least((0, 1, 0), "soon")


@given(st.tuples(st.integers(0, 30), st.integers(0, 99), st.integers(0, 99)), st.sampled_from(["", "rc1", ".dev7", "+cu130"]))
def test_a_written_release_reads_back(parts, suffix):
    text = ".".join(map(str, parts)) + suffix
    assert release(text) == parts
    assert release("v" + text) == parts
    assert at_least(release(text), ".".join(map(str, parts)))


@given(st.text(max_size=40))
def test_never_raises_on_any_text(text):
    r = release(text)
    assert r is None or (len(r) == 3 and all(isinstance(x, int) for x in r))
