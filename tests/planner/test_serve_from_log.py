"""plan --serve --from-log (round 20au): the start-up log reader on the REAL recorded logs, the calibration's refusals,
a GB10 pair the flags alone miss and the calibrated plan lands, and the CLI. Every number compared is read from
tests/planner/serve_logs/logs.yaml (its `log:` text and its `observed:` figures), none copied by hand."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sparkops import cli
from sparkops.planner import serve
from sparkops.planner.serve_calibrate import calibrate
from sparkops.planner.serve_engines import spec_from_text
from sparkops.planner.serve_log import launch_line, parse_launch_args, read_vllm_log

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("serve_accuracy", ROOT / "benchmarks" / "serve_accuracy.py")
sa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sa)  # type: ignore[union-attr]
RECORDS = yaml.safe_load(sa.LOGS.read_text())["records"]
BY_ID = {r["id"]: r for r in RECORDS}
VLLM_LOGS = [r for r in RECORDS if r["engine"] == "vllm" and r.get("log")]

# reader field -> the record's observed key (None: the record's gpu_total_gib)
FIELDS = {"kv_gib": "kv_gib", "kv_tokens": "tokens", "weights_gib": "weights_gib", "max_concurrency": "max_concurrency",
          "free_gib": "free_gib", "activation_peak_gib": "activation_peak_gib", "non_torch_gib": "non_torch_gib",
          "cudagraph_estimate_gib": "cudagraph_estimate_gib", "gpu_blocks": "blocks", "total_gpu_gib": None}


def _calibrated(a_id: str, b_id: str) -> tuple[serve.ServePlanResult, serve.LogCalibration]:
    """b planned from its flags plus a's log, as benchmarks/serve_from_log.py does."""
    a, b = BY_ID[a_id], BY_ID[b_id]
    sa_, sb = sa.spec_of(a), sa.spec_of(b)
    m = sa.machine_of(b)
    reading = read_vllm_log(a["log"]).model_copy(update={"kv_gib": float(a["observed"]["kv_gib"])})
    # the pair is one machine's by the records (benchmarks/serve_from_log.py says so too: same_machine)
    cal = calibrate(reading, sa_, sb, m, log_shape=serve.resolve_shape(sa_.model), shape=serve.resolve_shape(sb.model),
                    same_machine=True)
    return serve.plan_serve(serve.resolve_shape(sb.model), sb, m, calibration=cal), cal


# ------------------------------------------------------------------ the reader, on the recorded logs


def test_the_reader_agrees_with_every_figure_the_records_copied_from_their_logs():
    seen = dict.fromkeys(FIELDS, 0)
    for rec in VLLM_LOGS:
        got, obs = read_vllm_log(rec["log"]), rec.get("observed") or {}
        for field, key in FIELDS.items():
            want = rec.get("gpu_total_gib") if key is None else obs.get(key)
            val = getattr(got, field)
            if val is not None and want is not None:
                seen[field] += 1
                assert val == pytest.approx(want, abs=1e-6), (rec["id"], field, got.lines.get(field))
    # the reader reads the lines where they are printed (counts from this set: kv 117, tokens 107, weights 106 ...)
    assert seen["kv_gib"] >= 100 and seen["kv_tokens"] >= 100 and seen["weights_gib"] >= 100
    assert min(seen[f] for f in ("max_concurrency", "free_gib", "activation_peak_gib", "cudagraph_estimate_gib",
                                 "non_torch_gib", "total_gpu_gib")) >= 5


def test_every_log_that_prints_the_kv_line_is_read():
    for rec in VLLM_LOGS:
        # as vLLM prints them (a write-up's "Available KV cache memory: about `11.4 GiB`" is prose, not its line)
        if re.search(r"Available KV cache memory: -?[\d.]+ GiB", rec["log"]) and "kv_gib" in (rec.get("observed") or {}):
            assert read_vllm_log(rec["log"]).kv_gib == pytest.approx(rec["observed"]["kv_gib"]), rec["id"]
        if re.search(r"GPU KV cache size: [\d,]+ tokens", rec["log"]) and "tokens" in (rec.get("observed") or {}):
            assert read_vllm_log(rec["log"]).kv_tokens == rec["observed"]["tokens"], rec["id"]


def test_a_second_ranks_current_kv_line_does_not_replace_the_available_kv_line():
    rec = BY_ID["vllm-agvllm-qwen25-1.5b-instruct-tu102-u090-4k-eager-tp2"]
    got = read_vllm_log(rec["log"])
    assert "Current kv cache memory in use" in rec["log"]
    assert got.kv_gib == rec["observed"]["kv_gib"] and "Available KV cache memory" in got.lines["kv_gib"]
    assert got.version is not None and got.version.startswith("0.28.1rc1")


def test_the_printed_launch_args_become_a_launch_line_the_parser_reads():
    n = 0
    for rec in VLLM_LOGS:
        got = read_vllm_log(rec["log"])
        if not got.launch_args or got.launch_args_cut:
            continue
        line = launch_line(got.launch_args)
        if line is None:
            continue
        n += 1
        spec = spec_from_text(line, engine="vllm")
        util = got.launch_args.get("gpu_memory_utilization")
        assert util is None or spec.gpu_memory_utilization == pytest.approx(util), rec["id"]
        mml = got.launch_args.get("max_model_len")
        assert mml is None or spec.max_model_len == mml, rec["id"]
        assert spec.enforce_eager == bool(got.launch_args.get("enforce_eager")), rec["id"]
    assert n >= 20


def test_the_compile_state_is_the_one_owner_s_reading():
    for rec in VLLM_LOGS:
        cs = (rec.get("environment") or {}).get("compile_state")
        if cs in ("cold", "warm"):
            got = read_vllm_log(rec["log"], engine_version=rec.get("engine_version"),
                                enforce_eager=bool((rec.get("flags") or {}).get("enforce_eager")))
            assert got.compile_state == cs and got.lines["compile_state"], rec["id"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_the_reader_never_raises_on_junk(text):
    got = read_vllm_log(text)
    assert got.gpu_memory_utilization is None or 0 < got.gpu_memory_utilization <= 1
    parse_launch_args(text)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([r["log"] for r in VLLM_LOGS]), st.integers(0, 4000), st.text(max_size=40))
def test_the_reader_never_raises_on_a_cut_or_spliced_real_log(log, cut, junk):
    read_vllm_log(log[:cut] + junk + log[cut:cut + 500])


# ------------------------------------------------------------------ the calibration


def test_a_log_planned_against_itself_gives_back_its_own_pool():
    """delta is exactly what the plan missed on the log's own line: the calibrated plan of that line is the log."""
    n = 0
    for rec in RECORDS:
        if rec["engine"] != "vllm" or "kv_gib" not in (rec.get("observed") or {}) or not sa.total_of(rec):
            continue
        spec = sa.spec_of(rec)
        try:
            serve.resolve_shape(spec.model)
        except Exception:  # noqa: BLE001 - a record whose model no catalog names: no plan either way
            continue
        if spec.pipeline_parallel > 1 or spec.kv_cache_memory_bytes:
            continue
        res, cal = _calibrated(rec["id"], rec["id"])
        if not cal.applied:
            continue
        n += 1
        assert res.kv.available_gib == pytest.approx(rec["observed"]["kv_gib"], abs=0.011), rec["id"]
        assert res.overheads["log_calibration"] == pytest.approx(-cal.delta_gib, abs=1e-3)
        assert not {u.term for u in res.uncertainties} & set(cal.carried)
    assert n >= 60


def test_gb10_pair_the_flags_alone_miss_and_the_log_lands():
    """DesktopShare's DGX Spark: the playbook's 0.4 start logged -1.75 GiB of KV; from that log, the 0.6 start's pool
    and tokens land within 10 % of its own log; from the flags alone the plan is far off."""
    a, b = "vllm-desktopshare-qwen36-35b-a3b-nvfp4-gb10-u040-256k-mtp3-fail", \
        "vllm-desktopshare-qwen36-35b-a3b-nvfp4-gb10-u060-256k-mtp3"
    obs = BY_ID[b]["observed"]
    alone = sa.plan_of(BY_ID[b])
    res, cal = _calibrated(a, b)
    assert cal.applied and sa.machine_of(BY_ID[b]).unified
    assert abs(alone.kv.available_gib - obs["kv_gib"]) / obs["kv_gib"] > 0.10
    assert abs(res.kv.available_gib - obs["kv_gib"]) / obs["kv_gib"] <= 0.10
    assert abs(res.kv.tokens - obs["tokens"]) / obs["tokens"] <= 0.10
    assert res.kv.available_gib == pytest.approx(alone.kv.available_gib + cal.delta_gib, abs=0.011)
    assert any("calibrated from the start-up log" in n for n in res.notes)


def test_refusals_say_why_and_leave_the_flags_alone_plan():
    a, b = "vllm-dennislee-qwen2-7b-a100-80g-u025", "vllm-dennislee-qwen2-7b-2xa100-80g-tp2-u050"
    res, cal = _calibrated(a, b)
    assert not cal.applied and "tensor-parallel" in cal.refused
    assert res.kv.available_gib == sa.plan_of(BY_ID[b]).kv.available_gib and "log_calibration" not in res.overheads
    assert any(n.startswith("not calibrated from the start-up log") for n in res.notes)

    rec = BY_ID["vllm-jagrut-qwen25-3b-bf16-gb10-u085-8k"]
    spec, m = sa.spec_of(rec), sa.machine_of(rec)
    shape = serve.resolve_shape(spec.model)
    reading = read_vllm_log(rec["log"]).model_copy(update={"kv_gib": float(rec["observed"]["kv_gib"])})
    other = reading.model_copy(update={"kv_gib": None})

    def why(log_spec, plan_spec, r=reading, log_shape=shape, plan_shape=shape):
        c = calibrate(r, log_spec, plan_spec, m, log_shape=log_shape, shape=plan_shape, same_machine=True)
        assert not c.applied and c.delta_gib is None
        return c.refused

    assert "version" in why(spec.model_copy(update={"engine_version": "0.19.0"}),
                            spec.model_copy(update={"engine_version": "0.20.0"}))
    q8 = serve.resolve_shape("Qwen/Qwen3-8B")
    assert "different model" in why(spec, spec.model_copy(update={"model": "Qwen/Qwen3-8B"}), plan_shape=q8)
    assert "tensor-parallel" in why(spec, spec.model_copy(update={"tensor_parallel": 2}))
    assert "enforce-eager" in why(spec, spec.model_copy(update={"enforce_eager": True}))
    assert "pinned" in why(spec, spec.model_copy(update={"kv_cache_memory_bytes": 8 * 2**30}))
    assert "extensible" in why(spec.model_copy(update={"engine_version": "0.34.0"}),
                               spec.model_copy(update={"engine_version": "0.34.0"}))
    assert "Available KV cache memory" in why(spec, spec, r=other)
    assert "another GPU" in why(spec, spec, r=reading.model_copy(update={"total_gpu_gib": 79.2}))


# ------------------------------------------------------------------ the CLI


def _cli(*args: str):
    return CliRunner().invoke(cli.app, list(args), standalone_mode=False, catch_exceptions=False)


def test_cli_from_log_plans_another_line_on_the_log_s_measured_basis(tmp_path):
    rec = BY_ID["vllm-jethac-gemma4-26b-a4b-bf16-gb10-u080-8k"]
    log = tmp_path / "vllm-start.log"
    log.write_text(rec["log"])
    own = launch_line(read_vllm_log(rec["log"]).launch_args)
    assert own is not None
    # the log prints neither the device total nor the GPU's name: the user says it is this machine's (round 20ay)
    base = ["plan", "--serve", "--offline", "--target", "dgx-spark", "--json", "--from-log-same-machine"]
    same = json.loads(_cli(*base, "-w", own, "--from-log", str(log)).stdout)
    assert same["calibration"]["applied"] and same["calibration"]["log_launch"] == own
    assert same["kv"]["available_gib"] == pytest.approx(rec["observed"]["kv_gib"], abs=0.011)
    other = own.replace("--gpu-memory-utilization 0.8", "--gpu-memory-utilization 0.7")
    alone = json.loads(_cli(*base[:-1], "-w", other).stdout)
    cal = json.loads(_cli(*base, "-w", other, "--from-log", str(log)).stdout)
    assert alone["calibration"] is None
    delta = cal["calibration"]["delta_gib"]
    assert cal["overheads"]["log_calibration"] == pytest.approx(-delta, abs=1e-3)
    assert cal["kv"]["available_gib"] == pytest.approx(alone["kv"]["available_gib"] + delta, abs=0.011)


def test_cli_from_log_without_a_launch_line_says_to_pass_one(tmp_path):
    rec = BY_ID["vllm-desktopshare-qwen36-35b-a3b-nvfp4-gb10-u060-256k-mtp3"]
    log = tmp_path / "start.log"
    log.write_text(rec["log"])
    out = json.loads(_cli("plan", "--serve", "--offline", "--target", "dgx-spark", "--json", "-w",
                          "vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4 --gpu-memory-utilization 0.5", "--from-log",
                          str(log)).stdout)
    assert out["calibration"]["applied"] is False and "--from-log-line" in out["calibration"]["refused"]
    assert out["calibration"]["log_kv_gib"] == rec["observed"]["kv_gib"]
    line = "vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4 --gpu-memory-utilization 0.6"
    out = json.loads(_cli("plan", "--serve", "--offline", "--target", "dgx-spark", "--json", "-w",
                          "vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4 --gpu-memory-utilization 0.5", "--from-log",
                          str(log), "--from-log-line", line, "--from-log-same-machine").stdout)
    assert out["calibration"]["applied"] and out["calibration"]["log_launch"] == line


def test_mcp_plan_serve_takes_the_log_s_text():
    from sparkops.mcp_server import tools

    rec = BY_ID["vllm-jethac-gemma4-26b-a4b-bf16-gb10-u080-8k"]
    own = launch_line(read_vllm_log(rec["log"]).launch_args)
    out = tools.plan_serve(workload=own, target="dgx-spark", offline=True, from_log=rec["log"],
                           from_log_same_machine=True)
    assert out["calibration"]["applied"] and out["calibration"]["source"] == "the log's text"
    assert out["kv"]["available_gib"] == pytest.approx(rec["observed"]["kv_gib"], abs=0.011)
