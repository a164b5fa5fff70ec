"""G3's vLLM start-up check judges the release the launch line names (a vllm/vllm-openai image tag), as
``plan --serve`` does, and falls back to the installed release only when the line names none (review 14, finding 1:
the report said "reads MemAvailable, start OK" while its own embedded plan said the check fails until the page cache
is dropped)."""

from __future__ import annotations

from conftest import FIXTURES, load_facts_fixture
from sparkops import api
from sparkops.facts.workload import parse_workload

FACTS = "gb10_page_cache"  # a GB10 with ~78 GiB of page cache: MemFree 12.7 GiB, MemAvailable 90.5 GiB
TAGGED = "docker run --gpus all vllm/vllm-openai:v0.10.1 --model Qwen/Qwen3-8B --gpu-memory-utilization 0.5"
UNTAGGED = "vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.5"


def _start_evidence(text: str):
    rep = api.build_report(load_facts_fixture(FACTS), parse_workload(text), offline=True)
    g3 = next(f for f in rep.findings if f.gotcha == "G3")
    ev = next(e.value for e in g3.evidence if e.fact == "vllm start-up check")
    return rep, g3, ev


def test_a_tagged_image_older_than_the_memavailable_reading_is_judged_on_memfree():
    rep, g3, ev = _start_evidence(TAGGED)
    assert rep.workload.serve_engine_version == "0.10.1"
    assert ev["reads"] == "MemFree" and ev["free_gib"] < ev["requested_gib"]
    assert ev["page_cache_gib"] > 0 and "refused now" in g3.summary
    # the plan on the same facts says the same
    plan = api.serve_plan(workload=TAGGED, facts=FIXTURES / "facts" / f"{FACTS}.json", offline=True)
    assert plan.start.passes is False
    assert "start-up check fails" in (rep.plan.note or "")


def test_a_line_naming_no_release_keeps_the_installed_or_current_reading():
    rep, _, ev = _start_evidence(UNTAGGED)
    assert rep.workload.serve_engine_version is None
    assert ev["reads"] == "MemAvailable" and ev["free_gib"] >= ev["requested_gib"]
