"""Model architecture input: catalog counts against published totals and transformers, lookup,
config parsing and refusals, local folders, HF cache, and safetensors headers."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from sparkops.core.errors import InputError
from sparkops.planner.architecture import (
    ArchitectureError,
    ModelArch,
    from_config,
    from_path,
    load_catalog,
    read_safetensors_header,
    resolve,
)

CATALOG = load_catalog()
BY_ID = {e.id: e for e in CATALOG}
TF_COUNTS = json.loads((FIXTURES / "planner" / "transformers_param_counts.json").read_text())["counts"]

# A tiny Llama-shaped config used for local-file tests (numbers small enough to build real headers).
TINY = {"model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "vocab_size": 10, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _arch(cid: str) -> ModelArch:
    return resolve(cid)


# --------------------------------------------------------------------------- catalog


def test_catalog_covers_the_issue_list() -> None:
    wanted = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b", "llama-3.2-3b",
              "llama-3.3-70b", "mistral-7b-v0.1", "mistral-7b-v0.3", "mixtral-8x7b", "qwen-7b", "qwen-14b", "qwen3-30b-a3b",
              "qwen3-235b-a22b", "qwen3-next-80b-a3b", "phi-1.5", "phi-2", "phi-3-mini", "phi-3-medium", "phi-3.5-mini", "phi-4",
              "stablelm-2-1.6b", "stablelm-3b-4e1t", "bloom-7b1", "olmo-2-7b", "olmo-2-13b", "gpt-oss-20b", "gpt-oss-120b",
              "glm-4.5-air", "nemotron-nano-9b-v2"]
    wanted += [f"qwen2.5-{s}" for s in ("0.5b", "1.5b", "3b", "7b", "14b", "32b", "72b")]
    wanted += [f"qwen3-{s}" for s in ("0.6b", "1.7b", "4b", "8b", "14b", "32b")]
    wanted += [f"gemma-2-{s}" for s in ("2b", "9b", "27b")] + [f"gemma-3-{s}" for s in ("1b", "4b", "12b", "27b")]
    wanted += [f"deepseek-r1-distill-qwen-{s}" for s in ("1.5b", "7b", "14b", "32b")]
    wanted += ["deepseek-r1-distill-llama-8b", "deepseek-r1-distill-llama-70b"]
    assert sorted(set(wanted) - set(BY_ID)) == []


def test_catalog_entries_are_well_formed() -> None:
    ids = [e.id for e in CATALOG]
    assert len(ids) == len(set(ids))
    for e in CATALOG:
        assert e.id == e.id.lower() and " " not in e.id
        assert e.hf_ids and all("/" in h for h in e.hf_ids)
        assert isinstance(e.config.get("model_type"), str)
        assert e.params_b > 0


def test_gemma3_entries_store_the_text_config() -> None:
    for cid in ("gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b"):
        assert BY_ID[cid].config["model_type"] == "gemma3_text"


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: e.id)
def test_counted_total_is_within_3_percent_of_published(entry: Any) -> None:
    # Every entry is held to 3%, the approximate (hybrid) ones too: their notes are about activations,
    # their parameter count per block is exact. MoE/MTP/vision extras are excluded on both sides.
    arch = from_config(entry.config, id=entry.id)
    assert arch.params_total == pytest.approx(entry.params_b * 1e9, rel=0.03)


@pytest.mark.parametrize("cid", sorted(TF_COUNTS))
def test_counted_total_equals_transformers_module_count(cid: str) -> None:
    # Recorded from transformers itself (fixture header says how); Qwen v1 needs remote code and is absent.
    assert from_config(BY_ID[cid].config).params_total == TF_COUNTS[cid]


@pytest.mark.parametrize(("cid", "total"), [("llama-3.1-8b", 8_030_261_248), ("llama-2-7b", 6_738_415_616),
                                            ("qwen2.5-0.5b", 494_032_768), ("mixtral-8x7b", 46_702_792_704),
                                            ("qwen-7b", 7_721_324_544), ("bloom-7b1", 7_069_016_064), ("phi-2", 2_779_683_840)])
def test_exact_counts(cid: str, total: int) -> None:
    assert _arch(cid).params_total == total


def test_llama_3_1_8b_breakdown() -> None:
    a = _arch("llama-3.1-8b")
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim, a.q_dim) == (4096, 32, 32, 8, 128, 4096)
    assert a.params_embedding == a.params_lm_head == 128256 * 4096
    assert a.params_linear == 32 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336)
    assert a.params_active == a.params_total and a.experts == 0
    assert a.largest_linear == 4096 * 14336
    assert a.linear_shapes["k_proj"] == (4096, 1024) and a.linear_shapes["down_proj"] == (14336, 4096)
    assert a.mlp_gated and a.norm == "rms" and a.source == "catalog" and a.stored_dtype == "bfloat16"


def test_tied_embeddings_have_no_lm_head() -> None:
    a = _arch("qwen2.5-0.5b")
    assert a.tied_embeddings and a.params_lm_head == 0 and a.params_embedding == 151936 * 896


def test_mixtral_moe_fields() -> None:
    a = _arch("mixtral-8x7b")
    assert (a.experts, a.experts_per_token, a.expert_intermediate, a.moe_layers, a.intermediate) == (8, 2, 14336, 32, 0)
    assert a.params_active == pytest.approx(12.9e9, rel=0.01)  # Mistral: 12.9B active
    assert a.linear_shapes["experts.gate_proj"] == (4096, 14336) and a.linear_shapes["gate"] == (4096, 8)
    assert a.largest_linear == 4096 * 14336  # per expert, not the 8 of them together


def test_moe_active_counts_match_model_cards() -> None:
    assert _arch("qwen3-30b-a3b").params_active == pytest.approx(3.3e9, rel=0.03)
    assert _arch("qwen3-235b-a22b").params_active == pytest.approx(22e9, rel=0.03)
    assert _arch("glm-4.5-air").params_active == pytest.approx(12e9, rel=0.15)  # card rounds 12B, excludes embeddings
    # the gpt-oss card counts the unembedding as active but not the embedding lookup: 5.1B and 3.6B
    for cid, active in (("gpt-oss-120b", 5.1e9), ("gpt-oss-20b", 3.6e9)):
        a = _arch(cid)
        assert a.params_active - a.params_embedding == pytest.approx(active, rel=0.03)


def test_glm_shared_expert_and_dense_first_layer() -> None:
    a = _arch("glm-4.5-air")
    assert (a.moe_layers, a.layers, a.intermediate) == (45, 46, 10944)
    assert (a.shared_experts, a.shared_intermediate) == (1, 1408)
    assert a.linear_shapes["shared_experts.up_proj"] == (4096, 1408)


def test_qwen3_next_is_hybrid_and_noted() -> None:
    a = _arch("qwen3-next-80b-a3b")
    assert a.linear_attention_layers == 36 and a.layers == 48 and a.shared_intermediate == 512
    assert a.approximate and "DeltaNet" in a.approximate[0]


def test_nemotron_h_is_counted_per_block_and_marked_approximate() -> None:
    a = _arch("nemotron-nano-9b-v2")
    assert a.linear_attention_layers == 27 and not a.mlp_gated
    assert any("hybrid" in n for n in a.approximate)


def test_sliding_window_layers_per_family() -> None:
    assert (_arch("mistral-7b-v0.1").sliding_window, _arch("mistral-7b-v0.1").sliding_layers) == (4096, 32)
    assert _arch("mistral-7b-v0.3").sliding_window is None
    assert _arch("gemma-2-9b").sliding_layers == 21  # alternate layers of 42
    assert _arch("gemma-3-4b").sliding_layers == 34 - 34 // 6  # 5 local : 1 global
    assert (_arch("gpt-oss-20b").sliding_window, _arch("gpt-oss-20b").sliding_layers) == (128, 12)
    assert _arch("qwen2.5-7b").sliding_window is None  # use_sliding_window false


def test_q_width_differs_from_hidden_for_gemma_and_qwen3_32b() -> None:
    g = _arch("gemma-2-9b")
    assert (g.hidden, g.q_dim, g.head_dim) == (3584, 4096, 256)
    assert _arch("qwen3-32b").q_dim == 8192


def test_non_gated_families() -> None:
    for cid in ("phi-2", "bloom-7b1", "nemotron-mini-4b"):
        assert not _arch(cid).mlp_gated
    assert _arch("phi-2").linear_shapes["fc1"] == (2560, 10240)
    assert _arch("bloom-7b1").linear_shapes["query_key_value"] == (4096, 12288)
    assert _arch("stablelm-2-1.6b").norm == "layer" and _arch("stablelm-2-1.6b").mlp_gated


def test_qwen_v1_intermediate_is_half_the_config_value() -> None:
    a = _arch("qwen-7b")
    assert a.intermediate == 11008 and a.linear_shapes["w1"] == (4096, 11008) and a.linear_shapes["c_attn"] == (4096, 12288)


def test_phi3_fused_projections_count_like_separate_ones() -> None:
    phi3 = dict(BY_ID["phi-3-medium"].config)
    as_llama = {**phi3, "model_type": "llama"}
    a, b = from_config(phi3), from_config(as_llama)
    assert (a.params_total, a.params_linear) == (b.params_total, b.params_linear)
    assert a.linear_shapes["qkv_proj"] == (5120, 5120 + 2 * 1280) and a.linear_shapes["gate_up_proj"] == (5120, 2 * 17920)


# --------------------------------------------------------------------------- resolve


@pytest.mark.parametrize(("name", "cid"), [
    ("llama-3.1-8b", "llama-3.1-8b"), ("LLAMA-3.1-8B", "llama-3.1-8b"), ("llama3.1-8b", "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("meta-llama/meta-llama-3.1-8b-instruct", "llama-3.1-8b"),
    ("Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"), ("llama-3.1-70b", "llama-3.1-70b"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("unsloth/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("google/gemma-3-27b-it", "gemma-3-27b"), ("gemma_2_9b", "gemma-2-9b"), ("mixtral", "mixtral-8x7b"),
    ("  Phi-4 ", "phi-4"), ("microsoft/phi-1_5", "phi-1.5"),
])
def test_resolve_names(name: str, cid: str) -> None:
    assert resolve(name, env={}).id == cid


def test_folded_names_do_not_collide_between_entries() -> None:
    from sparkops.planner.architecture import _key

    owner: dict[str, str] = {}
    for e in CATALOG:
        for n in [e.id, *e.aliases, *e.hf_ids]:
            assert owner.setdefault(_key(n), e.id) == e.id, f"{n} folds onto {owner[_key(n)]}"


def test_unknown_model_suggests_close_matches() -> None:
    with pytest.raises(ArchitectureError) as exc:
        resolve("llama-3.1-7b", env={})
    msg = str(exc.value)
    assert "unknown model 'llama-3.1-7b'" in msg and "llama-3.1-8b" in msg
    assert isinstance(exc.value, InputError)


def test_unknown_model_with_nothing_close() -> None:
    with pytest.raises(ArchitectureError, match="unknown model") as exc:
        resolve("zzzzqqqq", env={})
    assert "close matches" not in str(exc.value)


def test_refused_model_says_why() -> None:
    with pytest.raises(ArchitectureError, match="block_configs"):
        resolve("nvidia/Llama-3_3-Nemotron-Super-49B-v1", env={})


def test_empty_name_is_refused() -> None:
    with pytest.raises(ArchitectureError):
        resolve("  ", env={})


# --------------------------------------------------------------------------- from_config refusals


@pytest.mark.parametrize(("change", "fragment"), [
    ({"hidden_size": None}, "hidden_size"),
    ({"model_type": "bert", "type_vocab_size": 2}, "type_vocab_size"),
    ({"model_type": "new_decoder", "kv_lora_rank": 512}, "kv_lora_rank"),
    ({"model_type": "new_decoder", "architectures": ["NewModelForSequenceClassification"]}, "architectures"),
    ({"model_type": "new_decoder", "layer_types": ["mamba", "full_attention"], "num_hidden_layers": 2}, "mamba"),
    ({"model_type": "new_decoder", "intermediate_size": None}, "intermediate_size"),
    ({"model_type": "new_decoder", "num_experts": 8}, "num_experts_per_tok"),
    ({"model_type": None}, "model_type"),
    ({"num_hidden_layers": 0}, "positive"),
    ({"intermediate_size": -5}, "positive"),
    ({"vocab_size": 1.5}, "whole number"),
    ({"num_attention_heads": True}, "whole number"),
    ({"num_key_value_heads": 3}, "multiple"),
    ({"vocab_size": 10**12}, "beyond any real model"),
    ({"model_type": "nemotron-nas"}, "refused"),
    ({"layer_types": ["full_attention"]}, "layer_types"),
])
def test_from_config_refusals(change: dict[str, Any], fragment: str) -> None:
    cfg = {**TINY, **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(ArchitectureError, match=fragment):
        from_config(cfg)


def test_from_config_rejects_non_mapping() -> None:
    with pytest.raises(ArchitectureError):
        from_config(["not", "a", "dict"])  # type: ignore[arg-type]


def test_moe_config_missing_expert_count_is_named() -> None:
    cfg = dict(BY_ID["qwen3-30b-a3b"].config)
    del cfg["num_experts"]
    with pytest.raises(ArchitectureError, match="num_experts"):
        from_config(cfg)


@pytest.mark.parametrize("cid", ["qwen3-30b-a3b", "qwen3-235b-a22b"])
def test_a_transformers_5_moe_config_names_its_experts_num_local_experts(cid: str) -> None:
    # transformers 5's Qwen2/3-MoE configs map num_experts to num_local_experts and save that key (the H200 run of
    # benchmarks/hub_replay.py met one written by save_pretrained, which the planner refused before)
    cfg = dict(BY_ID[cid].config)
    cfg["num_local_experts"] = cfg.pop("num_experts")
    a, b = from_config(cfg), from_config(BY_ID[cid].config)
    assert (a.experts, a.params_total, a.params_active) == (b.experts, b.params_total, b.params_active)


def test_multimodal_wrapper_uses_text_config() -> None:
    text = {k: v for k, v in BY_ID["gemma-3-4b"].config.items() if k != "model_type"}
    wrapped = {"model_type": "gemma3", "text_config": text, "vision_config": {"hidden_size": 1152}}
    a = from_config(wrapped)
    assert a.family == "gemma3_text" and a.params_total == from_config(BY_ID["gemma-3-4b"].config).params_total
    assert any("vision" in n for n in a.approximate)


@pytest.mark.parametrize(("qc", "expected"), [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bnb-4bit"),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bnb-8bit"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
    ({"quant_method": "fp8"}, "fp8"),
    ({"quant_method": "gptq", "bits": 4}, "gptq"),
    ({"quant_method": "awq"}, "awq"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
])
def test_prequantized_from_quantization_config(qc: dict[str, Any], expected: str) -> None:
    assert from_config({**TINY, "quantization_config": qc}).prequantized == expected
    assert from_config(TINY).prequantized is None


_INTS = st.one_of(st.none(), st.integers(-3, 5000), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3))


@settings(max_examples=200, deadline=None)
@given(cfg=st.fixed_dictionaries({"model_type": st.sampled_from(["llama", "qwen2", "gemma2", "phi", "bloom", "qwen", "mixtral",
                                                                  "qwen3_next", "nemotron_h", "gpt_oss", "glm4_moe", "x"])},
                                 optional={k: _INTS for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                              "num_attention_heads", "num_key_value_heads", "vocab_size",
                                                              "head_dim", "num_local_experts", "num_experts_per_tok",
                                                              "moe_intermediate_size", "sliding_window", "n_routed_experts")}))
def test_from_config_never_raises_anything_else(cfg: dict[str, Any]) -> None:
    try:
        a = from_config(cfg)
    except ArchitectureError:
        return
    assert a.params_total > 0 and a.params_active <= a.params_total


# --------------------------------------------------------------------------- safetensors and local paths


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]], sizes: dict[str, int]) -> int:
    """Write a valid safetensors file (zero data) by hand; returns the data size in bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"\0" * off)
    return off


def _tiny_tensors() -> dict[str, tuple[str, tuple[int, ...]]]:
    h, i, v, kvd = 8, 16, 10, 4
    t: dict[str, tuple[str, tuple[int, ...]]] = {"model.embed_tokens.weight": ("BF16", (v, h)), "lm_head.weight": ("BF16", (v, h)),
                                                 "model.norm.weight": ("BF16", (h,))}
    for layer in range(2):
        p = f"model.layers.{layer}."
        t |= {p + "self_attn.q_proj.weight": ("BF16", (h, h)), p + "self_attn.k_proj.weight": ("BF16", (kvd, h)),
              p + "self_attn.v_proj.weight": ("BF16", (kvd, h)), p + "self_attn.o_proj.weight": ("BF16", (h, h)),
              p + "mlp.gate_proj.weight": ("BF16", (i, h)), p + "mlp.up_proj.weight": ("BF16", (i, h)),
              p + "mlp.down_proj.weight": ("BF16", (h, i)), p + "input_layernorm.weight": ("BF16", (h,)),
              p + "post_attention_layernorm.weight": ("BF16", (h,))}
    return t


def _model_folder(root: Path, split: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(TINY))
    tensors = _tiny_tensors()
    if not split:
        _write_safetensors(root / "model.safetensors", tensors, {"BF16": 2})
        return root
    names = list(tensors)
    half = len(names) // 2
    parts = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for fname, keys in parts.items():
        _write_safetensors(root / fname, {k: tensors[k] for k in keys}, {"BF16": 2})
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {k: f for f, ks in parts.items() for k in ks}}))
    return root


def test_read_header_of_a_hand_built_file(tmp_path: Path) -> None:
    f = tmp_path / "x.safetensors"
    _write_safetensors(f, {"a": ("F32", (2, 3)), "b": ("BF16", (4,))}, {"F32": 4, "BF16": 2})
    assert read_safetensors_header(f) == {"a": ("F32", (2, 3)), "b": ("BF16", (4,))}


def test_from_path_on_a_config_file(tmp_path: Path) -> None:
    f = tmp_path / "config.json"
    f.write_text(json.dumps(BY_ID["llama-3.1-8b"].config))
    a = from_path(str(f), env={})
    assert a.params_total == 8_030_261_248 and a.source == str(f) and a.stored_bytes is None


@pytest.mark.parametrize("split", [False, True])
def test_from_path_on_a_folder_reads_safetensors_headers(tmp_path: Path, split: bool) -> None:
    folder = _model_folder(tmp_path / "tiny", split=split)
    a = from_path(str(folder), env={})
    expected_numel = from_config(TINY).params_total
    assert a.params_total == expected_numel
    assert a.stored_bytes == 2 * expected_numel
    assert a.id == "tiny"


def test_folder_with_quantized_weights_keeps_structure_count(tmp_path: Path) -> None:
    folder = tmp_path / "q"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}))
    _write_safetensors(folder / "model.safetensors", {"packed": ("U8", (100,))}, {"U8": 1})
    a = from_path(str(folder), env={})
    assert a.prequantized == "bnb-4bit" and a.stored_bytes == 100 and a.params_total == from_config(TINY).params_total


def test_folder_whose_headers_disagree_keeps_structure_and_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    _write_safetensors(folder / "model.safetensors", {"only": ("BF16", (3,))}, {"BF16": 2})
    a = from_path(str(folder), env={})
    assert a.params_total == from_config(TINY).params_total and a.stored_bytes == 6
    assert any("structure count is kept" in n for n in a.approximate)


def test_index_naming_a_missing_shard_is_an_error(tmp_path: Path) -> None:
    folder = _model_folder(tmp_path / "m", split=True)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ArchitectureError, match="not in"):
        from_path(str(folder), env={})


def test_folder_without_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ArchitectureError, match="no config.json"):
        from_path(str(tmp_path), env={})


def test_bad_json_config_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "config.json"
    f.write_text("{not json")
    with pytest.raises(ArchitectureError, match="not valid JSON"):
        from_path(str(f), env={})


def _fake_cache(hub: Path, hf_id: str, revs: list[str], main: str | None) -> None:
    repo = hub / ("models--" + hf_id.replace("/", "--"))
    for n, rev in enumerate(revs):
        snap = repo / "snapshots" / rev
        _model_folder(snap)
        cfg = {**TINY, "num_hidden_layers": 2 + n}  # distinguishable snapshots
        (snap / "config.json").write_text(json.dumps(cfg))
        (snap / "model.safetensors").unlink()
    if main:
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(main + "\n")


def test_from_path_finds_an_hf_id_in_the_cache(tmp_path: Path) -> None:
    _fake_cache(tmp_path / "hub", "acme/tiny-llama", ["aaa", "bbb"], main="aaa")
    a = from_path("acme/tiny-llama", env={"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert a.source == "hf-cache:acme/tiny-llama" and a.layers == 2  # refs/main wins over the newer snapshot


def test_cache_via_hf_home_and_newest_snapshot(tmp_path: Path) -> None:
    import os
    import time

    _fake_cache(tmp_path / "home" / "hub", "acme/tiny", ["old", "new"], main=None)
    old = tmp_path / "home" / "hub" / "models--acme--tiny" / "snapshots" / "old"
    past = time.time() - 3600
    os.utime(old, (past, past))
    a = from_path("acme/tiny", env={"HF_HOME": str(tmp_path / "home")})
    assert a.layers == 3
    # resolve() falls back to the cache for an HF id that is not in the catalog
    assert resolve("acme/tiny", env={"HF_HOME": str(tmp_path / "home")}).layers == 3


def test_cache_via_home_default(tmp_path: Path) -> None:
    _fake_cache(tmp_path / ".cache" / "huggingface" / "hub", "acme/tiny", ["r1"], main="r1")
    assert from_path("acme/tiny", env={"HOME": str(tmp_path)}).source == "hf-cache:acme/tiny"


def test_unknown_path_or_id_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ArchitectureError, match="local cache"):
        from_path("acme/absent", env={"HF_HUB_CACHE": str(tmp_path)})


@pytest.mark.parametrize(("content", "fragment"), [
    (b"", "shorter"),
    (b"\x01\x02", "shorter"),
    (struct.pack("<Q", 2**40), "100 MB"),
    (struct.pack("<Q", 50) + b"{}", "truncated"),
    (struct.pack("<Q", 4) + b"nope", "not JSON"),
    (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    (struct.pack("<Q", 11) + b'{"a": 1}   ', "dtype/shape"),
    (struct.pack("<Q", 34) + b'{"a":{"dtype":"F32","shape":[-1]}}', "invalid shape"),
    (struct.pack("<Q", 36) + b'{"a":{"dtype":"F32","shape":[true]}}', "invalid shape"),
])
def test_bad_safetensors_headers(tmp_path: Path, content: bytes, fragment: str) -> None:
    f = tmp_path / "bad.safetensors"
    f.write_bytes(content)
    with pytest.raises(ArchitectureError, match=fragment):
        read_safetensors_header(f)


def test_unreadable_safetensors_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ArchitectureError, match="cannot read"):
        read_safetensors_header(tmp_path / "absent.safetensors")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300), prefix=st.booleans())
def test_arbitrary_bytes_only_raise_architecture_error(tmp_path: Path, data: bytes, prefix: bool) -> None:
    f = tmp_path / "fuzz.safetensors"
    f.write_bytes((struct.pack("<Q", len(data)) if prefix else b"") + data)
    try:
        out = read_safetensors_header(f)
    except ArchitectureError:
        return
    assert isinstance(out, dict)


# --------------------------------------------------------------------------- unknown model types: a generic decoder

MIMO_LIKE = {"model_type": "mimo", "architectures": ["MiMoForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
             "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 151680,
             "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "rms_norm_eps": 1e-5}


def test_unknown_decoder_type_is_planned_with_its_assumptions_named() -> None:
    arch = from_config(MIMO_LIKE)
    text = " ".join(arch.approximate)
    assert "generic decoder" in text and "gated" in text and "num_nextn_predict_layers" in text
    # 36 Llama-style layers of 4096 / GQA 8 / 11008, untied 151680 vocabulary
    layer = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 11008 + 2 * 4096
    assert arch.params_total == 36 * layer + 2 * 151680 * 4096 + 4096


def test_the_three_types_once_refused_now_plan() -> None:
    seed = {"model_type": "seed_oss", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 100,
            "tie_word_embeddings": False}
    olmo3 = {**seed, "model_type": "olmo3", "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"]}
    for cfg in (seed, olmo3, {**seed, "model_type": "mimo"}):
        assert from_config(cfg).params_total > 0
    # Seed-OSS: q/k/v biases by default, no o_proj bias; OLMo 3: full-width q/k norms and one sliding layer
    assert from_config(seed).params_total - from_config({**seed, "model_type": "llama"}).params_total == 2 * (128 + 2 * 64)
    assert from_config(olmo3).sliding_layers == 1


def test_unknown_moe_decoder_uses_its_expert_fields() -> None:
    cfg = {**TINY, "model_type": "new_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 6}
    arch = from_config(cfg)
    assert (arch.experts, arch.experts_per_token, arch.expert_intermediate, arch.moe_layers) == (4, 2, 6, 2)
