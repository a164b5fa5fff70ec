"""The run description: method, dtypes, optimizer, batch and sequence, and framework defaults.

A framework preset (HF Trainer + PEFT, TRL, Unsloth, torchtune, axolotl, LitGPT) sets the
defaults the way that framework really behaves; anything the user states explicitly wins. The
knowledge (optimizers, loss implementations, presets, coefficients) is ``knowledge/planner.yaml``.
"""

from __future__ import annotations

import re
from datetime import date
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkops.core.errors import InputError

Method = Literal["full", "lora", "qlora"]
Loop = Literal["plain", "trainer"]
Attention = Literal["sdpa", "flash", "eager"]
DType = Literal["bf16", "fp16", "fp32"]


class PlanInputError(InputError):
    """A run description the planner cannot honour (exit 3 with the reason)."""


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Optimizer(_M):
    states: int
    state_bytes: float | None  # None: each state takes the parameter's dtype (torch optimizers)
    step_temp_params: float
    torch_counted: bool


class Framework(_M):
    description: str
    optimizer: str
    loss: str
    attention: Attention
    grad_checkpointing: bool
    lora_dropout: float
    adapter_dtype: DType
    kbit_upcast: bool
    fp32_norm: bool
    qlora_grad_checkpointing: bool | None = None  # QLoRA's own default (PEFT's kbit preparation turns it on)
    loop: Loop = "plain"  # trainer: transformers.Trainer underneath (bf16=True runs the forward under autocast)


class BackwardGrads(_M):
    mlp_widths: float
    hidden_widths: float


class Coefficients(_M):
    frozen_linear_saves_input: bool
    backward_layer_grads: BackwardGrads
    allocator_slack_fraction: float
    allocator_slack_expandable: float
    allocator_slack_min_gb: float
    cuda_context_gb: float
    host_process_gb: float
    load_inflight_tensors: int
    activation_extra_saved: dict[str, int] = Field(default_factory=dict)
    autocast_activation_extra_bytes: float = 4.0


class Anchor(_M):
    params_b: float
    method: str
    observed: str
    note: str


class PlannerKnowledge(_M):
    version: int
    last_verified: date
    storage_bytes: dict[str, float]
    optimizers: dict[str, Optimizer]
    optimizer_aliases: dict[str, str]
    loss_bytes_per_logit: dict[str, float]
    frameworks: dict[str, Framework]
    framework_aliases: dict[str, str]
    coefficients: Coefficients
    anchors: list[Anchor]

    def optimizer(self, name: str) -> tuple[str, Optimizer]:
        key = name.strip().lower().replace("-", "_")
        key = self.optimizer_aliases.get(key, key)
        if key not in self.optimizers:
            raise PlanInputError(f"unknown optimizer {name!r}; known: {', '.join(sorted(self.optimizers))}")
        return key, self.optimizers[key]

    def framework(self, name: str) -> tuple[str, Framework]:
        key = name.strip().lower().replace("_", "-")
        key = self.framework_aliases.get(key, key)
        if key not in self.frameworks:
            raise PlanInputError(f"unknown framework {name!r}; known: {', '.join(sorted(self.frameworks))}")
        return key, self.frameworks[key]


@lru_cache(maxsize=1)
def planner_knowledge() -> PlannerKnowledge:
    from sparkops.knowledge import load_file

    return load_file("planner.yaml", PlannerKnowledge)  # a packaging bug fails loudly, naming file and key


class LoraSpec(_M):
    r: int = 16
    alpha: int | None = None
    targets: list[str] = Field(default_factory=lambda: ["all-linear"])
    dropout: float = 0.0
    dtype: DType = "fp32"  # adapter parameter dtype (PEFT autocasts bf16 adapters to fp32)


class RunSpec(_M):
    """Everything the estimate depends on besides the model's shapes. Resolved: no None left."""

    method: Method
    framework: str
    param_dtype: DType  # weights of the (unquantized) model as loaded; fp32 = fp32 master + autocast
    compute_dtype: DType
    optimizer: str
    batch: int
    seq_len: int
    grad_checkpointing: bool
    attention: Attention
    loss: str
    lora: LoraSpec | None
    quant: str | None  # base storage for qlora: nf4-dq (default), nf4
    kbit_upcast: bool
    fp32_norm: bool
    expandable_segments: bool = False
    # bitsandbytes before its "(None, B)" change kept each 4-bit matmul's input for backward
    # (ctx.tensors = (A, B)); current releases keep only the packed weight
    bnb_keeps_input: bool = False
    # plain: a hand-written loop (no autocast unless the weights are fp32); trainer: transformers.Trainer
    # (TRL's SFTTrainer, axolotl, LLaMA-Factory are Trainer underneath), bf16=True => autocast always
    loop: Loop = "plain"
    autocast: bool = False  # forward under torch.autocast(bfloat16)
    grad_accum: int = 1  # gradient accumulation steps: gradients stay alive through the next micro-batches
    assumed: list[str] = Field(default_factory=list)  # choices the planner made that the user did not state

    @property
    def trains_base(self) -> bool:
        return self.method == "full"


ALL_LINEAR = ("all-linear", "all", "all_linear", "all-linear-layers")


def build_run(*, method: str | None, framework: str | None = None, dtype: str | None = None,
              optimizer: str | None = None, batch: int | None = None, seq_len: int | None = None,
              grad_checkpointing: bool | None = None, attention: str | None = None, loss: str | None = None,
              lora_r: int | None = None, lora_targets: list[str] | None = None, lora_dropout: float | None = None,
              quant: str | None = None, expandable_segments: bool = False, bnb_keeps_input: bool = False,
              loop: str | None = None, grad_accum: int | None = None) -> RunSpec:
    """Resolve a run from explicit choices on top of the framework's defaults; validate numbers."""
    kb = planner_knowledge()
    fw_key, fw = kb.framework(framework or "hf")
    m = (method or "lora").lower()
    if m not in ("full", "lora", "qlora"):
        raise PlanInputError(f"method must be full, lora or qlora (got {method!r}); inference is not planned here")
    _positive("batch size", batch)
    _positive("sequence length", seq_len)
    _positive("gradient accumulation", grad_accum)
    if lora_r is not None and not 1 <= lora_r <= 65536:
        raise PlanInputError(f"LoRA rank must be between 1 and 65536 (got {lora_r})")
    if lora_dropout is not None and not 0.0 <= lora_dropout < 1.0:
        raise PlanInputError(f"LoRA dropout must be in [0, 1) (got {lora_dropout})")
    b, s = batch or 1, seq_len or 2048
    if b > 4096 or s > 10_000_000 or b * s > 50_000_000:
        raise PlanInputError(f"batch {b} x sequence {s} is not a plausible single-device run")
    opt_key, _ = kb.optimizer(optimizer or fw.optimizer)
    loss_key = (loss or fw.loss).lower().replace("-", "_")
    if loss_key not in kb.loss_bytes_per_logit:
        raise PlanInputError(f"unknown loss implementation {loss!r}; known: {', '.join(kb.loss_bytes_per_logit)}")
    att = (attention or fw.attention).lower().replace("flash_attention_2", "flash").replace("fa2", "flash")
    if att not in ("sdpa", "flash", "eager"):
        raise PlanInputError(f"attention must be sdpa, flash or eager (got {attention!r})")
    pdt = _dtype(dtype) if dtype else "bf16"
    compute = "fp16" if pdt == "fp16" else "bf16"
    lora = None
    if m in ("lora", "qlora"):
        lora = LoraSpec(r=lora_r or 16, targets=lora_targets or ["all-linear"],
                        dropout=fw.lora_dropout if lora_dropout is None else lora_dropout,
                        dtype=fw.adapter_dtype if pdt != "fp32" else "fp32")
    q = None
    if m == "qlora":
        q = (quant or "nf4-dq").lower()
        if q not in kb.storage_bytes or kb.storage_bytes[q] >= 1.0:
            raise PlanInputError(f"QLoRA base storage must be a 4-bit format (got {quant!r})")
    assumed: list[str] = []
    lp = (loop or fw.loop).lower()
    if lp not in ("plain", "trainer"):
        raise PlanInputError(f"loop must be plain or trainer (got {loop!r})")
    if loop is None and fw.loop == "trainer":
        assumed.append(f"{fw_key}: assumed the transformers Trainer path (bf16=True: the forward runs under autocast); "
                       "give --loop plain for a hand-written training loop")
    return RunSpec(method=m, framework=fw_key, param_dtype=pdt, compute_dtype=compute, optimizer=opt_key,  # type: ignore[arg-type]
                   batch=b, seq_len=s,
                   grad_checkpointing=_gc_default(fw, m) if grad_checkpointing is None else grad_checkpointing,
                   attention=att, loss=loss_key, lora=lora, quant=q,  # type: ignore[arg-type]
                   kbit_upcast=fw.kbit_upcast, fp32_norm=fw.fp32_norm, expandable_segments=expandable_segments,
                   bnb_keeps_input=bnb_keeps_input and m == "qlora", loop=lp,  # type: ignore[arg-type]
                   autocast=lp == "trainer" or pdt == "fp32", grad_accum=grad_accum or 1, assumed=assumed)


def _gc_default(fw: Framework, method: str) -> bool:
    if method == "qlora" and fw.qlora_grad_checkpointing is not None:
        return fw.qlora_grad_checkpointing
    return fw.grad_checkpointing


def _positive(what: str, v: int | None) -> None:
    if v is not None and v <= 0:
        raise PlanInputError(f"{what} must be a positive number (got {v})")


def _dtype(s: str) -> DType:
    d = s.lower().replace("bfloat16", "bf16").replace("float16", "fp16").replace("float32", "fp32")
    if d not in ("bf16", "fp16", "fp32"):
        raise PlanInputError(f"parameter dtype must be bf16, fp16 or fp32 (got {s!r})")
    return d  # type: ignore[return-value]


# ------------------------------------------------------------------ the free-text workload's extra words

_OPT_WORDS = {"adamw8bit": "adamw_8bit", "adamw_8bit": "adamw_8bit", "adam8bit": "adamw_8bit",
              "paged_adamw": "paged_adamw_32bit", "paged_adamw_32bit": "paged_adamw_32bit",
              "paged_adamw_8bit": "paged_adamw_8bit", "adamw": "adamw_torch", "fused_adamw": "adamw_torch_fused",
              "adamw_torch_fused": "adamw_torch_fused", "sgd": "sgd", "adafactor": "adafactor", "lion": "lion"}


def run_words(words: list[str]) -> tuple[dict[str, object], list[str]]:
    """Planner options from the workload text's words the generic parser left over.

    ``gc``/``checkpointing``, ``no-gc``, ``eager``/``sdpa``/``flash``, ``r 16``/``rank 16``,
    ``adamw8bit``, ``paged_adamw``, ``fused-ce``/``chunked``, ``fp32``, ``dropout 0.05``.
    Returns (options, still-unparsed words).
    """
    out: dict[str, object] = {}
    rest: list[str] = []
    i = 0
    while i < len(words):
        w, nxt = words[i], words[i + 1] if i + 1 < len(words) else ""
        key = w.replace("-", "_")
        if key in ("gc", "checkpointing", "grad_checkpointing", "gradient_checkpointing", "activation_checkpointing"):
            out["grad_checkpointing"] = True
        elif key in ("no_gc", "nogc", "no_checkpointing"):
            out["grad_checkpointing"] = False
        elif key in ("eager", "sdpa"):
            out["attention"] = key
        elif key in ("flash", "fa2", "flash_attention_2", "flash_attn"):
            out["attention"] = "flash"
        elif key in ("r", "rank", "lora_r", "lora_rank") and nxt.isdigit():
            out["lora_r"] = int(nxt)
            i += 1
        elif m := re.fullmatch(r"r(\d+)", key):
            out["lora_r"] = int(m.group(1))
        elif key in ("dropout", "lora_dropout") and re.fullmatch(r"\d*\.?\d+", nxt):
            out["lora_dropout"] = float(nxt)
            i += 1
        elif key in _OPT_WORDS or key.replace("_", "") in _OPT_WORDS:
            out["optimizer"] = _OPT_WORDS.get(key, _OPT_WORDS.get(key.replace("_", ""), key))
        elif key in ("fused_ce", "cce", "liger", "flce"):
            out["loss"] = "fused"
        elif key in ("chunked", "chunked_ce"):
            out["loss"] = "chunked"
        elif key in ("litgpt", "lit_gpt"):
            out["framework"] = "litgpt"
        else:
            rest.append(w)
        i += 1
    return out, rest
