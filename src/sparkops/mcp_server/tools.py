"""The MCP tools as plain functions over :mod:`sparkops.api`: arguments in, the CLI's JSON out.

Nothing here imports the MCP SDK. The server registers these functions as they are: their
signatures, with the ``Field`` descriptions, become the tools' argument schemas, and their
docstrings the descriptions an agent reads. Each wraps what the library returns in the matching
command's result (:mod:`sparkops.commands`) and returns its JSON, exactly what
``spark-ops ... --json`` prints, as a dict. Bad input raises :class:`~sparkops.core.errors.InputError`
with the CLI's message; the server turns that into an MCP tool error.

Read-only by design: no ``setup --exec``, no ``pin``, no ``thermal start``, no ``--container`` (a
``docker run`` may pull an image). A file is written only where a ``*_path`` argument says so.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from sparkops.core.errors import InputError

MAX_BUDGET_S = 600.0  # one tool call never holds the server longer than this (plus a margin)

# Two live collections at once would measure each other (memory, GPU counters, processes).
_live = threading.Lock()

# ---- argument types shared by several tools (the description is what the agent reads)
FactsPath = Annotated[str | None, Field(
    description="A recorded facts snapshot (JSON from collect_facts or `spark-ops collect -o`) to judge "
                "instead of this machine. Relative paths resolve against the server's working directory.")]
Python = Annotated[str | None, Field(
    description="The interpreter the job trains with, e.g. /home/me/.venv/bin/python "
                "(default: python3 on PATH, else the tool's own).")]
Offline = Annotated[bool, Field(description="No network: G8 (stale playbooks) uses its cache or skips.")]
HubOffline = Annotated[bool, Field(description="No network: a Hugging Face id outside the catalog and local caches is "
                                               "not read from the Hub (as HF_HUB_OFFLINE=1).")]
BudgetS = Annotated[float | None, Field(
    gt=0, le=MAX_BUDGET_S,
    description="Deadline in seconds for the whole collection; a probe still running then is reported as "
                "timed out (default 60).")]
ConfigPaths = Annotated[list[str] | None, Field(
    description="Files or directories to scan for parallelism settings (G10). Default: the server's "
                "working directory.")]


def _path(value: str) -> Path:
    return Path(value).expanduser()


def default_budget_s() -> float:
    """The whole-collection deadline when the caller gives none (the CLI's default)."""
    from sparkops import api

    return api.collect_options().budget_s


def _collect_options(python: str | None, quick: bool, config_paths: list[str] | None, offline: bool,
                     budget_s: float | None):
    """The CLI's collection options (``spark-ops preflight/collect``: :func:`sparkops.api.collect_options`),
    without the container."""
    from sparkops import api

    paths = tuple(_path(p) for p in config_paths) if config_paths else ()
    return api.collect_options(quick=quick, python=python, config_paths=paths, offline=offline, budget_s=budget_s)


def _write(path: str, what: str, text_writer) -> None:  # noqa: ANN001 - a callable taking the Path
    try:
        text_writer(_path(path))
    except OSError as exc:
        raise InputError(f"cannot write the {what} to {path}: {exc.strerror or exc}") from exc


def preflight(
    workload: Annotated[str | None, Field(
        description='The planned job in free text, e.g. "qlora llama-3.1-70b seq 8192 bs 1 nvfp4 vllm" '
                    "(the fields below override what it says).")] = None,
    method: Annotated[str | None, Field(description="full | lora | qlora | inference")] = None,
    model: Annotated[str | None, Field(description="Model name, e.g. llama-3.1-70b.")] = None,
    params_b: Annotated[float | None, Field(gt=0, description="Model size, billions of parameters.")] = None,
    seq_len: Annotated[int | None, Field(gt=0, description="Sequence length.")] = None,
    batch_size: Annotated[int | None, Field(gt=0, description="Micro-batch size.")] = None,
    precision: Annotated[str | None, Field(description="nvfp4 | fp8 | bf16 | fp16 | ...")] = None,
    tp: Annotated[int | None, Field(gt=0, description="Planned tensor-parallel size (G10).")] = None,
    nodes: Annotated[int | None, Field(gt=0, description="Planned number of nodes (Sparks).")] = None,
    components: Annotated[list[str] | None, Field(
        description="Stack components the run uses: vllm, unsloth, trl, sglang, ...")] = None,
    peak_gb: Annotated[float | None, Field(
        gt=0, description="Estimated peak memory of the workload in GB, for the G3 fit test (default: the "
                          "memory planner's estimate when the workload names a fine-tune).")] = None,
    facts_path: FactsPath = None,
    python: Python = None,
    quick: Annotated[bool, Field(
        description="Static target probe only: no torch import (faster, less certain).")] = False,
    offline: Offline = False,
    budget_s: BudgetS = None,
    config_paths: ConfigPaths = None,
    matrix_path: Annotated[str | None, Field(description="A newer stack-matrix YAML file.")] = None,
    report_path: Annotated[str | None, Field(
        description="Also write env-report.json here (default: no file is written).")] = None,
) -> dict[str, Any]:
    """Is this machine ready for the job? Judges the ten DGX Spark gotchas G1..G10 on this machine (or on
    a recorded snapshot with facts_path) and returns env-report.json, exactly as `spark-ops preflight
    --json` prints it: verdict (ready | ready-with-warnings | blocked), checks (G1..G10 -> "status:
    detail"), findings with evidence and fixes, the blocking list, identity, headroom_gb. Cite the
    G-numbers. Live collection is bounded by budget_s; the full probe imports torch in the target
    interpreter (quick skips that). Changes nothing on the machine; writes a file only with report_path."""
    from sparkops import api
    from sparkops.facts.workload import METHODS, merge

    if method is not None and method.lower() not in METHODS:
        raise InputError(f"unknown method {method!r}; known: full, lora, qlora, inference")
    wl = merge(workload, method=method, model=model, params_b=params_b, seq_len=seq_len,
               batch_size=batch_size, precision=precision, tensor_parallel=tp, nodes=nodes,
               components=components or [], estimated_peak_gb=peak_gb)
    kb = api.knowledge(_path(matrix_path) if matrix_path else None)
    opts = _collect_options(python, quick, config_paths, offline, budget_s)
    if facts_path:
        rep = api.preflight(facts=_path(facts_path), opts=opts, workload=wl, kb=kb)
    else:
        with _live:
            rep = api.preflight(facts=None, opts=opts, workload=wl, kb=kb)
    if report_path:
        _write(report_path, "report", lambda p: api.write_report(rep, p))
    from sparkops.commands.preflight import ReportResult

    return ReportResult(rep).data()


def explain(
    gotcha: Annotated[str, Field(
        description='A G-number ("G1".."G10"; "g3" and "3" work too) or "identity".')],
) -> dict[str, Any]:
    """A gotcha's catalog entry, as `spark-ops explain` shows it: id, title, symptom, cause, what is
    checked, the fix, known problems, references, last_verified. Use it to explain a G-number that a
    preflight or diagnose result cites."""
    from sparkops.commands.explain import explain_result

    try:
        return explain_result(gotcha).data()
    except KeyError as exc:
        raise InputError(str(exc.args[0])) from exc


def diagnose(
    text: Annotated[str, Field(
        max_length=4_000_000,
        description="An error log, a traceback or a described symptom, pasted as text.")],
    facts_path: Annotated[str | None, Field(
        description="A recorded facts snapshot whose facts confirm or rule out findings "
                    "(default: the text alone).")] = None,
) -> dict[str, Any]:
    """Which gotcha is this? Maps an error log, traceback or symptom to its G-number, as `spark-ops
    diagnose --json` does: findings best first, each with confidence, the evidence lines (numbered as
    given), why they point there, and the catalog fix. No findings means none of the ten matched."""
    from sparkops import api

    try:
        from sparkops.diagnose import diagnose_text
    except ImportError as exc:
        raise InputError(f"diagnose is not available in this build of spark-ops ({exc})") from exc
    from sparkops.commands.diagnose import DiagnosesResult

    facts = api.load_facts(_path(facts_path)) if facts_path else None
    return DiagnosesResult([diagnose_text(text, source="-", facts=facts)]).data()[0]


def plan(
    model: Annotated[str | None, Field(
        description="Catalog name, alias or Hugging Face id, e.g. llama-3.1-70b, Qwen/Qwen2.5-7B (an id outside the "
                    "catalog and local caches is read from the Hub: config.json and safetensors headers, no download; "
                    "not with HF_HUB_OFFLINE=1).")] = None,
    config: Annotated[str | None, Field(
        description="A config.json, a model folder, or an HF id (the local HF cache, else the Hub).")] = None,
    workload: Annotated[str | None, Field(
        description='Free text, e.g. "qlora 70b seq 8192 bs 1 gc".')] = None,
    method: Annotated[str | None, Field(description="full | lora | qlora")] = None,
    framework: Annotated[str | None, Field(
        description="hf | trl | unsloth | torchtune | axolotl | litgpt | llama-factory "
                    "(their real defaults)")] = None,
    loop: Annotated[str | None, Field(
        description="trainer (transformers Trainer: autocast, its optimizer) | plain (a hand-written loop); "
                    "default: the framework's (hf/trl/axolotl/llama-factory/unsloth: trainer)")] = None,
    grad_accum: Annotated[int | None, Field(gt=0, description="Gradient accumulation steps.")] = None,
    dtype: Annotated[str | None, Field(
        description="Parameter dtype: bf16 | fp16 | fp32 (fp32 master + autocast).")] = None,
    optimizer: Annotated[str | None, Field(
        description="adamw_torch | adamw_torch_fused | adamw_8bit | paged_adamw_32bit | sgd | ...")] = None,
    batch: Annotated[int | None, Field(gt=0, description="Micro-batch size.")] = None,
    seq_len: Annotated[int | None, Field(gt=0, description="Sequence / packing length.")] = None,
    grad_checkpointing: Annotated[bool | None, Field(
        description="Gradient checkpointing (default: the framework's).")] = None,
    attention: Annotated[str | None, Field(description="sdpa | flash | eager")] = None,
    loss: Annotated[str | None, Field(description="hf | hf_legacy | chunked | fused | qwen_v1")] = None,
    lora_r: Annotated[int | None, Field(gt=0, description="LoRA rank.")] = None,
    lora_targets: Annotated[list[str] | None, Field(
        description='LoRA target modules: ["all-linear"] or ["q_proj", "v_proj", ...].')] = None,
    lora_dropout: Annotated[float | None, Field(ge=0, lt=1, description="LoRA dropout.")] = None,
    quant: Annotated[str | None, Field(description="QLoRA base storage: nf4-dq (default) | nf4")] = None,
    expandable_segments: Annotated[bool, Field(
        description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is set.")] = False,
    target: Annotated[str | None, Field(
        description="Plan for a machine you are not on: dgx-spark, h200, ...")] = None,
    budget_gb: Annotated[float | None, Field(
        gt=0, lt=100_000, description="An explicit budget in GB.")] = None,
    facts_path: Annotated[str | None, Field(
        description="Take the budget from a recorded facts snapshot. Without budget_gb, target or "
                    "facts_path, the budget is this machine's memory, collected now.")] = None,
    offline: HubOffline = False,
) -> dict[str, Any]:
    """Will this fine-tune fit in memory? The memory planner, as `spark-ops plan --json` prints it: the
    itemised peak estimate (GB = 10^9 bytes) per phase, the budget and where it came from, the verdict
    (fits | tight | does-not-fit), the largest sequence length / batch that fits, and the OOM ladder of
    changes that would make it fit. Needs a model (or config, or a size in the workload text)."""
    from sparkops import api

    targets = [t.strip() for item in lora_targets or () for t in item.split(",") if t.strip()] or None
    run = dict(method=method, framework=framework, loop=loop, grad_accum=grad_accum, dtype=dtype, optimizer=optimizer,
               batch=batch,
               seq_len=seq_len, grad_checkpointing=grad_checkpointing, attention=attention, loss=loss,
               lora_r=lora_r, lora_targets=targets, lora_dropout=lora_dropout, quant=quant,
               expandable_segments=expandable_segments)
    live = budget_gb is None and target is None and not facts_path  # the budget is this machine's, now
    with _live if live else contextlib.nullcontext():
        res = api.plan(model=model, config=config, workload=workload, target=target, budget_gb=budget_gb,
                       facts=_path(facts_path) if facts_path else None, offline=offline, **run)
    from sparkops.commands.plan import PlanOutcome

    return PlanOutcome(res).data()


def _log_arg(value: str | None) -> str | Path | None:
    """A start-up log given to an MCP tool: its text, or a path to it. A string that names an existing file is a path,
    whatever its name looks like (``/tmp/x/vllm-DEBUG.log``). Text is told from a path without touching the
    filesystem only where the string cannot be a path: one with a newline, one of PATH_MAX (4096) characters or
    more, or one with a path part longer than NAME_MAX (255) (Path.is_file raises 'File name too long' on such a
    line); anything else is looked up, and an existing file is read. A missing file that is written as a path (one
    word with a "/" in it, or ending in .log / .txt / .out) is a path too, so the tool says it cannot read it, as the
    CLI does; any other string is the log's text."""
    if not value or "\n" in value or len(value) >= 4096 or any(len(p) > 255 for p in value.split("/")):
        return value
    try:
        path = Path(value).expanduser()
        if path.is_file():
            return path
    except (OSError, ValueError):  # any other reason it is no file name here: the log's text
        return value
    one_word = value.strip() == value and " " not in value
    return path if one_word and ("/" in value or value.lower().endswith((".log", ".txt", ".out"))) else value


def plan_serve(
    workload: Annotated[str | None, Field(
        description='A launch line as the user would type it ("vllm serve Qwen/Qwen3-30B-A3B-FP8 --max-model-len '
                    '32768 --gpu-memory-utilization 0.5", "llama-server -m x.gguf -c 65536 -np 4", '
                    '"OLLAMA_NUM_PARALLEL=2 ollama run gemma3:27b") or free text ("serve qwen3-8b with vllm 32k '
                    'context 8 users").')] = None,
    model: Annotated[str | None, Field(description="Model id or catalog name (overrides the text's); a Hugging Face "
                                                   "id outside the catalog is read from the Hub (config.json and "
                                                   "safetensors headers), not with HF_HUB_OFFLINE=1.")] = None,
    engine: Annotated[str | None, Field(description="vllm | sglang | llama.cpp | ollama | trtllm")] = None,
    gguf_path: Annotated[str | None, Field(description="A local GGUF file: its header gives exact weight bytes.")] = None,
    max_model_len: Annotated[int | None, Field(gt=0, description="Context per request (vLLM/SGLang; llama.cpp -c, Ollama num_ctx); wins over the line's own flag.")] = None,
    gpu_memory_utilization: Annotated[float | None, Field(gt=0, le=1, description="vLLM's share of TOTAL memory.")] = None,
    kv_cache_dtype: Annotated[str | None, Field(description="auto | fp8 (vLLM/SGLang); f16 | q8_0 | q4_0 (llama.cpp -ctk/-ctv, OLLAMA_KV_CACHE_TYPE); wins over the line's own flag.")] = None,
    concurrency: Annotated[int | None, Field(gt=0, description="Requests at full length wanted at once.")] = None,
    engine_version: Annotated[str | None, Field(
        description="The vLLM release to model (0.10.1; v0 for the V0 engine). Default: the one installed in "
                    "`python`, the launch line's vllm/vllm-openai image tag, else the newest modelled.")] = None,
    python: Annotated[str | None, Field(
        description="The interpreter vLLM runs in: its installed vLLM version and FlashInfer decide the terms "
                    "that change by release.")] = None,
    beside: Annotated[list[str] | None, Field(
        description='Other jobs on the same memory pool: launch lines or fine-tunes ("qlora llama-3.1-8b seq 4096").')] = None,
    target: Annotated[str | None, Field(description="Plan for a machine you are not on: dgx-spark, h200, h100.")] = None,
    facts_path: FactsPath = None,
    offline: HubOffline = False,
    from_log: Annotated[str | None, Field(
        description="A real vLLM start-up log of this model on this machine: a file path, or the log's text. The "
                    "plan carries what that start measured to this launch line (result 'calibration'), or says "
                    "why not.")] = None,
    from_log_line: Annotated[str | None, Field(
        description="The `vllm serve ...` launch line of that log (wins over its printed 'non-default args'; must "
                    "agree with what the log printed).")] = None,
    from_log_same_machine: Annotated[bool, Field(
        description="The log is of this machine, where it prints neither the GPU's device total nor its name "
                    "(else the calibration is refused).")] = False,
) -> dict[str, Any]:
    """Will this model serve here, with how much KV cache, beside what else? As `spark-ops plan --serve --json`
    prints it (GiB): weights by format, KV bytes per token, the engine's own accounting (vLLM's share of total
    memory and its start-up free-memory check, SGLang's mem_fraction_static, llama.cpp -c/-np, Ollama
    num_ctx x parallel), the KV pool in tokens, requests that fit at once, the verdict (fits | tight |
    does-not-fit) and what to change. Without target or facts_path the machine is this one, now."""
    from sparkops import api

    live = target is None and not facts_path
    with _live if live else contextlib.nullcontext():
        res = api.serve_plan(workload=workload, model=model, engine=engine, gguf=gguf_path, beside=tuple(beside or ()),
                             target=target, facts=_path(facts_path) if facts_path else None,
                             max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                             kv_cache_dtype=kv_cache_dtype, concurrency=concurrency, engine_version=engine_version,
                             python=python, offline=offline, from_log=_log_arg(from_log),
                             from_log_line=from_log_line, from_log_same_machine=from_log_same_machine)
    from sparkops.commands.plan import ServeOutcome

    return ServeOutcome(res).data()


def collect_facts(
    quick: Annotated[bool, Field(
        description="Static target probe only, no torch import (default). False: import torch in the target "
                    "interpreter too (seconds, more facts).")] = True,
    python: Python = None,
    offline: Offline = False,
    budget_s: BudgetS = None,
    config_paths: ConfigPaths = None,
    output_path: Annotated[str | None, Field(
        description="Also save the snapshot here, for a later facts_path or a bug report "
                    "(default: no file is written).")] = None,
) -> dict[str, Any]:
    """This machine's facts snapshot, as `spark-ops collect` writes it: GPU, driver, memory, host, target
    interpreter and packages, CUDA libraries, processes, configs, with each probe's outcome. Secrets are
    removed before anything is stored (token/key/password variables masked, credentials in URLs and
    command lines masked). Every probe is bounded by budget_s; one that cannot run says why."""
    from sparkops import api

    opts = _collect_options(python, quick, config_paths, offline, budget_s)
    with _live:
        facts = api.collect(opts)
    if output_path:
        _write(output_path, "snapshot", lambda p: api.save_facts(facts, p))
    from sparkops.commands.collect import FactsResult

    return FactsResult(facts).data()


def postmortem(
    log_paths: Annotated[list[str] | None, Field(
        description="This tool's sampler logs, or folders holding thermal-*.csv / soak-*.csv, whose last "
                    "rows tell heat before an unclean end (default: the server's working directory).")] = None,
) -> dict[str, Any]:
    """What ended the last run? As `spark-ops postmortem --json`: reads (read-only, bounded) the previous
    boot's kernel journal, /var/log/kern.log*, pstore, `last -x` and this tool's sampler logs, and names the
    cause with its G-number (thermal shutdown G4, OOM killer G3 with the victim and its size, the driver's
    out-of-memory wedge G3, hardware vs application Xids, kernel panic, an unclean end with no log), with
    the sources it could not read and why."""
    from sparkops import api
    from sparkops.commands.postmortem import PostmortemResult
    from sparkops.postmortem import run

    return PostmortemResult(run.postmortem(log_paths=tuple(_path(p) for p in log_paths or [str(Path.cwd())]),
                                           kb=api.knowledge())).data()


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the server registers it."""

    fn: Any
    title: str
    open_world: bool  # reads live state of this machine, or the network (G8's playbook check)
    writes_on_request: bool  # writes a file, only where the caller names one
    collects: bool  # may run a live collection: the server's time bound adds the collection budget


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(preflight, "Preflight G1-G10 (env-report.json)",
             open_world=True, writes_on_request=True, collects=True),
    ToolSpec(explain, "Explain a G-number", open_world=False, writes_on_request=False, collects=False),
    ToolSpec(diagnose, "Diagnose an error log", open_world=False, writes_on_request=False, collects=False),
    ToolSpec(plan, "Plan a fine-tune's memory", open_world=True, writes_on_request=False, collects=True),
    ToolSpec(plan_serve, "Plan a server's memory and KV cache", open_world=True, writes_on_request=False, collects=True),
    ToolSpec(collect_facts, "Collect this machine's facts",
             open_world=True, writes_on_request=True, collects=True),
    ToolSpec(postmortem, "What ended the last run (post-mortem)",
             open_world=True, writes_on_request=False, collects=False),
)
