"""G5 — the bandwidth budget from the GPU's profile."""

from __future__ import annotations

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks.base import Status


def test_gb10_budget_is_the_measured_range_not_the_spec():
    f = run_check("G5", load_facts_fixture("gb10_ngc_2509_healthy"))
    assert f.status is Status.info
    assert "273 GB/s" in f.summary and "180–234 GB/s" in f.summary


def test_generic_profile_reports_its_spec():
    f = run_check("G5", load_facts_fixture("h200_generic"))
    assert f.status is Status.info and "4800 GB/s" in f.summary


def test_unknown_model_reports_without_a_ratio():
    facts = patch(load_facts_fixture("h200_generic"), {"gpu.devices.0.name": "Tesla T4",
                                                       "target.live.device_name": "Tesla T4"})
    f = run_check("G5", facts)
    assert f.status is Status.info and "no spec bandwidth" in f.summary and "%" not in f.summary


def test_no_gpu_skips():
    assert run_check("G5", load_facts_fixture("no_gpu")).status is Status.skip
