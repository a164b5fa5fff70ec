"""Encoder-only pooling models in vLLM (round 20ao): no KV cache (engines.yaml vllm.pooling.encoder_only).

The recorded GB10 start of nomic-embed-text-v1.5 (logs.yaml, blind v23) prints its weights and no KV line at all; vLLM's
source (0.13.0 and 0.27.1, EngineCore._initialize_kv_caches) allocates no pool when no layer has a KV spec. The catalog
holds no encoder-only model (no public config.json could be cited in this round), so the plan is taken on a catalog
shape whose config model_type is set to the recorded model's: a what-if of the rule, not a weights prediction.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from sparkops.planner import serve
from sparkops.planner.serve_engines import ServeSpec
from sparkops.planner.serve_render import render_serve

LOGS = Path(__file__).parent / "serve_logs" / "logs.yaml"


def _record(rid: str) -> dict:
    return next(r for r in yaml.safe_load(LOGS.read_text())["records"] if r["id"] == rid)


def _machine(rec: dict) -> serve.Machine:
    total = float(rec["gpu_total_gib"])
    return serve.Machine(source="log", total_gib=total, free_gib=rec["observed"].get("free_gib") or total,
                         unified=True, gpu_name=rec["gpu"])


def _plan(rec: dict, model_type: str) -> serve.ServePlanResult:
    shape = replace(serve.resolve_shape("qwen3-0.6b"), model_type=model_type)
    f = rec["flags"]
    spec = ServeSpec(engine="vllm", model=rec["model"], runner=f.get("runner"),
                     gpu_memory_utilization=f["gpu_memory_utilization"], engine_version=rec["engine_version"])
    return serve.plan_serve(shape, spec, _machine(rec))


def test_the_recorded_encoder_start_prints_no_kv_line() -> None:
    rec = _record("vllm-guardkit-nomic-embed-v15-gb10-u015")
    arch = re.search(r"Resolved architecture: (\w+)", rec["log"]).group(1)
    assert arch == "NomicBertModel"
    assert "Model loading took 0.2551 GiB" in rec["log"]
    assert "KV cache memory" not in rec["log"] and "GPU KV cache size" not in rec["log"]


def test_the_recorded_model_type_is_an_encoder_family() -> None:
    # NomicBertModel's config model_type is nomic_bert; vLLM's registry runs it from bert_with_rope
    assert serve.vllm_encoder_only(replace(serve.resolve_shape("qwen3-0.6b"), model_type="nomic_bert")) == "bert_with_rope"
    assert serve.vllm_encoder_only(serve.resolve_shape("qwen3-0.6b")) is None  # a decoder pools with a KV cache


@pytest.mark.parametrize("mt", ["bert", "xlm-roberta", "modernbert", "nomic_bert", "new"])
def test_encoder_only_plan_has_no_pool(mt: str) -> None:
    rec = _record("vllm-guardkit-nomic-embed-v15-gb10-u015")
    res = _plan(rec, mt)
    assert res.kv.none and mt in res.kv.none
    assert res.kv.available_gib is None and res.kv.tokens is None and res.kv.request_gib is None
    # what it holds: weights, one forward's activations, graphs; never the 0.15 share of the pool
    held = res.weights_gib + sum(res.overheads.get(k, 0.0) for k in ("activation_peak", "non_torch", "cudagraph"))
    assert res.footprint_gib == pytest.approx(held, abs=0.02)
    assert res.footprint_gib < 0.15 * rec["gpu_total_gib"]
    table = render_serve(res)
    line = next(ln for ln in table.splitlines() if "KV cache pool" in ln)
    assert "none" in line and "GiB" not in line.split("KV cache pool", 1)[1][:12]
    assert "KV tokens" not in table
    js = res.model_dump(mode="json")
    assert js["kv"]["none"] and js["kv"]["available_gib"] is None


def test_the_share_still_gates_the_start_check() -> None:
    # the failed start: 0.15 x 119.63 = 17.94 GiB asked, 4.04 free (vLLM 0.13 Worker.init_device)
    rec = _record("vllm-guardkit-nomic-embed-v15-gb10-u015-fail")
    res = _plan(rec, "nomic_bert")
    assert res.start.requested_gib == pytest.approx(rec["observed"]["requested_gib"], abs=0.01)
    assert res.start.passes is False and res.verdict == "does-not-fit"
    ok = _plan(_record("vllm-guardkit-nomic-embed-v15-gb10-u015"), "nomic_bert")
    assert ok.start.passes is True and ok.verdict == "fits"


def test_a_decoder_pooling_server_keeps_its_pool() -> None:
    rec = _record("vllm-guardkit-nomic-embed-v15-gb10-u015")
    res = _plan(rec, "qwen3")
    assert res.kv.none is None and res.kv.available_gib is not None and res.kv.available_gib > 0
