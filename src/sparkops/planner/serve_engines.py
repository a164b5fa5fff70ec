"""Serving engines as data, and the launch line a user pastes, read into one :class:`ServeSpec`.

``knowledge/engines.yaml`` holds each engine's modelled version, its sources and its defaults;
this module loads it and turns ``vllm serve MODEL --max-model-len 32k ...``, ``python -m
sglang.launch_server ...``, ``llama-server -m x.gguf -c 65536 -np 4`` or ``ollama run gemma3:27b``
(with ``OLLAMA_*=`` assignments in front) into the engine's settings. Parsing is ``shlex`` on the
text, pure and never raising for odd words: what it does not understand lands in ``ignored``.
"""

from __future__ import annotations

import re
import shlex
from datetime import date
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sparkops.core.errors import InputError
from sparkops.core.launch import SGLANG_IMAGE, VLLM_IMAGE, detect_engine, image_version, sglang_image_version

Engine = Literal["vllm", "sglang", "llama.cpp", "ollama", "trtllm"]
ENGINES: tuple[str, ...] = ("vllm", "sglang", "llama.cpp", "ollama", "trtllm")


class ServeInputError(InputError):
    """A serving plan cannot be made from this input (unknown engine, bad number, no model)."""


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class EngineInfo(_M):
    modelled_version: str
    sources: list[str]
    two_sparks: dict[str, str]
    # the rest are engine-specific knobs, kept as a mapping
    extra: dict[str, Any] = Field(default_factory=dict)


class ServeModelEntry(_M):
    id: str
    name: str
    hf_ids: list[str] = Field(default_factory=list)
    aliases: list[str] = Field(default_factory=list)
    source: str
    config: dict[str, Any] = Field(default_factory=dict)
    vision: dict[str, Any] | None = None  # the checkpoint's vision_config (multimodal checkpoints vLLM loads whole)
    same_as: str | None = None  # a training-catalog id with the same shapes
    # a pooling checkpoint (embedding model / reranker): what it is published for (embed / classify), and whether its
    # repository has a Sentence Transformers modules.json (None: not known), which makes vLLM's --runner auto pool it
    pool_task: str | None = None
    st_modules: bool | None = None


class EnginesFile(_M):
    version: int
    last_verified: date
    engines: dict[str, EngineInfo]
    weight_bytes: dict[str, float]
    gguf_bits_per_weight: dict[str, float]
    models: list[ServeModelEntry] = Field(default_factory=list)


@lru_cache(maxsize=1)
def engines_knowledge() -> EnginesFile:
    """``knowledge/engines.yaml``, validated (a bad edit fails loudly here)."""
    from sparkops.knowledge import engines_data

    raw = dict(engines_data())  # a copy: the cached data stays as read
    eng = {}
    for name, body in raw.get("engines", {}).items():
        body = dict(body)
        fixed = {k: body.pop(k) for k in ("modelled_version", "sources", "two_sparks") if k in body}
        eng[name] = {**fixed, "extra": body}
    raw["engines"] = eng
    return EnginesFile.model_validate(raw)


def engine_value(engine: str, key: str) -> Any:
    return engines_knowledge().engines[engine].extra[key]


# ------------------------------------------------------------------ the spec


class ServeSpec(_M):
    """One server as launched: the engine and the settings that decide its memory."""

    engine: Engine
    model: str | None = None
    engine_version: str | None = None  # the version to model (default: the current one in engines.yaml)
    # read from the environment the engine runs in (--python, or a snapshot's target), not from the launch line:
    installed_in: str | None = None  # the interpreter whose distributions gave engine_version / flashinfer_installed
    flashinfer_installed: bool | None = None  # vLLM: FlashInfer beside it there (None: not read)
    # vLLM: the torch.compile cache this start finds (serve.vllm_compile_state reads it from a start-up log): "cold" (it
    # compiles inside the profiled window), "warm" (it loads the compiled artifact); None: not known, a first start assumed
    compile_state: Literal["cold", "warm"] | None = None
    max_model_len: int | None = None  # vLLM --max-model-len, SGLang --context-length
    gpu_memory_utilization: float | None = None  # vLLM
    mem_fraction_static: float | None = None  # SGLang
    free_gpu_memory_fraction: float | None = None  # TensorRT-LLM: share of the memory FREE after loading
    kv_max_tokens: int | None = None  # caps the KV pool in tokens: TensorRT-LLM KvCacheConfig.max_tokens, SGLang --max-total-tokens
    max_batch_size: int | None = None  # TensorRT-LLM
    kv_cache_memory_bytes: int | None = None  # vLLM --kv-cache-memory: skips the profiled budget
    num_gpu_blocks_override: int | None = None  # vLLM --num-gpu-blocks-override (turns 0.34's extensible cache off)
    enable_extensible_kv_cache: bool | None = None  # vLLM >= 0.34 --[no-]enable-extensible-kv-cache; None: default
    kv_connector: str | None = None  # vLLM --kv-transfer-config's kv_connector (LMCacheConnectorV1 ...)
    # vLLM speculative decoding (--speculative-config JSON, or the older --speculative-model /
    # --num-speculative-tokens): the drafter's method, its checkpoint and the tokens it proposes per step
    speculative_method: str | None = None
    reasoning_parser: str | None = None  # vLLM --reasoning-parser (0.22.0 keeps such a launch on Model Runner V1)
    # vLLM pooling servers (embedding / classification encoders): --runner (None: auto), --convert (None: auto) and
    # the older --task as written (engines.yaml vllm.pooling: which release parses which; serve.vllm_pooling resolves)
    runner: Literal["generate", "pooling", "draft"] | None = None
    convert: Literal["none", "embed", "classify", "reward"] | None = None
    task: str | None = None
    speculative_model: str | None = None
    num_speculative_tokens: int | None = None
    # vLLM multimodal: --limit-mm-per-prompt (items per prompt by modality; 0 for every modality of a tower
    # skips that tower) and --language-model-only (every limit 0)
    limit_mm_per_prompt: dict[str, int] | None = None
    language_model_only: bool = False
    # SGLang --language-only (0.5.10: the language side of encoder disaggregation; the default mem_fraction_static
    # skips the VLM factor, the tower is still built and loaded: engines.yaml sglang.vlm_fraction)
    language_only: bool = False
    # SGLang pool sizing (engines.yaml sglang.hybrid_swa, sglang.mamba): --swa-full-tokens-ratio,
    # --disable-hybrid-swa-memory, --mamba-full-memory-ratio, --max-mamba-cache-size, --disable-radix-cache
    swa_full_tokens_ratio: float | None = None
    disable_hybrid_swa_memory: bool = False
    mamba_full_memory_ratio: float | None = None
    max_mamba_cache_size: int | None = None
    disable_radix_cache: bool = False
    skip_mm_profiling: bool = False  # vLLM --skip-mm-profiling: no dummy multimodal batch in the profile run
    # vLLM LoRA serving: --enable-lora builds max_loras adapter slots of max_lora_rank on the GPU at load time
    enable_lora: bool = False
    max_loras: int | None = None
    max_lora_rank: int | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    # SGLang --dp-size: replicas of the model, each on its own tp x pp GPUs (memory per GPU unchanged, GPUs x dp)
    data_parallel: int = 1
    cuda_graph_max_bs: int | None = None  # SGLang --cuda-graph-max-bs (0.5.23: --cuda-graph-max-bs-decode)
    max_prefill_tokens: int | None = None  # SGLang --max-prefill-tokens (its reserve with --chunked-prefill-size <= 0)
    kv_cache_dtype: str | None = None  # auto | fp8 | fp8_e4m3 | bf16 ...
    quantization: str | None = None  # --quantization, or read from the model name
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    # vLLM --enable-prefix-caching / --no-enable-prefix-caching (None: not named, vLLM's default, on); off sets a hybrid
    # model's mamba_cache_mode to 'none': one state page per request instead of 'align''s two
    enable_prefix_caching: bool | None = None
    load_format: str | None = None  # vLLM --load-format (fastsafetensors: see engines.yaml vllm.fastsafetensors_unified)
    entrypoint: str | None = None  # vLLM: "serve" (the OpenAI server, default) or "llm" (the offline LLM class)
    ctx_size: int | None = None  # llama.cpp -c (total cells); Ollama num_ctx per sequence
    parallel: int | None = None  # llama.cpp -np; OLLAMA_NUM_PARALLEL
    # vLLM --max-model-len auto / -1: the engine binary-searches the longest length the KV pool holds
    # (v1/core/kv_cache_utils.py _auto_fit_max_model_len) instead of the model's own
    max_model_len_auto: bool = False
    kv_unified: bool | None = None  # llama.cpp -kvu / --kv-unified (--no-kv-unified); None: llama-server decides
    n_gpu_layers: int | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    # llama.cpp -fa on|off|auto (a bare -fa: on), Ollama OLLAMA_FLASH_ATTENTION (on/off); None: not named, the engine's
    # default (gguf_cache_types resolves it with the release)
    flash_attn: Literal["on", "off", "auto"] | None = None
    swa_full: bool = False
    ubatch: int | None = None
    concurrency: int | None = None  # requests the user wants served at once at max_model_len
    gguf_path: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    ignored: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _ollama_default_tag(self) -> ServeSpec:
        """An Ollama library name without a tag is the library's default size (ollama_library_tag), for every path
        that builds a spec: the launch-line parser, the CLI / MCP options, the log scorer."""
        if self.engine == "ollama" and ollama_library_tag(self.model) != self.model:
            self.model = ollama_library_tag(self.model)
        return self


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgG]?)$")


def parse_size(value: str, what: str) -> int:
    """``32768``, ``32k`` (32000) or ``32K`` (32768), as vLLM reads --max-model-len."""
    m = _SIZE.match(value.strip().replace("_", ""))
    if not m:
        raise ServeInputError(f"{what} must be a number like 32768, 32k or 32K (got {value!r})")
    num, unit = float(m.group(1)), m.group(2)
    mult = {"": 1, "k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2, "g": 1000**3, "G": 1024**3}[unit]
    out = int(num * mult)
    if out <= 0:
        raise ServeInputError(f"{what} must be positive (got {value!r})")
    return out


def _float(value: str, what: str, lo: float, hi: float) -> float:
    try:
        f = float(value)
    except ValueError:
        raise ServeInputError(f"{what} must be a number (got {value!r})") from None
    if not lo < f <= hi:
        raise ServeInputError(f"{what} must be in ({lo}, {hi}] (got {value!r})")
    return f


def _int(value: str, what: str, *, lowest: int = 0) -> int:
    """A whole number >= ``lowest`` (0 unless the engine gives a smaller value a meaning, e.g. SGLang's -1)."""
    try:
        i = int(value)
    except ValueError:
        raise ServeInputError(f"{what} must be a whole number (got {value!r})") from None
    if i < lowest:
        raise ServeInputError(f"{what} must be at least {lowest} (got {value!r})" if lowest else
                              f"{what} must not be negative (got {value!r})")
    return i


def _special(kind: str, val: str, flag: str) -> Any:
    """Values an engine's own argument parser gives a meaning beyond a plain count; None is "the engine's default /
    the model's own", as if the flag were not named.

    - vLLM --max-model-len ``-1`` / ``auto`` (vllm/engine/arg_utils.py human_readable_int_or_auto): vLLM fits the
      length to the KV memory; None here (the model's own context) and ServeSpec.max_model_len_auto set, so the plan
      cuts the length to what the pool holds, as vLLM's auto-fit does.
    - llama.cpp -c ``0`` (common/arg.cpp: n_ctx 0 = the model's n_ctx_train): None, the model's trained context.
    - llama.cpp -ngl: a negative number, ``auto`` (-1) or ``all`` (-2) in builds whose parser takes them: every
      layer on the GPU (on a Spark the same pool), None.
    - SGLang --chunked-prefill-size ``-1`` (or 0): chunked prefill off; kept as given, and the default
      mem_fraction_static then reserves for max_prefill_tokens (engines.yaml sglang.max_prefill_tokens).
    """
    v = val.strip().lower()
    if kind == "size_auto":
        return None if v in ("-1", "auto") else parse_size(val, flag)
    if kind == "ctx0":
        return None if v == "0" else parse_size(val, flag)
    if kind == "ngl":
        if v in ("auto", "all"):
            return None
        n = _int(val, flag, lowest=-(2**31))
        return None if n < 0 else n
    return _int(val, flag, lowest=-1)  # "int_or_off"


def ollama_uint(value: str, what: str) -> int | None:
    """An ``OLLAMA_*`` count as Ollama reads it (envconfig/config.go ``Uint``: strconv.ParseUint(s, 10, 64)): plain
    decimal digits only. Anything else ("8k", "8192.0", "-1") Ollama logs as "invalid environment variable, using
    default" and ignores, so the plan refuses it rather than read a number Ollama would not. 0 is Ollama's own
    default (None here)."""
    v = value.strip()
    if not re.fullmatch(r"[0-9]+", v):
        raise ServeInputError(f"{what}={value!r} is not a plain whole number: Ollama (envconfig Uint, "
                              "strconv.ParseUint) ignores it and uses its default; write the number of tokens, "
                              "e.g. 8192")
    n = int(v)
    return n or None


# flag -> (field, kind); underscores and dashes are the same flag (vLLM and SGLang accept both)
_VLLM = {"--max-model-len": ("max_model_len", "size_auto"), "--gpu-memory-utilization": ("gpu_memory_utilization", "frac"),
         "--tensor-parallel-size": ("tensor_parallel", "int"), "-tp": ("tensor_parallel", "int"),
         "--pipeline-parallel-size": ("pipeline_parallel", "int"), "-pp": ("pipeline_parallel", "int"),
         "--kv-cache-dtype": ("kv_cache_dtype", "str"), "--max-num-seqs": ("max_num_seqs", "int"),
         "--max-num-batched-tokens": ("max_num_batched_tokens", "size"), "--enforce-eager": ("enforce_eager", "flag"),
         "--quantization": ("quantization", "str"), "-q": ("quantization", "str"), "--model": ("model", "str"),
         "--kv-cache-memory": ("kv_cache_memory_bytes", "size"), "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", "size"),
         "--kv-transfer-config": ("kv_connector", "connector"), "--speculative-config": ("speculative", "speculative"),
         "--speculative-model": ("speculative_model", "str"), "--num-speculative-tokens": ("num_speculative_tokens", "int"),
         "--limit-mm-per-prompt": ("limit_mm_per_prompt", "mm"), "--language-model-only": ("language_model_only", "flag"),
         "--skip-mm-profiling": ("skip_mm_profiling", "flag"), "--enable-lora": ("enable_lora", "flag"),
         "--max-loras": ("max_loras", "int"), "--max-lora-rank": ("max_lora_rank", "int"),
         "--enable-prefix-caching": ("enable_prefix_caching", "flag"),
         "--no-enable-prefix-caching": ("enable_prefix_caching", "noflag"), "--load-format": ("load_format", "str"),
         "--num-gpu-blocks-override": ("num_gpu_blocks_override", "int"),
         "--enable-extensible-kv-cache": ("enable_extensible_kv_cache", "flag"),
         "--no-enable-extensible-kv-cache": ("enable_extensible_kv_cache", "noflag"),
         "--reasoning-parser": ("reasoning_parser", "str"), "--runner": ("runner", "runner"),
         "--convert": ("convert", "convert"), "--task": ("task", "task")}
_SGLANG = {"--model-path": ("model", "str"), "--model": ("model", "str"), "--mem-fraction-static": ("mem_fraction_static", "frac"),
           "--tp": ("tensor_parallel", "int"), "--tp-size": ("tensor_parallel", "int"), "--pp-size": ("pipeline_parallel", "int"),
           "--context-length": ("max_model_len", "size"), "--kv-cache-dtype": ("kv_cache_dtype", "str"),
           "--max-running-requests": ("max_num_seqs", "int"), "--quantization": ("quantization", "str"),
           "--chunked-prefill-size": ("max_num_batched_tokens", "int_or_off"), "--max-total-tokens": ("kv_max_tokens", "int"),
           # server_args' long spellings (0.5.4 server_args.py add_cli_args; 0.5.23 arg_groups/fields/parallel.py aliases)
           "--tensor-parallel-size": ("tensor_parallel", "int"), "--pipeline-parallel-size": ("pipeline_parallel", "int"),
           "--dp-size": ("data_parallel", "int"),
           "--data-parallel-size": ("data_parallel", "int"), "--cuda-graph-max-bs": ("cuda_graph_max_bs", "int"),
           "--cuda-graph-max-bs-decode": ("cuda_graph_max_bs", "int"), "--max-prefill-tokens": ("max_prefill_tokens", "int"),
           # pool sizing (0.5.3 / 0.5.10 server_args.py; engines.yaml sglang.hybrid_swa, sglang.mamba, vlm_fraction)
           "--swa-full-tokens-ratio": ("swa_full_tokens_ratio", "frac"),
           "--disable-hybrid-swa-memory": ("disable_hybrid_swa_memory", "flag"),
           "--mamba-full-memory-ratio": ("mamba_full_memory_ratio", "posfloat"),
           "--max-mamba-cache-size": ("max_mamba_cache_size", "int"),
           "--disable-radix-cache": ("disable_radix_cache", "flag"),
           "--language-only": ("language_only", "flag"), "--language-model-only": ("language_model_only", "flag")}
_LLAMA = {"-m": ("model", "str"), "--model": ("model", "str"), "-c": ("ctx_size", "ctx0"), "--ctx-size": ("ctx_size", "ctx0"),
          "-ngl": ("n_gpu_layers", "ngl"), "--n-gpu-layers": ("n_gpu_layers", "ngl"), "--gpu-layers": ("n_gpu_layers", "ngl"),
          "-np": ("parallel", "int"), "--parallel": ("parallel", "int"), "-ctk": ("cache_type_k", "str"),
          "--cache-type-k": ("cache_type_k", "str"), "-ctv": ("cache_type_v", "str"), "--cache-type-v": ("cache_type_v", "str"),
          "--swa-full": ("swa_full", "flag"), "-ub": ("ubatch", "int"), "--ubatch-size": ("ubatch", "int"),
          "-hf": ("model", "str"), "--hf-repo": ("model", "str"), "-fa": ("flash_attn", "fa"),
          "--flash-attn": ("flash_attn", "fa"), "-kvu": ("kv_unified", "flag"), "--kv-unified": ("kv_unified", "flag"),
          "--no-kv-unified": ("kv_unified", "noflag")}
# -fa's values (common/arg.cpp: on|off|auto; older builds a switch); ParseBool's words as Ollama reads them
_FA_WORDS = {"on": "on", "off": "off", "auto": "auto", "1": "on", "0": "off", "true": "on", "false": "off",
             "enabled": "on", "disabled": "off"}
_TRTLLM = {"--model": ("model", "str"), "--tp-size": ("tensor_parallel", "int"), "--pp-size": ("pipeline_parallel", "int"),
           "--kv-cache-free-gpu-memory-fraction": ("free_gpu_memory_fraction", "frac"),
           "--max-num-tokens": ("max_num_batched_tokens", "size"), "--max-batch-size": ("max_batch_size", "int"),
           "--max-seq-len": ("max_model_len", "size")}
_BOOL_NOARG = {"--enforce-eager", "--swa-full", "--enable-expert-parallel", "--trust-remote-code", "--enable-prefix-caching",
               "--no-enable-prefix-caching", "--enable-chunked-prefill", "--disable-log-stats", "-fa", "--flash-attn",
               "--jinja", "--mlock", "--no-mmap", "--enable-auto-tool-choice", "--disable-cuda-graph",
               "--disable-radix-cache", "--language-model-only", "-fmoe", "-rtr", "--cont-batching", "--skip-mm-profiling",
               "--enable-lora", "--enable-extensible-kv-cache", "--no-enable-extensible-kv-cache", "-kvu", "--kv-unified",
               "--no-kv-unified"}


def _norm_flag(tok: str) -> str:
    if tok.startswith("--"):
        return "--" + tok[2:].replace("_", "-")
    return tok


def parse_command(text: str, *, engine: str | None = None) -> ServeSpec:
    """Read a pasted launch line (``vllm serve ...``, ``llama-server ...``, ``ollama run ...``)."""
    joined = re.sub(r"\\\s*\n", " ", text)
    try:
        tokens = shlex.split(joined, comments=False, posix=True)
    except ValueError as exc:
        raise ServeInputError(f"cannot split the command line: {exc}") from exc
    env: dict[str, str] = {}
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
        k, v = tokens.pop(0).split("=", 1)
        env[k] = v
    for t in tokens:  # `-e OLLAMA_NUM_PARALLEL=4` in a docker line
        if re.fullmatch(r"(OLLAMA|VLLM|SGLANG|LLAMA)_[A-Z0-9_]*=.*", t):
            k, v = t.split("=", 1)
            env.setdefault(k, v)
    found, start = detect_engine(tokens)
    eng = engine or found
    if eng is None:
        raise ServeInputError("no serving engine in this command line: expected `vllm serve`, "
                              "`python -m sglang.launch_server`, `llama-server`, `ollama run` or `trtllm-serve`")
    if eng not in ENGINES:
        raise ServeInputError(f"unknown engine {eng!r}; known: {', '.join(ENGINES)}")
    table = {"vllm": _VLLM, "sglang": _SGLANG, "llama.cpp": _LLAMA, "ollama": {}, "trtllm": _TRTLLM}[eng]
    spec: dict[str, Any] = {"engine": eng, "env": env}
    if eng in ("vllm", "sglang"):  # the image's tag names the release whose accounting applies
        read_tag = image_version if eng == "vllm" else sglang_image_version
        tagged = next((v for t in tokens if (v := read_tag(t))), None)
        if tagged:
            spec["engine_version"] = tagged
    ignored: list[str] = []
    args = tokens[start:]
    i = 0
    positional: list[str] = []
    while i < len(args):
        tok = args[i]
        if tok.startswith("-") and len(tok) > 1:
            name, eq, val = tok.partition("=")
            flag = _norm_flag(name)
            if flag in table:
                fld, kind = table[flag]
                if kind in ("flag", "noflag"):
                    spec[fld] = kind == "flag"
                    i += 1
                    continue
                if kind == "fa":  # llama.cpp -fa [on|off|auto]: a value when one follows, a bare -fa (older builds) is on
                    word = val if eq else (args[i + 1] if i + 1 < len(args) else "")
                    if not eq and word.lower() in _FA_WORDS:
                        i += 1
                    if eq and val.lower() not in _FA_WORDS:
                        raise ServeInputError(f"{flag} must be on, off or auto (got {val!r})")
                    spec[fld] = _FA_WORDS.get(word.lower(), "on")
                    i += 1
                    continue
                if not eq:
                    if i + 1 >= len(args):
                        raise ServeInputError(f"{flag} needs a value")
                    val = args[i + 1]
                    i += 1
                if kind == "speculative":
                    spec.update(parse_speculative_config(val, flag))
                else:
                    spec[fld] = _convert(val, kind, flag)
                    if kind == "size_auto":  # -1 / auto: vLLM fits the length to the pool (ServeSpec.max_model_len_auto)
                        spec["max_model_len_auto"] = spec[fld] is None
            elif flag in _BOOL_NOARG or eq:
                ignored.append(tok)
            else:
                # an unknown flag: take the next word as its value unless it is a flag itself
                if i + 1 < len(args) and not args[i + 1].startswith("-"):
                    ignored.append(f"{tok} {args[i + 1]}")
                    i += 1
                else:
                    ignored.append(tok)
        else:
            positional.append(tok)
        i += 1
    if spec.get("speculative_model") and not spec.get("speculative_method"):
        spec["speculative_method"] = "draft_model"  # --speculative-model alone: a separate draft model
    if "model" not in spec and positional and eng in ("vllm", "ollama", "trtllm"):
        spec["model"] = positional.pop(0)
    ignored += positional
    if eng == "ollama":
        if "OLLAMA_NUM_PARALLEL" in env:
            spec["parallel"] = ollama_uint(env["OLLAMA_NUM_PARALLEL"], "OLLAMA_NUM_PARALLEL")
        if "OLLAMA_CONTEXT_LENGTH" in env:
            spec["ctx_size"] = ollama_uint(env["OLLAMA_CONTEXT_LENGTH"], "OLLAMA_CONTEXT_LENGTH")
        if "OLLAMA_KV_CACHE_TYPE" in env:
            spec["cache_type_k"] = spec["cache_type_v"] = env["OLLAMA_KV_CACHE_TYPE"].lower()
        if env.get("OLLAMA_FLASH_ATTENTION", "").strip():  # envconfig: strconv.ParseBool, an unparsable value is true
            off = env["OLLAMA_FLASH_ATTENTION"].strip().strip("\"'") in ("0", "f", "F", "false", "FALSE", "False")
            spec["flash_attn"] = "off" if off else "on"
    if eng == "llama.cpp" and spec.get("model", "").endswith(".gguf"):
        spec["gguf_path"] = spec["model"]
    spec["ignored"] = ignored
    return ServeSpec(**spec)


def _connector(val: str) -> str:
    """``--kv-transfer-config '{"kv_connector":"LMCacheConnectorV1",...}'``: the connector's name (the
    whole value when it is not JSON)."""
    import json

    try:
        cfg = json.loads(val)
    except ValueError:
        return val
    return str(cfg.get("kv_connector") or val) if isinstance(cfg, dict) else val


def parse_speculative_config(val: str, flag: str = "--speculative-config") -> dict[str, Any]:
    """``--speculative-config '{"method": "eagle3", "model": "...", "num_speculative_tokens": 3}'`` as users
    paste it (vLLM reads it with json.loads: arg_utils's speculative_config is a JSON dict): the method, the
    drafter's checkpoint and the number of proposed tokens. A draft model without a method is vLLM's
    "draft_model"; MTP methods need no model (the checkpoint's own MTP layers draft)."""
    import json

    try:
        cfg = json.loads(val)
    except ValueError as exc:
        raise ServeInputError(f"{flag} is not JSON: {val!r} ({exc})") from exc
    if not isinstance(cfg, dict):
        raise ServeInputError(f"{flag} must be a JSON object, got {val!r}")
    out: dict[str, Any] = {}
    method = cfg.get("method")
    model = cfg.get("model")
    if method is not None:
        out["speculative_method"] = str(method)
    if model is not None:
        out["speculative_model"] = str(model)
        out.setdefault("speculative_method", "draft_model")
    n = cfg.get("num_speculative_tokens")
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ServeInputError(f"{flag}: num_speculative_tokens must be a whole number >= 0, got {n!r}")
        out["num_speculative_tokens"] = n
    return out


def parse_mm_limits(val: str, flag: str = "--limit-mm-per-prompt") -> dict[str, int]:
    """``--limit-mm-per-prompt '{"image": 2, "video": 0}'`` (vLLM >= 0.10: JSON; a modality may also be a dict
    with a ``count``), or the older ``image=2,video=0``: items per prompt by modality."""
    import json

    try:
        cfg = json.loads(val)
    except ValueError:
        cfg = None
        pairs = [p.partition("=") for p in val.split(",") if p.strip()]
        if pairs and all(eq and k.strip() for k, eq, _ in pairs):
            cfg = {k.strip(): v.strip() for k, _, v in pairs}
    if not isinstance(cfg, dict):
        raise ServeInputError(f"{flag} must be a JSON object like '{{\"image\": 2}}' or image=2,video=0, got {val!r}")
    out: dict[str, int] = {}
    for k, v in cfg.items():
        n = v.get("count") if isinstance(v, dict) else v
        if isinstance(n, str) and n.strip().isdigit():
            n = int(n.strip())
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ServeInputError(f"{flag}: the limit for {k!r} must be a whole number >= 0, got {v!r}")
        out[str(k)] = n
    return out


_CHOICES = {"runner": ("auto", "generate", "pooling", "draft"), "convert": ("auto", "none", "embed", "classify", "reward"),
            "task": ("auto", "generate", "embedding", "embed", "classify", "score", "reward", "transcription", "draft")}


def _choice(val: str, kind: str, flag: str) -> str | None:
    """--runner / --convert / --task: one of vLLM's choices (config/model.py RunnerOption, ConvertOption, 0.11's
    TaskOption), lower-cased; ``auto`` is vLLM's default, kept as None (not named)."""
    v = val.strip().lower()
    if v not in _CHOICES[kind]:
        raise ServeInputError(f"{flag} must be one of {', '.join(_CHOICES[kind])} (got {val!r})")
    return None if v == "auto" else v


def _convert(val: str, kind: str, flag: str) -> Any:
    if kind in _CHOICES:
        return _choice(val, kind, flag)
    if kind == "mm":
        return parse_mm_limits(val, flag)
    if kind == "connector":
        return _connector(val)
    if kind in ("size_auto", "ctx0", "ngl", "int_or_off"):
        return _special(kind, val, flag)
    if kind == "size":
        return parse_size(val, flag)
    if kind == "int":
        return _int(val, flag)
    if kind == "frac":
        return _float(val, flag, 0.0, 1.0)
    if kind == "posfloat":
        return _float(val, flag, 0.0, float("inf"))
    return val


_UNQUANTIZED = ("f16", "bf16", "f32")


def ollama_library_tag(model: str | None) -> str | None:
    """`ollama run llama2` pulls llama2:latest, the library's default size: the name with that size's tag
    (engines.yaml ollama.library_default_tags); any other name unchanged."""
    if not model or ":" in model or "/" in model:
        return model
    size = engine_value("ollama", "library_default_tags").get(model.lower())
    return f"{model}:{size}" if size else model


def _ollama_architecture(model: str | None) -> str:
    """The GGUF architecture an Ollama library name stands for, as a key of the lists in engines.yaml (``qwen3:8b`` ->
    qwen3, ``gpt-oss:20b`` -> gptoss); letters and digits only."""
    name = (model or "").rsplit("/", 1)[-1].split(":", 1)[0].lower()
    name = engine_value("ollama", "kv_cache_type")["library_architectures"].get(name, name)
    return re.sub(r"[^a-z0-9]", "", name)


def llama_cpp_build(spec: ServeSpec) -> int | None:
    """The llama.cpp build a launch line or --engine-version names ("b7342", "b5622 (97340b4c)", llama-server
    --version's "version: 7342 (96ac5a2)", a bare "7342", an image tag "server-cuda-b5000"); 0 for an ik_llama.cpp fork
    build (its numbers are its own: older than every mainline boundary); None when unnamed (the current build)."""
    v = (spec.engine_version or "").lower()
    if "ik_llama" in v:
        return 0
    m = re.search(r"(?:\bb|version:?\s*|^)(\d{3,6})\b", v.strip())
    return int(m.group(1)) if m else None


def gguf_cache_types(spec: ServeSpec, architecture: str | None = None) -> tuple[str, str, str | None]:
    """The K and V cache types llama.cpp / Ollama actually allocate for this launch, and a note when the requested
    type is not the one used (None: as asked). Raises ServeInputError when the engine will not start with it
    (llama.cpp: a quantized V cache with flash attention off). ``architecture``: the model's own (a GGUF header's
    general.architecture, a config's model_type) where known; else read from an Ollama library name. Rules and
    sources: engines.yaml llama.cpp.flash_attention and ollama.kv_cache_type."""
    from sparkops.core.releases import at_least, release

    k = (spec.cache_type_k or "f16").lower()
    v = (spec.cache_type_v or "f16").lower()  # llama.cpp: -ctv defaults to f16 whatever -ctk (common/common.h)
    if k in _UNQUANTIZED and v in _UNQUANTIZED:
        return k, v, None
    fa = spec.flash_attn
    if spec.engine == "ollama":
        d = engine_value("ollama", "kv_cache_type")
        ver = release(spec.engine_version)
        if not at_least(ver, str(d["needs_flash_attention_until"])):
            if fa is None:  # unset: on by default for the listed architectures (0.11.8 on), else off
                rows = [r for r in d["default_flash_attention_by_architecture"] if at_least(ver, str(r["since"]))]
                listed = max(rows, key=lambda r: release(str(r["since"])))["architectures"] if rows else []
                arch = re.sub(r"[^a-z0-9]", "", architecture.lower()) if architecture else _ollama_architecture(spec.model)
                fa = "on" if arch in {re.sub(r"[^a-z0-9]", "", a) for a in listed} else "off"
            if fa == "off":
                return "f16", "f16", (f"OLLAMA_KV_CACHE_TYPE={k} is not used: Ollama {spec.engine_version} passes a "
                                      "quantized cache type only with flash attention on (OLLAMA_FLASH_ATTENTION=1, or "
                                      "on by default for this model's architecture in later releases) and keeps f16; "
                                      "the KV cache is planned at f16")
            return k, v, None
        fa = fa or "auto"  # 0.30 on: llama-server --flash-attn on|off|auto (auto where the GPU supports it)
    else:
        d = engine_value("llama.cpp", "flash_attention")
        build = llama_cpp_build(spec)
        if fa is None and build is not None and 0 < build < int(d["auto_since_build"]) and v not in _UNQUANTIZED:
            # an older build's -fa is a switch, off unless named: a warning, not a refusal (the boundary is
            # approximate and forks number their builds their own way)
            return k, v, (f"llama.cpp build {build} is older than the -fa auto default (about b{d['auto_since_build']}): "
                          f"such builds keep flash attention off unless -fa is named, and refuse a quantized V cache "
                          f"({v}) without it; add -fa (this plan assumes flash attention is on)")
        fa = fa or str(d["default"])
    if fa == "off" and v not in _UNQUANTIZED:
        what = "OLLAMA_FLASH_ATTENTION=0" if spec.engine == "ollama" else "-fa off"
        raise ServeInputError(f"{spec.engine} will not start: a quantized V cache ({v}) with flash attention off "
                              f"({what}) is refused by llama.cpp (src/llama-context.cpp: 'quantized V cache was "
                              "requested, but this requires Flash Attention'); turn flash attention on or auto, or "
                              "keep the V cache f16")
    return k, v, None


def engine_fields(engine: str, *, context: int | None = None, cache_type: str | None = None,
                  slots: int | None = None, kv_unified: bool | None = None) -> dict[str, Any]:
    """The ServeSpec fields that hold "context per request" and "KV cache type" for this engine: the one mapping
    the CLI's --max-model-len / --kv-cache-dtype, the MCP tool's max_model_len / kv_cache_dtype and free text's
    "32k context" go through. vLLM, SGLang and TensorRT-LLM: max_model_len / kv_cache_dtype; llama.cpp and Ollama:
    ctx_size (-c, num_ctx) and cache_type_k = cache_type_v (-ctk/-ctv, OLLAMA_KV_CACHE_TYPE), where ``auto`` is the
    engine's default (f16). llama.cpp's -c is every slot's cells together: with ``slots`` given (-np) and no unified
    cache each slot holds -c/np (engines.yaml llama.cpp.slots), so a context per request is -c = context x slots;
    Ollama's num_ctx is already per sequence. Only what is given is returned."""
    out: dict[str, Any] = {}
    gguf = engine in ("llama.cpp", "ollama")
    if context is not None:
        per_slot = engine == "llama.cpp" and slots is not None and slots > 1 and not kv_unified
        out["ctx_size" if gguf else "max_model_len"] = context * slots if per_slot and slots else context
    if cache_type is not None:
        if gguf:
            t = cache_type.strip().lower()
            out["cache_type_k"] = out["cache_type_v"] = None if t == "auto" else t
        else:
            out["kv_cache_dtype"] = cache_type
    return out


def looks_like_command(text: str) -> bool:
    """True when free text is a launch line rather than a description. SGLang's launches are `python -m
    sglang.launch_server` and `sglang serve`; the word "sglang" in a sentence ("serve qwen3-8b with sglang 64k
    context") names the engine of a description, as "vllm" does (the command parser would find no launch there)."""
    low = text.lower()
    return bool(re.search(r"(^|\s|/)(vllm\s+serve|sglang(\.launch_server|\s+(serve|launch_server))\b|llama-server|"
                          r"llama-cli|ollama\s+(run|serve)|trtllm-serve)", low)
                or "vllm.entrypoints" in low or any(VLLM_IMAGE.match(t) or SGLANG_IMAGE.match(t) for t in text.split()))


# ------------------------------------------------------------------ model names and formats

_FORMAT_WORDS = [  # (pattern in the model name, format); first match wins
    (r"nvfp4|fp4(?!\d)", "nvfp4"), (r"mxfp4", "mxfp4"), (r"(^|[-_./])fp8|float8", "fp8"),
    (r"w8a8|int8|[-_]8bit", "int8"), (r"awq", "awq"), (r"gptq|int4|w4a16|[-_]4bit", "gptq"),
]
GGUF_TYPE = re.compile(r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|F16|BF16|MXFP4))(?![A-Za-z0-9])", re.IGNORECASE)


def format_from_name(model: str | None, quantization: str | None = None) -> str | None:
    """The stored weight format a name or ``--quantization`` says (None: nothing said)."""
    if quantization:
        q = quantization.lower()
        if q == "modelopt" and model and re.search(r"nvfp4|[-_]fp4", model.lower()):
            # vLLM takes FP8 vs NVFP4 from the checkpoint's ModelOpt quant_algo, not from the flag
            # (config: quant_algo "NVFP4" -> quant_method "modelopt_fp4"); the name is what says which here
            return "nvfp4"
        if q != "compressed-tensors":
            return {"modelopt": "fp8", "modelopt_fp4": "nvfp4", "awq_marlin": "awq", "gptq_marlin": "gptq",
                    "bitsandbytes": "int4", "fp8": "fp8", "mxfp4": "mxfp4"}.get(q, q)
        # compressed-tensors is a container: vLLM reads the scheme (NVFP4, FP8, W4A16, W8A8) from the checkpoint's
        # quantization_config, so the flag says nothing and the name is what says which here
    if not model:
        return None
    low = model.lower()
    for pat, fmt in _FORMAT_WORDS:
        if re.search(pat, low):
            return fmt
    return None


def gguf_type_from_name(name: str | None) -> str | None:
    """``Q4_K_M`` from ``Qwen3-30B-A3B-UD-Q4_K_XL.gguf`` or ``qwen3:30b-a3b-q4_K_M`` (upper-cased)."""
    if not name:
        return None
    m = GGUF_TYPE.search(name.rsplit("/", 1)[-1])
    if not m:
        return None
    t = m.group(1).upper().removeprefix("UD-")
    return {"Q4_K_XL": "Q4_K_M", "Q5_K_XL": "Q5_K_M", "Q6_K_XL": "Q6_K", "Q8_K_XL": "Q8_0", "Q3_K_XL": "Q3_K_M",
            "Q2_K_XL": "Q2_K", "IQ2_XXS": "IQ2_XXS"}.get(t, t)


_QUANT_SUFFIX = re.compile(
    r"([-_.](fp8|nvfp4|mxfp4|awq|gptq(-int[48])?|int[48]|w8a8|w4a16|quantized(\.[a-z0-9]+)?|gguf|"
    r"\d+bit|instruct-2507|thinking-2507|2507|dynamic|mtp|ud-[a-z0-9_]+|i?q\d(_[a-z0-9]+)*|f16|bf16|qat|unquantized))+$",
    re.IGNORECASE)

_OLLAMA_FAMILY = {"gemma3": "gemma-3", "gemma2": "gemma-2", "llama3.1": "llama-3.1", "llama3.2": "llama-3.2",
                  "llama3.3": "llama-3.3", "qwen2.5": "qwen2.5", "qwen3": "qwen3", "phi4": "phi-4", "phi3": "phi-3",
                  "gpt-oss": "gpt-oss", "mistral": "mistral-7b-v0.3", "qwen3-coder": "qwen3-coder"}


def candidate_names(model: str) -> list[str]:
    """Names to try in the catalogs, most specific first: the name, without its quantization suffix,
    an Ollama ``family:tag`` spelled the catalog's way, a GGUF file name without ``.gguf``."""
    out = [model]
    base = model.rsplit("/", 1)[-1]
    if base.lower().endswith(".gguf"):
        base = base[:-5]
        out.append(base)
    base = re.sub(r"-\d{5}-of-\d{5}$", "", base)
    stripped = _QUANT_SUFFIX.sub("", base)
    if stripped and stripped != base:
        out.append(stripped)
        if "/" in model:
            out.append(model.rsplit("/", 1)[0] + "/" + stripped)
    if ":" in base:
        fam, tag = base.split(":", 1)
        fam = _OLLAMA_FAMILY.get(fam.lower(), fam.lower())
        size = tag.split("-")[0]
        rest = "-".join(tag.split("-")[1:])
        if re.fullmatch(r"a\d+b", rest.split("-")[0] if rest else ""):
            size = f"{size}-{rest.split('-')[0]}"
        out.append(f"{fam}-{size}")
        if fam == "phi-4":
            out.append("phi-4")
    if re.search(r"qwen3-coder-30b-a3b", model, re.IGNORECASE):
        out.append("qwen3-coder-30b-a3b")
    seen: set[str] = set()
    return [n for n in out if not (n in seen or seen.add(n))]


# free text that asks for a pooling server: "as an embedding server", "an embeddings endpoint", "a reranker service"
# (not any mention: "no embeddings", "embeddings come from bge-m3", "to rerank results" describe a chat server)
POOLING_WORDS = re.compile(r"\b(embeddings?|embedder|encoder|rerank(?:er|ing)?)[ -](server|endpoint|service|model)\b|"
                           r"\bas an? (embedder|reranker)\b|^\W*an? (embedding|embeddings|reranker)\b|"
                           r"\bserv(?:e|ing) \S+ (embeddings)\b")


def catalog_model_in_text(text: str) -> str | None:
    """The first word of free text that is a serving-catalog model's id, name, Hugging Face id or alias
    (engines.yaml models), as written: the workload reader finds a model only by a size in its name (8b, 70b), and
    embedding / reranker names carry none (bge-m3, BAAI/bge-reranker-v2-m3)."""
    names = {n.lower() for e in engines_knowledge().models for n in (e.id, e.name, *e.hf_ids, *e.aliases)}
    for word in re.findall(r"[\w./:-]+", text):
        if word.strip(".,:;").lower() in names:
            return word.strip(".,:;")
    return None


def spec_from_text(text: str, *, engine: str | None = None) -> ServeSpec:
    """A pasted launch line, or free text ("serve qwen3-30b-a3b with vllm 32k context 8 users fp8")."""
    if looks_like_command(text):
        return parse_command(text, engine=engine)
    from sparkops.facts.workload import parse_workload

    w = parse_workload(text)
    eng = engine or next((c for c in w.components if c in ENGINES or c in ("llama.cpp",)), None) or "vllm"
    users = None
    m = re.search(r"(\d+)\s*(users|requests|concurrent|parallel|seqs|sequences)\b", text.lower())
    if m:
        users = int(m.group(1))
    ctx = None
    low = text.lower()
    for pat in (r"(\d+(?:\.\d+)?)\s*(k)\s*(?:context|ctx|tokens)\b",
                r"(?:context|ctx|max[-_ ]model[-_ ]len|context[-_ ]length)\s*[:=]?\s*(\d+(?:\.\d+)?)\s*(k?)\b",
                r"\b(\d+(?:\.\d+)?)(k)\b"):
        m = re.search(pat, low)
        if m:
            val = int(float(m.group(1)) * (1024 if m.group(2) else 1))
            if val >= 128:
                ctx = val
                break
    quant = {"nvfp4": "nvfp4", "mxfp4": "mxfp4", "fp8": "fp8", "int8": "int8", "int4": "awq"}.get(w.precision or "")
    model = w.model or catalog_model_in_text(text)  # a serving-catalog name without a size in it (bge-m3)
    kw: dict[str, Any] = {"engine": eng, "model": model, "tensor_parallel": w.tensor_parallel or 1,
                          "concurrency": users or w.batch_size, "quantization": quant}
    if eng == "vllm":
        pooled = POOLING_WORDS.search(low)
        if pooled:  # "an embedding server", "a reranker": vLLM's --runner pooling (a reranker: --convert classify)
            kw["runner"] = "pooling"
            kw["convert"] = "classify" if "rerank" in pooled.group(0) else "embed"
    gguf_slots = users if eng in ("llama.cpp", "ollama") and users else None
    kw.update(engine_fields(eng, context=ctx or w.seq_len, slots=gguf_slots))
    if gguf_slots:
        kw["parallel"] = gguf_slots
    if model is None:
        # a size alone ("70b") is not a model to serve: the shape decides the KV cache
        raise ServeInputError("name the model to serve (e.g. qwen3-30b-a3b, meta-llama/Llama-3.1-8B-Instruct, "
                              "or a GGUF file with --gguf)")
    return ServeSpec(**kw)


def with_installed(spec: ServeSpec, where: str, distributions: dict[str, str]) -> tuple[ServeSpec, str | None]:
    """The spec with what the engine's own environment shows: for vLLM, its installed version (unless the user
    named one) and whether FlashInfer is installed beside it (which decides the profile's sampler). Read only when
    the engine itself is installed there: FlashInfer in another environment says nothing. Returns the spec and a
    note for the plan (None: nothing to say)."""
    if spec.engine != "vllm":
        return spec, None
    from sparkops.checks.base import canonical_name

    dists = {canonical_name(k): v for k, v in distributions.items()}
    version = dists.get("vllm")
    if not version:
        return spec, (f"vLLM is not installed in {where}: its version and FlashInfer were not read from there "
                      "(name the interpreter vLLM runs in with --python, or its release with --engine-version)")
    update: dict[str, Any] = {"installed_in": where,
                              "flashinfer_installed": any(k in dists for k in ("flashinfer-python", "flashinfer"))}
    if not spec.engine_version:
        update["engine_version"] = version
    return spec.model_copy(update=update), None
