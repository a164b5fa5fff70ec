"""The facts a report states, judged by the gotchas' own owners (issue 18, round 18x; diagnose/text_facts.py).

Fixtures are labelled reports' recorded text (tests/diagnose/cases). The reader is pure and must never raise, so it
gets property tests like every reader."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from yaml import safe_load

from sparkops.diagnose.reading import PLAIN, line_roles
from sparkops.diagnose.text import from_text
from sparkops.diagnose.text_facts import READ_ROLES, extract, judge_text
from sparkops.facts.reading import known

CASES = Path(__file__).parent / "cases"


def _case(name: str) -> list[str]:
    text = safe_load((CASES / f"{name}.yaml").read_text(encoding="utf-8"))["text"]
    return from_text(str(text), name).lines


def test_an_environment_table_is_read_as_facts():
    lines = _case("sglang-35354-dspark-nvfp4-lm-head")  # a collect-env style table on context lines
    tf = extract(lines, line_roles(lines))
    d = tf.facts.target.distributions
    assert d["torch"] == "2.11.0+cu130" and d["triton"] == "3.6.0" and d["torchao"] == "0.17.0"
    assert tf.facts.target.torch.cuda == "13.0"
    assert tf.facts.gpu.devices[0].name == "NVIDIA GB10"
    assert not known(tf.facts.memory.meminfo_bytes)  # never stated: stays not collected


def test_a_healthy_stated_stack_confirms_nothing_and_an_unstated_env_is_not_a_fact():
    lines = _case("sglang-35354-dspark-nvfp4-lm-head")  # cu130 torch on GB10; Triton 3.6 stated, its env never shown
    tj = judge_text(extract(lines, line_roles(lines)))
    assert tj.confirms == {}  # G1 passes; G9's Triton warning would rest on an unstated TRITON_PTXAS_PATH


def test_quoted_lines_are_not_the_users_machine():
    lines = ["> " + ln for ln in _case("sglang-35354-dspark-nvfp4-lm-head")]
    tf = extract(lines, line_roles(lines))
    assert tf.empty and judge_text(tf).confirms == {}


def test_prose_is_not_read_by_default_and_the_owner_decides_when_it_is():
    lines = _case("transformerlab-1330-torch-cpu-on-spark")  # "runtime reports **PyTorch `2.9.1+cpu`**" in prose
    roles = line_roles(lines)
    assert "target.torch" not in extract(lines, roles).stated
    wide = judge_text(extract(lines, roles, read=(*READ_ROLES, PLAIN)))
    assert wide.confirms == {"G1": ["G1.cpu-only"]}  # G1's owner: a CPU-only torch on a GB10
    assert "text.fact.torch-cpu" in wide.signals and "text.fact.confirms-G1" in wide.signals
    assert all(e.effect == "confirms" for es in wide.effects.values() for e in es)


_LINE = st.one_of(st.text(max_size=120), st.sampled_from([
    "torch==2.9.0+cu128", "- PyTorch: 2.11.0+cpu", "GPU 0: NVIDIA GB10", "CUDA Version: 13.0", "peft==0.18.1",
    "torchao: 0.13.0", "docker run --gpus all nvcr.io/nvidia/pytorch:25.10-py3", "uv venv", "ERROR: sm_121a",
    "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas", "| flash_attn | 2.8.3 |", "unsloth 2026.7.2"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(_LINE, max_size=12))
def test_extract_and_judge_never_raise_and_never_rule_out(lines):
    roles = line_roles(lines)
    tf = extract(lines, roles)
    assert all(1 <= n <= len(lines) for n in tf.stated.values()) or not lines or tf.empty
    tj = judge_text(tf)
    assert all(e.effect == "confirms" for es in tj.effects.values() for e in es)
    assert set(tj.confirms) == set(tj.effects)


@settings(max_examples=100, deadline=None)
@given(st.lists(_LINE, max_size=12))
def test_a_fact_stands_on_a_failure_or_context_line(lines):
    roles = line_roles(lines)
    for n in extract(lines, roles).stated.values():
        assert roles[n - 1] in READ_ROLES
