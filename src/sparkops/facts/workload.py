"""The planned workload: what the user is about to run, as far as the checks need it.

Free text (``--workload "qlora 70b seq 8192 nvfp4 tp 2 on 2 nodes"``) and structured flags both
land here; flags win over text. Words that are not understood are kept in ``unparsed`` so the
report can say what was ignored instead of guessing.
"""

from __future__ import annotations

import re

from sparkops.core.launch import engine_in_text, is_launch_line
from sparkops.core.modeling import BaseModel, ConfigDict, Field

METHODS = {"full": "full", "fft": "full", "lora": "lora", "qlora": "qlora", "inference": "inference",
           "serve": "inference", "serving": "inference", "infer": "inference", "host": "inference",
           "hosting": "inference"}
PRECISIONS = {"nvfp4": "nvfp4", "fp4": "nvfp4", "mxfp4": "mxfp4", "fp8": "fp8", "bf16": "bf16",
              "fp16": "fp16", "fp32": "fp32", "int8": "int8", "int4": "int4", "4bit": "int4", "8bit": "int8"}
COMPONENTS = ["vllm", "sglang", "unsloth", "trl", "peft", "transformers", "axolotl", "torchtune",
              "llama-factory", "nemo", "ollama", "llama.cpp", "tensorrt-llm", "trtllm", "comfyui",
              "deepspeed", "fsdp", "ddp", "nccl", "flash-attn", "xformers", "triton", "bitsandbytes",
              "torchao", "transformer-engine", "nim", "open-webui", "jupyter"]


class Workload(BaseModel):
    """What is planned. Every field optional: an empty workload judges the machine alone."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    text: str = ""
    method: str | None = None  # full | lora | qlora | inference
    model: str | None = None  # a model name if one was given (e.g. "llama-3.1-70b")
    params_b: float | None = None  # billions of parameters
    seq_len: int | None = None
    batch_size: int | None = None
    precision: str | None = None  # nvfp4 | fp8 | bf16 | ...
    tensor_parallel: int | None = None
    nodes: int | None = None
    components: list[str] = Field(default_factory=list)  # vllm, unsloth, ... (G8 matching)
    playbook: str | None = None
    estimated_peak_gb: float | None = None  # GB (1e9 bytes): --peak-gb, or the memory planner's peak (G3, G6)
    # a server's share of TOTAL memory (vLLM --gpu-memory-utilization) as its launch line names it, read by the planner
    # (planner/preflight.py) for G3's start-up check; None: not named, the engine's default applies
    serve_share: float | None = None
    # whether that server runs vLLM 0.34's extensible KV cache (no start-up check; the share is a cap), decided by the
    # G3 owner on the launch line's flags and the target's installed release; None: not decided there
    serve_extensible_kv: bool | None = None
    # the engine release that launch line names (vLLM: a vllm/vllm-openai image tag), which G3's start-up check judges;
    # None: the line names none, G3 falls back to the release installed in the target
    serve_engine_version: str | None = None
    # what the serving planner says the engine itself refuses at start for this launch line (ServePlanResult.refusals:
    # a context beyond the model's config, a KV pool that holds no request); G3 reports them
    serve_refusals: list[str] = Field(default_factory=list)
    # the serving planner's verdict on that server (fits | tight | does-not-fit): a vLLM share past the budget that still
    # passes its start-up check is TIGHT there (it starts, leaving the OS less than its reserve), and G3 says the same
    serve_verdict: str | None = None
    unparsed: list[str] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.text and all(
            v in (None, []) for k, v in self.model_dump().items() if k not in ("text", "unparsed")
        )

    @property
    def needs_planning(self) -> bool:
        """A fine-tune or a server with a model or a size and no peak yet: the memory planner (a fine-tune's peak)
        or ``plan --serve`` (a server's footprint) can size it for G3. A server is always handed to the serving
        planner: a launch line names its model in the engine's own flags and free text may name a catalog model, whatever
        the name looks like (BAAI/bge-m3, deepseek-ai/DeepSeek-V3), and where no model is named the planner says so (G3
        then reports that reason); the line's share reaches G3's start-up check even when the model is unknown."""
        return (self.estimated_peak_gb is None and self.method in ("full", "lora", "qlora", "inference")
                and bool(self.model or self.params_b or (self.method == "inference" and self.text.strip())))


_NUM = r"(\d+(?:\.\d+)?)"
_SIZE = re.compile(r"(?<![a-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)b(?![a-z0-9])")  # 70b, 8x7b, in a name too
TP_KEYS = ("tp", "tensor_parallel", "tensor-parallel", "tensor_parallel_size", "tensor-parallel-size",
           "tensor_model_parallel_size", "tensor-model-parallel-size", "tp_size", "tp-size")
_COUNT_WORDS = ("users", "requests", "concurrent", "parallel", "seqs", "sequences", "clients")
NODE_WORDS = ("nodes", "node", "sparks", "spark", "machines", "machine", "hosts")
# what a number before these words counts: nodes and GPUs, never tokens ("16k context 2 sparks", "ctx 8k 2 gpus")
_UNIT_WORDS = (*NODE_WORDS, "gpus", "gpu")


# a length's words: after the word ("ctx 4096", "context 128k") and before it ("128k context", "2k tokens")
_LEN_AFTER = ("seq", "seqlen", "seq_len", "sequence", "ctx", "context", "tokens", "packing", "max_seq_length", "max-model-len",
              "max_model_len", "max-seq-len", "seq-len", "context-length", "context_length")
_LEN_BEFORE = ("context", "ctx", "tokens", "seq", "seqlen", "sequence", "token")
# Serving or training, the rule (rounds 20ba, then the lead: the first request decides). A sentence trains when the
# first of its training verbs and serve words is a training VERB or the name of a training run: fine-tune X, finetune, train, training, sft, dpo, grpo, ppo, orpo, kto, rlhf, pretrain, fft ("fine-tune
# llama-3.1-8b for serving", "sft qwen3-8b then serve it": the serve word names the model's later use). "lora",
# "qlora", "fine-tuned", "finetuned", "adapter(s)" are no verbs: an adjective or a noun for WHAT is run. Without a serve
# word they name the training method ("qlora 70b seq 8192", "lora qwen3-8b"); in a sentence that asks to serve it
# (serve / serving / inference / infer / host / hosting) they describe the model served
# ("serve qwen3-8b with lora adapters on vllm", "serve my fine-tuned qwen3-8b with vllm 8k context"): serving.
TRAIN_WORDS = frozenset({"fine-tune", "finetune", "fine-tuning", "finetuning", "train", "training",
                         "trainer", "sft", "dpo", "grpo", "ppo", "orpo", "kto", "rlhf", "pretrain",
                         "pre-train", "pretraining", "fft", "full-finetune"})
SERVE_WORDS = frozenset(k for k, v in METHODS.items() if v == "inference")


def _length(tok: str) -> int | None:
    """A token count as written: ``4096``, ``128k``, ``1.5k``; None for anything else."""
    if tok.isascii() and tok.isdigit():
        return int(tok)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)k", tok)
    return int(float(m.group(1)) * 1024) if m else None


def _counts(tokens: list[str], j: int) -> bool:
    """Whether the number at ``j`` counts users / requests / parallel slots / nodes / GPUs, not tokens: "4 users" (a
    count word after it that takes no number of its own: "ctx 4096 parallel 4" leaves 4096 a length), "2 sparks",
    "2 gpus" (never a length), "parallel 4" (a count word right before it). A count word BEFORE the number does not own
    it where the number carries a k ("4 users 32k context"), or where that count word has its own number before it and
    a length word follows this one ("4 users 32768 context"); "users 1 ctx", "parallel 4 ctx 4096": counted."""
    after = tokens[j + 1] if j + 1 < len(tokens) else ""
    after2 = tokens[j + 2] if j + 2 < len(tokens) else ""
    before = tokens[j - 1] if j >= 1 else ""
    if (after in _COUNT_WORDS and _length(after2) is None) or after in _UNIT_WORDS:
        return True
    if before not in _COUNT_WORDS:
        return False
    # the count word's own number came before it ("4 users 32768 context"), or this one carries a k: not its count
    before2 = tokens[j - 2] if j >= 2 else ""
    own = _length(before2) is not None
    return not (tokens[j].endswith("k") or (own and after in _LEN_BEFORE))


def _size_b(tok: str) -> float | None:
    """Billions of parameters in a token: ``70b``, ``8x7b`` (56), ``llama-3.1-70b-instruct`` (70)."""
    m = _SIZE.search(tok)
    if not m:
        return None
    return float(m.group(2)) * (float(m.group(1)) if m.group(1) else 1.0)


def parse_workload(text: str) -> Workload:
    """Parse a free-text workload description (or a pasted launch line); never raises."""
    w = Workload(text=text.strip())
    low = text.lower().replace("=", " ")
    tokens = [t.lstrip("-") for t in re.findall(r"[a-z0-9_.\-/]+", low)]
    tokens = [t for t in tokens if t]
    # the same tokens as written: a Hugging Face id keeps its case (the Hub's repository names are case-sensitive)
    written = [t.lstrip("-") for t in re.findall(r"[A-Za-z0-9_.\-/]+", text.replace("=", " "))]
    written = [t for t in written if t]
    if len(written) != len(tokens) or any(a.lower() != b for a, b in zip(written, tokens, strict=False)):
        written = tokens
    used: set[int] = set()
    # which the sentence asks for first decides: "sft qwen3-8b then serve it with vllm" trains, "serve qwen3-8b with vllm
    # for grpo rollouts" serves; a pasted launch line (`vllm serve ... --lora-modules sft=/ckpt`) always serves, its
    # flags' words are names, not requests
    first = next((t for t in tokens if t in TRAIN_WORDS or t in SERVE_WORDS), None)
    trains = first in TRAIN_WORDS and not is_launch_line(text)
    # "serve qwen3-8b with lora adapters": a serve word and no training verb (TRAIN_WORDS' rule): lora, qlora and full
    # describe the model served, not a method
    serves = not trains and any(t in SERVE_WORDS for t in tokens)

    def take(i: int, n: int = 1) -> None:
        used.update(range(i, i + n))

    for i, tok in enumerate(tokens):
        if i in used:  # a number a word before it took ("batch 8", "context 2k") is read once, as that word says
            continue
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        nxt2 = tokens[i + 2] if i + 2 < len(tokens) else ""
        if tok in METHODS and w.method is None and not (trains and METHODS[tok] == "inference") \
                and not (serves and METHODS[tok] != "inference"):
            w.method = METHODS[tok]
            take(i)
        elif tok in PRECISIONS and w.precision is None:
            w.precision = PRECISIONS[tok]
            take(i)
        elif re.fullmatch(r"(\d+x)?" + _NUM + r"b", tok):  # 70b, 8x7b
            w.params_b = _size_b(tok)
            take(i)
        elif tok in _LEN_AFTER and (n := _length(nxt)) is not None and not _counts(tokens, i + 1) \
                and w.seq_len is None:
            w.seq_len = n  # "ctx 4096", "context 128k", "seq 8k" (not "context 4 users": that 4 counts users)
            take(i, 2)
        elif (n := _length(tok)) is not None and nxt in _LEN_BEFORE and not _counts(tokens, i) \
                and w.seq_len is None:
            w.seq_len = n  # "64k context", "2k tokens", "8192 seq": the size before the word
            take(i, 2)
        elif tok in ("bs", "batch", "batch_size", "batch-size", "micro_batch", "per_device_train_batch_size") \
                and nxt.isdigit():
            w.batch_size = int(nxt)
            take(i, 2)
        elif tok == "batch" and nxt == "size" and nxt2.isdigit():
            w.batch_size = int(nxt2)
            take(i, 3)
        elif tok in TP_KEYS and nxt.isdigit():
            w.tensor_parallel = int(nxt)
            take(i, 2)
        elif m := re.fullmatch(r"tp(\d+)", tok):
            w.tensor_parallel = int(m.group(1))
            take(i)
        elif (tok.isdigit() or re.fullmatch(r"\d+x", tok)) and nxt in NODE_WORDS:  # 2 nodes, 2x spark
            w.nodes = int(tok.rstrip("x"))
            take(i, 2)
        elif m := re.fullmatch(r"(\d+)-(?:" + "|".join(NODE_WORDS) + ")", tok):  # 2-node
            w.nodes = int(m.group(1))
            take(i)
        elif tok in ("nodes", "nnodes", "num_nodes", "num-nodes", "num_machines") and nxt.isdigit():
            w.nodes = int(nxt)
            take(i, 2)
        elif tok in ("two", "dual") and nxt in NODE_WORDS:
            w.nodes = 2
            take(i, 2)
        elif tok in ("playbook",) and nxt:
            w.playbook = nxt
            take(i, 2)
        elif tok in COMPONENTS or tok.replace("_", "-") in COMPONENTS:
            comp = tok.replace("_", "-")
            if comp not in w.components:
                w.components.append(comp)
            take(i)
        elif _size_b(tok) is not None and re.search(r"[a-z]{2}", tok) and w.model is None:
            w.model = written[i]  # llama-3.1-70b-instruct, meta-llama/Llama-3.1-8B, gpt-oss-120b, mixtral-8x7b
            w.params_b = w.params_b or _size_b(tok)
            take(i)
    # a launch line that starts a server (`docker run ... vllm/vllm-openai:v0.34.0 --model X`, `python -m
    # sglang.launch_server ...`) is an inference workload on that engine even where no word says "serve"
    engine = engine_in_text(text)
    if engine is not None:
        w.method = w.method or (None if trains else "inference")
        comp = "tensorrt-llm" if engine == "trtllm" else engine
        if comp not in w.components:
            w.components.append(comp)
    filler = {"on", "with", "at", "of", "a", "the", "and", "for", "x", "in", "using", "model", "run", "train",
              "training", "fine-tune", "finetune", "size"}
    w.unparsed = [t for i, t in enumerate(tokens) if i not in used and t not in filler]
    return w


# What no workload on one to a few Sparks can be: a value past these is a typo, not a plan (the
# largest open models are ~1-2 T parameters; GB10 contexts are far below 10 M tokens).
SANE = {"params_b": (0.001, 5_000.0), "seq_len": (1, 10_000_000), "batch_size": (1, 1_000_000),
        "tensor_parallel": (1, 4096), "nodes": (1, 4096), "estimated_peak_gb": (0.0, 1_000_000.0)}
_LABELS = {"params_b": ("model size", "B"), "seq_len": ("sequence length", ""), "batch_size": ("batch size", ""),
           "tensor_parallel": ("tensor-parallel size", ""), "nodes": ("node count", ""),
           "estimated_peak_gb": ("peak", " GB")}
_SIGNED = re.compile(r"(?<![\w.])(seq|seqlen|seq_len|sequence|ctx|context|bs|batch|batch_size|batch-size|tp|"
                     r"tensor_parallel|tensor-parallel|tensor_parallel_size|nodes|nnodes|num_nodes)"
                     r"[\s=]+-\s*(\d+(?:\.\d+)?)", re.I)


def refusals(w: Workload) -> list[str]:
    """Why a workload cannot be planned as given: a negative number in the text (``seq -4096``,
    whose sign the tokenizer would drop) or a value no real run has (``10000b``). Empty when fine;
    the front ends turn each into a usage error instead of planning something else."""
    out = [f"{m.group(1)} -{m.group(2)}: a negative {m.group(1)} is not a workload" for m in _SIGNED.finditer(w.text)]
    for name, (lo, hi) in SANE.items():
        v = getattr(w, name)
        if v is not None and not lo <= v <= hi:
            shown = f"{v:g}" if isinstance(v, float) else str(v)
            label, unit = _LABELS[name]
            out.append(f"{label} {shown}{unit} is outside what a run can have ({lo:g}-{hi:g}{unit})")
    return out


def merge(text: str | None = None, **flags: object) -> Workload:
    """Text parsed first, then explicit flags (non-None) override."""
    w = parse_workload(text or "")
    data = w.model_dump()
    for k, v in flags.items():
        if v is None or v == []:
            continue
        if k == "precision":  # flags get the same spellings as text: NVFP4, fp4 -> nvfp4
            v = PRECISIONS.get(str(v).lower(), str(v).lower())
        elif k == "method":
            v = METHODS.get(str(v).lower(), str(v).lower())
        if k == "components":
            data[k] = sorted(set(data[k]) | set(v))  # type: ignore[arg-type]
        else:
            data[k] = v
    return Workload.model_validate(data)
