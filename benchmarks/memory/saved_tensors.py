#!/usr/bin/env python3
"""Count the bytes autograd keeps for backward in one decoder layer, exactly, on the CPU.

    python benchmarks/memory/saved_tensors.py [--out tests/fixtures/planner/saved_tensors_per_layer.json]

Needs torch, transformers and peft (CPU builds are enough). Each tiny model is built twice, with 1 and
with 2 decoder layers; the difference of the bytes kept (``saved_tensors_hooks``, storages
deduplicated, parameters and buffers excluded) is what one layer keeps. The planner's per-layer
activation formula is tested against these numbers (tests/planner/test_saved_tensors.py): a structural
check of the formula at small scale, independent of any GPU measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BATCH, SEQ = 2, 64
COMMON = dict(hidden_size=256, num_attention_heads=4, vocab_size=1000, max_position_embeddings=512)
CASES: dict[str, dict] = {
    "llama": dict(COMMON, intermediate_size=688, num_key_value_heads=2, hidden_act="silu", tie_word_embeddings=False),
    "qwen2": dict(COMMON, intermediate_size=688, num_key_value_heads=2, hidden_act="silu", tie_word_embeddings=False),
    "qwen3": dict(COMMON, intermediate_size=688, num_key_value_heads=2, head_dim=64, hidden_act="silu",
                  tie_word_embeddings=False),
    "gemma3_text": dict(COMMON, intermediate_size=688, num_key_value_heads=1, head_dim=64,
                        hidden_activation="gelu_pytorch_tanh", sliding_window=512, query_pre_attn_scalar=64),
    "phi": dict(COMMON, intermediate_size=1024, num_key_value_heads=4, partial_rotary_factor=0.5, hidden_act="gelu_new",
                tie_word_embeddings=False),
    # model types the planner has no family for (sized as a generic decoder), and OLMo 3
    "smollm3": dict(COMMON, intermediate_size=688, num_key_value_heads=2, hidden_act="silu", tie_word_embeddings=False,
                    pad_token_id=0),
    "ernie4_5": dict(COMMON, intermediate_size=688, num_key_value_heads=2, head_dim=64, hidden_act="silu", tie_word_embeddings=False,
                     pad_token_id=0),
    "olmo3": dict(COMMON, intermediate_size=688, num_key_value_heads=2, hidden_act="silu", tie_word_embeddings=False,
                  sliding_window=512, pad_token_id=0),
}


# The Trainer path (bf16=True => the forward under autocast), for families whose layer uses no op that CUDA's
# autocast policy treats differently from the CPU's (linear is lower-precision on both; SiLU, HF's RMSNorm
# with its explicit fp32 upcast are unaffected): "trainer" = bf16 model, fp32 LoRA adapters with dropout 0.1;
# "fp32-autocast" = full fine-tuning of fp32 master weights.
VARIANTS = {"trainer": ("llama", "qwen3", "smollm3"), "fp32-autocast": ("llama", "qwen3")}


def kept_bytes(model_type: str, cfg: dict, layers: int, lora: bool, variant: str = "plain") -> int:
    import contextlib

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    conf = AutoConfig.for_model(model_type, **cfg, num_hidden_layers=layers)
    conf._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(conf, dtype=torch.float32 if variant == "fp32-autocast" else torch.bfloat16)
    if lora:
        model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear",
                                                 lora_dropout=0.1 if variant == "trainer" else 0.0))
    model.train()
    owned = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    kept: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in owned:
            kept[ptr] = max(kept.get(ptr, 0), t.untyped_storage().nbytes())
        return t

    ids = torch.randint(0, conf.vocab_size, (BATCH, SEQ))
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if variant != "plain" else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
        model(input_ids=ids, labels=ids)
    return sum(kept.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/planner/saved_tensors_per_layer.json"))
    ap.add_argument("--only", help="comma-separated model types; their rows replace those in --out, the rest are kept")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    import peft
    import torch
    import transformers

    rows = []
    if only is not None and args.out.exists():
        rows = [r for r in json.loads(args.out.read_text())["rows"]
                if r["model_type"] not in only and r.get("variant", "plain") not in only]
    for mt, cfg in CASES.items():
        if only is not None and mt not in only:
            continue
        for method in ("lora", "full"):
            one, two = (kept_bytes(mt, cfg, n, method == "lora") for n in (1, 2))
            rows.append({"model_type": mt, "config": cfg, "method": method, "batch": BATCH, "seq_len": SEQ,
                         "lora": {"r": 8, "targets": "all-linear", "dropout": 0.0} if method == "lora" else None,
                         "per_layer_bytes": two - one})
            print(f"{mt:12s} {method:4s} {two - one:>9d} B/layer", file=sys.stderr)
    for variant, types in VARIANTS.items():
        if only is not None and variant not in only:
            continue
        method = "lora" if variant == "trainer" else "full"
        for mt in types:
            cfg = CASES[mt]
            one, two = (kept_bytes(mt, cfg, n, method == "lora", variant) for n in (1, 2))
            rows.append({"model_type": mt, "config": cfg, "method": method, "variant": variant, "batch": BATCH,
                         "seq_len": SEQ, "dtype": "fp32" if variant == "fp32-autocast" else "bf16", "autocast": True,
                         "lora": {"r": 8, "targets": "all-linear", "dropout": 0.1} if method == "lora" else None,
                         "per_layer_bytes": two - one})
            print(f"{mt:12s} {variant:13s} {two - one:>9d} B/layer", file=sys.stderr)
    doc = {"measured_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "peft": peft.__version__, "device": "cpu", "dtype": "bfloat16", "attention": "sdpa"},
           "rows": rows}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
