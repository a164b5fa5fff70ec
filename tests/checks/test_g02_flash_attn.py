"""G2 — flash-attn and Unsloth's auto-detect."""

from __future__ import annotations

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.core.findings import Status
from sparkops.facts.reading import Why, missing


def test_no_flash_attn_passes_sdpa_path():
    f = run_check("G2", load_facts_fixture("gb10_vllm_default"))
    assert f.status is Status.passed and "not installed" in f.summary


def test_ngc_bundled_flash_attn_without_unsloth_passes():
    f = run_check("G2", load_facts_fixture("gb10_ngc_2509_healthy"))
    assert f.status is Status.passed and "2.7.4.post1" in f.summary


def test_flash_attn_beside_unsloth_warns_with_the_override():
    f = run_check("G2", load_facts_fixture("gb10_torchao_013"))
    assert f.status is Status.warn
    assert "Unsloth 2026.7.2" in f.summary and "2.7.4.post1" in f.summary
    assert "HAS_FLASH_ATTENTION = False" in f.fix


def test_flash_attn_beside_unsloth_warns_even_when_import_not_tested():
    facts = patch(load_facts_fixture("gb10_torchao_013"), {"target.live": missing(Why.not_collected)})
    f = run_check("G2", facts)
    assert f.status is Status.warn and "not tested" in f.summary


def test_flash_attn_that_fails_to_import_warns_uninstall():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {
        "target.live.flash_attn_import": False,
        "target.live.flash_attn_error": "ImportError: flash_attn_2_cuda.so: undefined symbol: _ZN3c10"})
    f = run_check("G2", facts)
    assert f.status is Status.warn and "fails to import" in f.summary and "undefined symbol" in f.summary
    assert "pip uninstall flash-attn" in f.fix


def test_flash_attn_built_in_a_bare_env_is_info():
    base = load_facts_fixture("gb10_vllm_default")
    facts = patch(base, {"target.distributions": {**base.target.distributions, "flash_attn": "2.8.3"},
                         "target.live.flash_attn_import": True})
    f = run_check("G2", facts)
    assert f.status is Status.info and "2.8.3" in f.summary


def test_flash_attn_import_untested_without_unsloth_is_info():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"target.live": missing(Why.not_collected)})
    f = run_check("G2", facts)
    assert f.status is Status.info and "not tested" in f.summary


def test_unread_package_list_skips():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {
        "target.distributions": missing(Why.timeout, "target interpreter did not answer")})
    f = run_check("G2", facts)
    assert f.status is Status.skip and "timeout" in f.summary
