"""plan --serve, round 20ba (a fifth review): SGLang's mamba pool in the start-up check and its ask, SGLang's pool
sizing flags read, --language-only / --language-model-only read, the log's printed pool-sizing arguments against
--from-log-line (the REAL recorded logs of tests/planner/serve_logs/logs.yaml, read from the YAML), the MCP log
argument that names a file, and SGLang's one figure for the longest request. Each test fails on the code before this
round (2248763), except test_sglang_058_ratio_pool_keeps_the_ask_at_weights_over_msf, the guard that the ratio pool
(which follows the memory) stays out of the ask."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sparkops import api, cli
from sparkops.planner.serve_calibrate import line_mismatch, with_log_values
from sparkops.planner.serve_engines import engine_value, parse_command, spec_from_text
from sparkops.planner.serve_log import launch_line, read_vllm_log

LOGS = Path(__file__).parent / "serve_logs" / "logs.yaml"
BY_ID = {r["id"]: r for r in yaml.safe_load(LOGS.read_text())["records"]}
QWEN36 = "Qwen/Qwen3.6-35B-A3B"


def plan(line: str, **flags):
    return api.serve_plan(workload=line, target="dgx-spark", offline=True, **flags)


def cli_json(*args: str) -> dict:
    out = CliRunner().invoke(cli.app, ["plan", "--serve", "--json", "--offline", "--target", "dgx-spark", *args],
                             standalone_mode=False, catch_exceptions=False)
    return json.loads(out.stdout)


# ------------------------------------------------------------------ 1. SGLang 0.5.3's fixed mamba pool


def test_sglang_053_mamba_pool_that_leaves_no_kv_is_a_refusal_not_a_flush():
    """The review's line: 512 mamba states (30.70 GiB) leave the KV pool below zero; SGLang 0.5.3
    (profile_max_num_token) raises 'Not enough memory' at max_total_num_tokens <= 0, before and after a flush."""
    out = cli_json("--engine", "sglang", "-m", QWEN36, "--engine-version", "0.5.3")
    kv = out["kv"]
    assert out["verdict"] == "does-not-fit"
    assert kv["tokens"] == 0
    assert out["start"]["passes"] is False and out["start"]["passes_after_flush"] is False
    assert any("no memory is left for the KV cache" in r for r in out["refusals"])


def test_sglang_053_ask_carries_the_fixed_mamba_pool():
    r = plan(f"python -m sglang.launch_server --model-path {QWEN36} --mem-fraction-static 0.8", engine_version="0.5.3")
    mamba = r.overheads["mamba_state_pool"]
    assert mamba > 30  # 512 states
    assert r.start.requested_gib == pytest.approx((r.weights_gib + mamba) / 0.8, abs=0.01)


def test_sglang_058_ratio_pool_keeps_the_ask_at_weights_over_msf():
    """From 0.5.8 the pool follows the memory (mamba_full_memory_ratio): the ask stays weights / msf."""
    r = plan(f"python -m sglang.launch_server --model-path {QWEN36} --mem-fraction-static 0.8", engine_version="0.5.8")
    assert r.start.requested_gib == pytest.approx(r.weights_gib / 0.8, abs=0.01)


# ------------------------------------------------------------------ 2. SGLang pool-sizing flags


def test_sglang_pool_sizing_flags_are_read_not_ignored():
    s = parse_command("python -m sglang.launch_server --model-path openai/gpt-oss-120b --swa-full-tokens-ratio 0.5 "
                      "--mamba-full-memory-ratio 1.5 --max-mamba-cache-size 64 --disable-radix-cache "
                      "--disable-hybrid-swa-memory --max-running-requests 16")
    assert (s.swa_full_tokens_ratio, s.mamba_full_memory_ratio, s.max_mamba_cache_size) == (0.5, 1.5, 64)
    assert s.disable_radix_cache and s.disable_hybrid_swa_memory and s.max_num_seqs == 16
    assert s.ignored == []


def _sglang(model: str, flags: str = "", version: str = "0.5.10"):
    return plan(f"python -m sglang.launch_server --model-path {model} --mem-fraction-static 0.8 {flags}".strip(),
                engine_version=version)


@pytest.mark.parametrize("ratio", [0.2, 0.5, 1.0])
def test_swa_full_tokens_ratio_sets_the_gpt_oss_cell(ratio):
    base = _sglang("openai/gpt-oss-120b")
    got = _sglang("openai/gpt-oss-120b", f"--swa-full-tokens-ratio {ratio}")
    assert got.kv.tokens != base.kv.tokens
    # a smaller ratio: a cheaper cell, more full tokens
    assert (got.kv.tokens > base.kv.tokens) == (ratio < float(engine_value("sglang", "hybrid_swa")
                                                               ["swa_full_tokens_ratio"]))


def test_disable_hybrid_swa_memory_pools_gpt_oss_as_full_attention():
    base = _sglang("openai/gpt-oss-120b")
    full = _sglang("openai/gpt-oss-120b", "--disable-hybrid-swa-memory")
    assert full.kv.tokens < base.kv.tokens
    assert not any("hybrid SWA (a full pool" in n for n in full.notes)


def test_mamba_full_memory_ratio_max_mamba_cache_size_and_radix_off_with_requests():
    base = _sglang(QWEN36)
    more = _sglang(QWEN36, "--mamba-full-memory-ratio 2")
    assert more.overheads["mamba_state_pool"] > base.overheads["mamba_state_pool"]
    fixed = _sglang(QWEN36, "--max-mamba-cache-size 32")
    per = _per_state_gib(base)
    assert fixed.overheads["mamba_state_pool"] == pytest.approx(32 * per, abs=0.01)
    radix = _sglang(QWEN36, "--disable-radix-cache --max-running-requests 16")
    assert radix.overheads["mamba_state_pool"] == pytest.approx(16 * per, abs=0.01)
    # --max-running-requests alone keeps the ratio pool from 0.5.8 (the radix cache is on)
    assert _sglang(QWEN36, "--max-running-requests 16").overheads["mamba_state_pool"] == \
        base.overheads["mamba_state_pool"]
    # a fixed pool is carried by the start-up ask
    assert fixed.start.requested_gib == pytest.approx((fixed.weights_gib + 32 * per) / 0.8, abs=0.02)


def _per_state_gib(r) -> float:
    """mamba_cache_per_req as the plan's note prints it ("61.41 MiB a request")."""
    note = next(n for n in r.notes if "mamba state pool" in n)
    return float(note.split(" MiB a request")[0].rsplit(" ", 1)[1]) / 1024


# ------------------------------------------------------------------ 3. --language-only / --language-model-only


def test_sglang_language_flags_are_read():
    for flag, field in (("--language-only", "language_only"), ("--language-model-only", "language_model_only")):
        s = parse_command(f"python -m sglang.launch_server --model-path {QWEN36} {flag}")
        assert getattr(s, field) and s.ignored == []


def test_language_flags_skip_the_vlm_fraction_and_the_tower_where_the_release_does():
    def run(flag: str, version: str):
        return plan(f"python -m sglang.launch_server --model-path {QWEN36} {flag}".strip(), engine_version=version)

    plain = run("", "0.5.10")
    lang = run("--language-only", "0.5.10")  # 0.5.10: no VLM factor, the tower still loaded
    assert any("adjust_mem_fraction_for_vlm" in n for n in plain.notes)
    assert not any("adjust_mem_fraction_for_vlm" in n for n in lang.notes)
    assert lang.weights_gib == plain.weights_gib
    assert any("adjust_mem_fraction_for_vlm" in n for n in run("--language-only", "0.5.8").notes)
    lmo = run("--language-model-only", "0.5.23")  # the tower left out
    assert lmo.weights_gib < run("", "0.5.23").weights_gib


# ------------------------------------------------------------------ 4. the log's printed pool-sizing args


RETRIVA_4K = "vllm-retriva-qwen3-0.6b-rtx3060-eager-u060-4k-seqs8"
GUARDKIT = "vllm-guardkit-qwen3-30b-a3b-fp8-gb10-u030-32k-fp8kv"
DJANGO = "vllm-djangodevreng-qwen36-35b-a3b-bf16-gb10-u095-131k"


def _own(rid: str) -> str:
    line = launch_line(read_vllm_log(BY_ID[rid]["log"]).launch_args)
    assert line is not None
    return line


@pytest.mark.parametrize(("rid", "edit", "field"), [
    (RETRIVA_4K, ("--max-num-seqs 8", "--max-num-seqs 16"), "max_num_seqs"),
    (RETRIVA_4K, ("--max-num-batched-tokens 1024", "--max-num-batched-tokens 2048"), "max_num_batched_tokens"),
    (GUARDKIT, ("--kv-cache-dtype fp8", "--kv-cache-dtype auto"), "kv_cache_dtype"),
    (GUARDKIT, ("--enable-prefix-caching", "--no-enable-prefix-caching"), "enable_prefix_caching"),
    (DJANGO, ('"image": 0', '"image": 2'), "limit_mm_per_prompt"),
    ("vllm-armlp-mistral7b-v02-gptq-gb10-u090-32k", ("--quantization gptq", "--quantization awq"), "quantization"),
])
def test_a_line_that_disagrees_on_a_printed_pool_sizing_arg_is_refused_by_name(rid, edit, field):
    reading = read_vllm_log(BY_ID[rid]["log"])
    own = _own(rid)
    assert line_mismatch(reading, spec_from_text(own)) is None
    assert edit[0] in own
    why = line_mismatch(reading, spec_from_text(own.replace(edit[0], edit[1])))
    assert why is not None and field in why


@pytest.mark.parametrize(("rid", "drop", "field", "value"), [
    (RETRIVA_4K, "--max-num-seqs 8", "max_num_seqs", 8),
    (GUARDKIT, "--kv-cache-dtype fp8", "kv_cache_dtype", "fp8"),
    (DJANGO, "--language-model-only", "language_model_only", True),
    (DJANGO, "--no-enable-prefix-caching", "enable_prefix_caching", False),
])
def test_a_line_that_leaves_a_printed_arg_unset_takes_the_logs(rid, drop, field, value):
    reading = read_vllm_log(BY_ID[rid]["log"])
    own = _own(rid)
    assert drop in own
    line = spec_from_text(own.replace(drop, ""))
    assert getattr(line, field) != value
    assert line_mismatch(reading, line) is None
    assert getattr(with_log_values(reading, line), field) == value


def test_the_refusal_reaches_the_plan_end_to_end():
    rec = BY_ID[RETRIVA_4K]
    own = _own(RETRIVA_4K)
    out = api.serve_plan(workload=own, target="dgx-spark", offline=True, from_log=rec["log"],
                         from_log_same_machine=True, from_log_line=own.replace("--max-num-seqs 8", "--max-num-seqs 64"))
    assert not out.calibration.applied and "max_num_seqs" in out.calibration.refused


# ------------------------------------------------------------------ 8. MCP: a file whose name looks like a log line


def test_mcp_reads_a_real_file_whose_name_matches_the_log_pattern(tmp_path):
    from sparkops.mcp_server import tools

    f = tmp_path / "vllm-DEBUG.log"
    f.write_text(BY_ID[RETRIVA_4K]["log"])
    got = tools._log_arg(str(f))
    assert isinstance(got, Path) and got == f
    # a name that is no existing file is the log's text; one that cannot be a path is never looked up
    assert tools._log_arg(str(tmp_path / "INFO missing.log")) == str(tmp_path / "INFO missing.log")
    assert tools._log_arg("a\nb") == "a\nb"


# ------------------------------------------------------------------ 9. SGLang's longest request


def test_sglang_longest_request_is_the_pool_less_one_in_one_figure():
    out = cli_json("--engine", "sglang", "-m", "google/gemma-3-27b-it", "--max-model-len", "131072")
    kv = out["kv"]
    assert kv["max_model_len_fitting"] == kv["tokens"] - 1
    caps = [n for n in out["notes"] if "caps every request at" in n]
    assert caps and f"{kv['tokens'] - 1:,}" in caps[0]
