"""G8 — open playbook issues matched against the workload."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks import g08_stale_playbooks as g8
from sparkops.core.findings import Status
from sparkops.facts.model import PlaybookIssue
from sparkops.facts.reading import Why, missing
from sparkops.facts.workload import Workload

HEALTHY = "gb10_ngc_2509_healthy"


def test_matching_issues_warn_listing_number_and_title():
    f = run_check("G8", load_facts_fixture(HEALTHY), Workload(components=["vllm"]))
    assert f.status is Status.warn and "#109 nvidia/vllm is wrong missing Ray" in f.summary
    assert "#102" not in f.summary


def test_no_match_passes_with_count_and_time():
    f = run_check("G8", load_facts_fixture(HEALTHY), Workload(components=["trl", "peft"]))
    assert f.status is Status.passed and "5 open issues" in f.summary and "2026-08-26 09:29" in f.summary


def test_playbook_name_matches_across_separators():
    f = run_check("G8", load_facts_fixture(HEALTHY), Workload(playbook="connect-two-sparks"))
    assert f.status is Status.warn and "#25" in f.summary


def test_labels_are_matched_too():
    base = load_facts_fixture(HEALTHY)
    issues = [PlaybookIssue(number=120, title="Step 4 fails on a fresh box", labels=["unsloth"]).model_dump()]
    f = run_check("G8", patch(base, {"playbooks.issues": issues}), Workload(components=["unsloth"]))
    assert f.status is Status.warn and "#120" in f.summary


def test_word_match_not_substring():
    issue = PlaybookIssue(number=1, title="Flow control settings for the RoCE link")
    assert g8.matches(issue, ["trl", "roce"]) == ["roce"]
    assert g8.matches(PlaybookIssue(number=2, title="llama.cpp server crashes"), ["llama.cpp"]) == ["llama.cpp"]
    assert g8.matches(PlaybookIssue(number=3, title="llamaXcpp"), ["llama.cpp"]) == []


def test_no_components_is_info_with_the_count():
    f = run_check("G8", patch(load_facts_fixture(HEALTHY), {"target.distributions": {"torch": "2.9.0a0"}}))
    assert f.status is Status.info and "5 open issues" in f.summary and "nothing was matched" in f.summary


def test_installed_components_are_matched_without_a_workload():
    """Issue 15: Unsloth installed in the target, Unsloth issues open: matched though --workload is silent."""
    base = load_facts_fixture(HEALTHY)
    issues = [*base.playbooks.issues, {"number": 140, "title": "Unsloth notebook fails on DGX Spark with torchao 0.13",
                                       "labels": ["bug"], "updated_at": "2026-08-20T00:00:00Z"}]
    dists = {**base.target.distributions, "unsloth": "2025.11.1"}
    f = run_check("G8", patch(base, {"target.distributions": dists, "playbooks.issues": issues}))
    assert f.code == "G8.open-issues" and "#140" in f.summary and "unsloth" in f.values["terms"]
    assert "installed: " in f.detail and "unsloth" in f.detail


def test_offline_skips_with_cache_age():
    facts = patch(load_facts_fixture(HEALTHY), {
        "playbooks.issues": missing(Why.timeout, "api.github.com did not answer in 4.0 s"),
        "playbooks.fetched_at": datetime(2026, 8, 24, 9, 30, tzinfo=timezone.utc)})  # noqa: UP017
    f = run_check("G8", facts, Workload(components=["vllm"]))
    assert f.status is Status.skip and "timeout" in f.summary and "last successful fetch 2 days ago" in f.summary


def test_recent_cache_age_in_hours():
    facts = patch(load_facts_fixture(HEALTHY), {
        "playbooks.issues": missing(Why.error, "HTTP 403 rate limited"),
        "playbooks.fetched_at": datetime(2026, 8, 26, 3, 30, tzinfo=timezone.utc)})  # noqa: UP017
    f = run_check("G8", facts)
    assert f.status is Status.skip and "6.0 h ago" in f.summary and "403" in f.summary


def test_offline_without_cache_says_so():
    f = run_check("G8", load_facts_fixture("h200_generic"), Workload(components=["vllm"]))
    assert f.status is Status.skip and "no cache" in f.summary


def test_stale_cache_is_noted():
    facts = patch(load_facts_fixture(HEALTHY), {"playbooks.source": "cache",
                                                "playbooks.fetched_at": datetime(2026, 8, 20, tzinfo=timezone.utc)})  # noqa: UP017
    f = run_check("G8", facts, Workload(components=["trl"]))
    assert f.status is Status.passed and any("refresh interval" in n for n in f.notes)


@given(st.text(max_size=40), st.lists(st.text(max_size=15), max_size=4))
def test_matcher_never_crashes(title, terms):
    g8.matches(PlaybookIssue(number=1, title=title, labels=terms), terms)
