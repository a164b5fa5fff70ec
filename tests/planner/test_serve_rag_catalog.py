"""RAG-stack pooling models by name (round 20ap): catalog entries from cited config.json copies, the encoder's weights
as vLLM 0.27.1 builds them (bert.py / roberta.py), and --runner auto's decision for a decoder published for pooling
(config/model.py _get_default_runner_type: a Sentence Transformers modules.json first).

The v23 records (logs.yaml) are IN-SAMPLE for this round: the entries were added after their blind score."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sparkops.planner import serve
from sparkops.planner.serve_engines import ServeInputError, ServeSpec
from sparkops.planner.serve_shape import shape_from_encoder_config

LOGS = Path(__file__).parent / "serve_logs" / "logs.yaml"
GIB = 1024**3


def _record(rid: str) -> dict:
    return next(r for r in yaml.safe_load(LOGS.read_text())["records"] if r["id"] == rid)


def _spark(total: float = 119.63, free: float | None = None) -> serve.Machine:
    return serve.Machine(source="test", total_gib=total, free_gib=free if free is not None else total, unified=True,
                         gpu_name="GB10")


@pytest.mark.parametrize("name", ["BAAI/bge-m3", "BAAI/bge-large-en-v1.5", "BAAI/bge-reranker-v2-m3",
                                  "Qwen/Qwen3-Reranker-0.6B", "bge-m3", "qwen3-reranker-0.6b"])
def test_rag_models_resolve_by_name_with_a_cited_source(name: str) -> None:
    s = serve.resolve_shape(name)
    assert s.pool_task in ("embed", "classify")
    assert re.search(r"github\.com/\S+ \S+config\.json\b.*\b[0-9a-f]{40}\b", s.source)


def test_the_reranker_count_is_the_xlm_roberta_classifier_of_the_source() -> None:
    # roberta.py: RobertaForSequenceClassification = BertModel(RobertaEmbedding) + RobertaClassificationHead
    # (dense h x h, out_proj h x num_labels); RobertaEmbeddingModel (XLMRobertaModel) builds no head at all
    emb, rr = serve.resolve_shape("BAAI/bge-m3"), serve.resolve_shape("BAAI/bge-reranker-v2-m3")
    h = 1024
    assert rr.params_total - emb.params_total == h * h + h + h * 1 + 1
    # a public test pins an XLMRobertaForSequenceClassification of this config at 567,755,777 parameters (code index
    # id 60378559056: hidden 1024, 24 layers, intermediate 4096, vocab 250002, 8194 positions): the same count
    assert rr.params_total == 567_755_777
    assert rr.params_lm_head == 0 and emb.params_lm_head == 0


def test_bert_counts_token_types_and_positions() -> None:
    s = serve.resolve_shape("BAAI/bge-large-en-v1.5")
    assert s.params_embedding == (30522 + 512 + 2) * 1024


def test_encoder_by_name_plans_no_kv_pool() -> None:
    for name in ("BAAI/bge-m3", "BAAI/bge-reranker-v2-m3"):
        res = serve.plan_serve(serve.resolve_shape(name), ServeSpec(engine="vllm", model=name), _spark())
        assert res.kv.none is not None and res.kv.available_gib is None


def test_the_failed_starts_ask_of_17_94_gib() -> None:
    # logs.yaml v23: "Free memory on device (4.04/119.63 GiB) on startup is less than desired GPU memory utilization
    # (0.15, 17.94 GiB)": the same arithmetic on an encoder that now resolves by name (bge-m3 on that machine)
    rec = _record("vllm-guardkit-nomic-embed-v15-gb10-u015-fail")
    m = re.search(r"\((\d+\.\d+)/(\d+\.\d+) GiB\).*\((\d\.\d+), (\d+\.\d+) GiB\)", rec["log"])
    free, total, util, asked = (float(g) for g in m.groups())
    spec = ServeSpec(engine="vllm", model="BAAI/bge-m3", runner="pooling", gpu_memory_utilization=util)
    res = serve.plan_serve(serve.resolve_shape("BAAI/bge-m3"), spec, _spark(total, free))
    assert res.start.requested_gib == asked and res.start.passes is False
    ok = serve.plan_serve(serve.resolve_shape("BAAI/bge-m3"), spec, _spark(total))
    assert ok.start.passes is True and ok.kv.none is not None


def test_qwen3_reranker_weights_from_the_recipe_log() -> None:
    rec = _record("vllm-reranker-recipe-qwen3-reranker-0.6b-h100")
    logged = float(re.search(r"Model loading took (\d+\.\d+) GiB", rec["log"]).group(1))
    spec = ServeSpec(engine="vllm", model=rec["model"], runner="pooling")
    res = serve.plan_serve(serve.resolve_shape(rec["model"]), spec, serve.Machine(source="t", total_gib=79.19,
                                                                                  free_gib=79.19, unified=False))
    assert abs(res.weights_gib - logged) / logged < 0.02
    assert res.kv.none is None  # a decoder pools WITH a KV cache


def test_runner_auto_on_a_pooling_decoder_says_it_cannot_tell() -> None:
    shape = serve.resolve_shape("Qwen/Qwen3-Reranker-0.6B")
    assert shape.st_modules is None
    auto = serve.plan_serve(shape, ServeSpec(engine="vllm", model=shape.name), _spark())
    assert any("modules.json is not known" in n for n in auto.notes)
    pooled = serve.plan_serve(shape, ServeSpec(engine="vllm", model=shape.name, runner="pooling"), _spark())
    assert not any("modules.json" in n for n in pooled.notes)


def test_a_known_modules_json_pools_a_decoder_under_runner_auto() -> None:
    from dataclasses import replace

    shape = replace(serve.resolve_shape("Qwen/Qwen3-Reranker-0.6B"), pool_task="embed", st_modules=True)
    auto = serve.plan_serve(shape, ServeSpec(engine="vllm", model=shape.name), _spark())
    explicit = serve.plan_serve(shape, ServeSpec(engine="vllm", model=shape.name, runner="pooling"), _spark())
    assert not any("is published as" in n for n in auto.notes)  # no "pass --runner pooling" warning
    assert any("--runner auto serves" in n and "modules.json" in n for n in auto.notes)
    # the decision, made once, is the one every step reads: weights and the profile's activations alike (the review
    # of session 13 found the activations following the flags as written)
    assert auto.weights_gib == explicit.weights_gib and auto.overheads == explicit.overheads


_DIMS = st.integers(min_value=1, max_value=4096)


@given(h_heads=st.integers(1, 32), head_dim=st.integers(1, 128), layers=st.integers(1, 48), inter=_DIMS,
       vocab=st.integers(1, 300_000), pos=st.integers(1, 10_000), types=st.integers(0, 4),
       mt=st.sampled_from(["bert", "roberta", "xlm-roberta"]),
       arch=st.sampled_from([[], ["BertModel"], ["XLMRobertaForSequenceClassification"]]))
def test_encoder_reader_counts_every_term(h_heads, head_dim, layers, inter, vocab, pos, types, mt, arch) -> None:
    h = h_heads * head_dim
    cfg = {"model_type": mt, "hidden_size": h, "num_attention_heads": h_heads, "num_hidden_layers": layers,
           "intermediate_size": inter, "vocab_size": vocab, "max_position_embeddings": pos, "type_vocab_size": types,
           "architectures": arch}
    s = shape_from_encoder_config(cfg, id="x", name="x", source="t")
    head = h * h + h + 2 * h + 2 if arch and arch[0].endswith("ForSequenceClassification") else 0
    per_layer = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h
    assert s.params_total == (vocab + pos + types) * h + 2 * h + layers * per_layer + head
    assert s.params_lm_head == 0 and s.attn_layers == layers and serve.vllm_encoder_only(s) is not None
    deeper = shape_from_encoder_config({**cfg, "num_hidden_layers": layers + 1}, id="x", name="x", source="t")
    assert deeper.params_total - s.params_total == per_layer


@given(missing=st.sampled_from(["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                "vocab_size", "max_position_embeddings"]),
       bad=st.one_of(st.none(), st.just(0), st.just(-3), st.just(True), st.text(max_size=3)))
def test_encoder_reader_refuses_a_missing_dimension(missing, bad) -> None:
    cfg = {"model_type": "bert", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
           "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 32, missing: bad}
    with pytest.raises(ServeInputError):
        shape_from_encoder_config(cfg, id="x", name="x", source="t")


def test_a_rag_stack_on_one_spark_counts_each_encoder_server_by_what_it_holds():
    """A chat server beside an embedding and a reranker server (vLLM): the encoders hold their weights, one profile's
    activations and their CUDA graphs (no KV pool: their share only gates the start-up check), and each beside line
    keeps its whole launch line (it was once cut at 60 characters, mid-flag)."""
    from sparkops import api

    emb = "vllm serve BAAI/bge-m3 --gpu-memory-utilization 0.05"
    rr = "vllm serve BAAI/bge-reranker-v2-m3 --gpu-memory-utilization 0.05"
    res = api.serve_plan(workload="vllm serve Qwen/Qwen3-30B-A3B-FP8 --max-model-len 32768 --gpu-memory-utilization 0.6",
                         target="dgx-spark", offline=True, beside=[emb, rr])
    by_name = {b.name: b for b in res.beside}
    assert set(by_name) == {emb, rr}
    for line in (emb, rr):
        alone = api.serve_plan(workload=line, target="dgx-spark", offline=True)
        assert alone.kv.none and alone.kv.available_gib is None
        assert by_name[line].gib == alone.footprint_gib < 0.05 * 121.69  # what it holds, not its share
    assert res.footprint_gib + sum(b.gib for b in res.beside) < res.budget_gib


# --- found by the session-13 review of the serving changes (each failed before its fix) ----------------------------

def _plan(line: str, *beside: str):
    from sparkops import api

    return api.serve_plan(workload=line, target="dgx-spark", offline=True, beside=list(beside))


def test_an_encoder_pooled_by_runner_auto_is_planned_as_with_the_flag():
    """--runner auto pools an encoder-only model; the sampler and runner once read the flags alone, so the same server
    without --runner pooling was charged logits over a 250,002-word vocabulary (1.43 vs 0.06 GiB of activations)."""
    line = "vllm serve BAAI/bge-m3 --max-model-len 8192 --max-num-seqs 1024"
    auto, flagged = _plan(line), _plan(line + " --runner pooling")
    assert auto.overheads == flagged.overheads and auto.footprint_gib == flagged.footprint_gib
    assert any("--runner auto serves BAAI/bge-m3 as a pooling model" in n for n in auto.notes)
    assert not any("sized as for generation" in n for n in auto.notes + flagged.notes)  # no KV cache at all


def test_an_encoder_split_into_pipeline_stages_has_no_stage_kv():
    res = _plan("vllm serve BAAI/bge-m3 -pp 2 --gpu-memory-utilization 0.9")
    assert res.kv.none and res.kv.stages == [] and res.kv.available_gib is None


def test_an_encoder_refuses_a_context_beyond_its_position_table():
    res = _plan("vllm serve BAAI/bge-m3 --max-model-len 32768 --gpu-memory-utilization 0.05")
    assert res.verdict == "does-not-fit" and any("beyond the 8,194 tokens" in n and "learned positions" in n for n in res.notes)
    assert _plan("vllm serve BAAI/bge-m3 --max-model-len 8192 --gpu-memory-utilization 0.05").verdict == "fits"


def test_a_removed_task_flag_names_the_runner_it_stands_for():
    from sparkops.planner import serve
    from sparkops.planner.serve_engines import spec_from_text

    gen = spec_from_text("vllm serve Qwen/Qwen3-8B --task generate --engine-version 0.34.0")
    emb = spec_from_text("vllm serve Qwen/Qwen3-8B --task embed --engine-version 0.34.0")
    assert "use --runner generate" in serve.vllm_pooling_flag_note(gen)
    assert "use --runner pooling / --convert embed" in serve.vllm_pooling_flag_note(emb)


@pytest.mark.parametrize("text,runner", [
    ("serve qwen3-8b with vllm 32k context, no embeddings", None),
    ("serve qwen3-8b with vllm for a RAG chatbot (embeddings come from bge-m3)", None),
    ("serve qwen3-8b with vllm to rerank search results", None),
    ("serve qwen3-8b with vllm as an embedding server", "embed"),
    ("serve qwen3-0.6b with vllm as a reranker", "classify"),
])
def test_free_text_asks_for_a_pooling_server_only_in_so_many_words(text, runner):
    from sparkops.planner.serve_engines import spec_from_text

    spec = spec_from_text(text)
    assert (spec.convert if spec.runner == "pooling" else None) == runner


def test_free_text_names_a_catalog_model_without_a_size():
    from sparkops.planner.serve_engines import spec_from_text

    assert spec_from_text("serve bge-m3 as an embedding server with vllm").model == "bge-m3"
    assert spec_from_text("vllm with BAAI/bge-reranker-v2-m3 as a reranker").model == "BAAI/bge-reranker-v2-m3"
    assert _plan("serve bge-m3 as an embedding server with vllm --gpu-memory-utilization 0.05").kv.none


def test_a_server_beside_says_when_its_own_start_up_check_cannot_pass():
    """bge-m3 at vLLM's default share asks 0.92 x 121.69 GiB free: on a Spark it is refused even before anything else
    starts; at 0.3 it passes only if started before the chat server and the fine-tune."""
    line = "vllm serve Qwen/Qwen3-8B --max-model-len 32768 --gpu-memory-utilization 0.5"
    never = _plan(line, "vllm serve BAAI/bge-m3", "qlora llama-3.1-8b seq 4096")
    assert never.verdict == "tight" and any("even before anything else starts" in n for n in never.notes)
    first = _plan(line, "vllm serve BAAI/bge-m3 --gpu-memory-utilization 0.3", "qlora llama-3.1-8b seq 4096")
    assert first.verdict == "fits" and any("start it first" in n for n in first.notes)
    assert not any("start-up check asks" in n for n in _plan(line, "vllm serve BAAI/bge-m3 --gpu-memory-utilization 0.05").notes)


def test_a_cross_encoder_reranker_is_pooled_as_a_classifier_under_runner_auto():
    # XLMRobertaForSequenceClassification: _SUFFIX_TO_DEFAULTS gives (pooling, classify); the catalog's pool_task says so
    res = _plan("vllm serve BAAI/bge-reranker-v2-m3 --gpu-memory-utilization 0.05")
    assert any(n.startswith("pooling server (classify adapter)") for n in res.notes)
    assert _plan("vllm serve BAAI/bge-m3 --gpu-memory-utilization 0.05").notes[0].startswith("pooling server (embed")
