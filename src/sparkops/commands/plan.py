"""``spark-ops plan`` (and ``plan --serve``): the memory planner's front end; heavy imports inside the command."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands.contract import OutputFormat, Result, emit, format_option

if TYPE_CHECKING:
    from sparkops.planner.plan import PlanResult
    from sparkops.planner.serve import ServePlanResult

EXIT = {"fits": 0, "tight": 1, "does-not-fit": 2}


class PlanOutcome(Result["PlanResult"]):
    """A fine-tune's plan: the itemised table or JSON; exit 0 fits, 1 tight, 2 does not fit."""

    model: PlanResult

    schema = "plan"

    def exit_code(self) -> int:
        return EXIT[self.model.verdict]

    def text(self, fmt: OutputFormat) -> str:
        from sparkops.planner.render import render_plan

        return render_plan(self.model)


class ServeOutcome(Result["ServePlanResult"]):
    """A server's plan (``--serve``): table or JSON; exit 0 fits, 1 tight, 2 does not fit."""

    model: ServePlanResult

    schema = "serve"

    def exit_code(self) -> int:
        return EXIT[self.model.verdict]

    def text(self, fmt: OutputFormat) -> str:
        from sparkops.planner.serve_render import render_serve

        return render_serve(self.model)


FormatOpt = format_option(*PlanOutcome.formats)


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        model: Annotated[str | None, typer.Option("--model", "-m", help="Catalog name, alias or HF id (llama-3.1-70b, "
                                                  "Qwen/Qwen3-8B: outside the catalog and local caches, read from the "
                                                  "Hub's config.json and safetensors headers, no download).")] = None,
        config: Annotated[str | None, typer.Option("--config", help="A config.json, a model folder, or an HF id (the local HF cache, else the Hub).")] = None,
        workload: Annotated[str | None, typer.Option("--workload", "-w", help='Free text: "qlora 70b seq 8192 bs 1 gc".')] = None,
        method: Annotated[str | None, typer.Option(help="full | lora | qlora")] = None,
        framework: Annotated[str | None, typer.Option(help="hf | trl | unsloth | torchtune | axolotl | litgpt (their real defaults)")] = None,
        loop: Annotated[str | None, typer.Option(help="trainer (transformers Trainer: autocast, its optimizer) | plain (a hand-written loop); default: the framework's")] = None,
        grad_accum: Annotated[int | None, typer.Option("--grad-accum", help="Gradient accumulation steps.")] = None,
        dtype: Annotated[str | None, typer.Option(help="Parameter dtype: bf16 | fp16 | fp32 (fp32 master + autocast).")] = None,
        optimizer: Annotated[str | None, typer.Option(help="adamw_torch | adamw_torch_fused | adamw_8bit | paged_adamw_32bit | sgd | ...")] = None,
        batch: Annotated[int | None, typer.Option("--batch", "--batch-size", "-b", help="Micro-batch size.")] = None,
        seq_len: Annotated[int | None, typer.Option("--seq-len", "-s", help="Sequence / packing length.")] = None,
        gc: Annotated[bool | None, typer.Option("--gc/--no-gc", help="Gradient checkpointing (default: the framework's).")] = None,
        attention: Annotated[str | None, typer.Option(help="sdpa | flash | eager")] = None,
        loss: Annotated[str | None, typer.Option(help="hf | hf_legacy | chunked | fused | qwen_v1")] = None,
        lora_r: Annotated[int | None, typer.Option("--lora-r", help="LoRA rank.")] = None,
        lora_targets: Annotated[str | None, typer.Option("--lora-targets", help="all-linear, or q_proj,v_proj,...")] = None,
        lora_dropout: Annotated[float | None, typer.Option("--lora-dropout")] = None,
        quant: Annotated[str | None, typer.Option(help="QLoRA base storage: nf4-dq (default) | nf4")] = None,
        expandable: Annotated[bool, typer.Option("--expandable-segments", help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is set.")] = False,
        target: Annotated[str | None, typer.Option("--target", help="Plan for a machine you are not on: dgx-spark, h200.")] = None,
        budget_gb: Annotated[float | None, typer.Option("--budget-gb", help="An explicit budget in GB.")] = None,
        facts: Annotated[Path | None, typer.Option("--facts", help="Budget from a recorded snapshot.")] = None,
        offline: Annotated[bool, typer.Option("--offline", help="Do not read the Hugging Face Hub (as HF_HUB_OFFLINE=1): "
                                              "only the catalog, local files and caches.")] = False,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
        serve: Annotated[bool, typer.Option("--serve", help="Plan a server instead: weights, KV cache, the engine's "
                         "start-up check (-w takes a pasted `vllm serve ...`, `llama-server ...`, `ollama run ...`).")] = False,
        engine: Annotated[str | None, typer.Option(help="--serve: vllm | sglang | llama.cpp | ollama | trtllm")] = None,
        gguf: Annotated[str | None, typer.Option(help="--serve: a GGUF file (its header gives shapes and exact bytes).")] = None,
        max_model_len: Annotated[int | None, typer.Option("--max-model-len", help="--serve: context per request (llama.cpp: -c, Ollama: num_ctx); wins over the line's own flag.")] = None,
        gpu_util: Annotated[float | None, typer.Option("--gpu-memory-utilization", help="--serve: vLLM's share of TOTAL memory.")] = None,
        kv_dtype: Annotated[str | None, typer.Option("--kv-cache-dtype", help="--serve: auto | fp8 (vLLM/SGLang); f16 | q8_0 | q4_0 ... (llama.cpp -ctk/-ctv, OLLAMA_KV_CACHE_TYPE); wins over the line's own flag.")] = None,
        tp: Annotated[int | None, typer.Option("--tensor-parallel", help="--serve: tensor-parallel size.")] = None,
        concurrency: Annotated[int | None, typer.Option(help="--serve: requests at full length wanted at once.")] = None,
        engine_version: Annotated[str | None, typer.Option("--engine-version", help="--serve: the vLLM release to "
                                  "model (0.10.1; v0 for the V0 engine). Default: the one installed in --python, a "
                                  "pasted line's vllm/vllm-openai image tag, else the newest modelled.")] = None,
        python: Annotated[Path | None, typer.Option("--python", help="--serve: the interpreter vLLM runs in: its "
                          "installed vLLM and FlashInfer decide the terms that change by release.",
                          show_default=False)] = None,
        beside: Annotated[list[str] | None, typer.Option(help="--serve: another job on the same pool (a launch line or "
                          "a fine-tune like \"qlora llama-3.1-8b seq 4096\"); repeatable.")] = None,
        from_log: Annotated[Path | None, typer.Option("--from-log", help="--serve: a real vLLM start-up log of this "
                            "model on this machine: the plan carries what that start measured (non-torch memory, "
                            "compile cache, sampler, CUDA-graph estimate) to this launch line, or says why not.",
                            show_default=False)] = None,
        from_log_line: Annotated[str | None, typer.Option("--from-log-line", help="--serve --from-log: the launch "
                                 "line of that log (a `vllm serve ...` line; it wins over the log's printed "
                                 "'non-default args', and must agree with what the log printed).")] = None,
        from_log_same_machine: Annotated[bool, typer.Option("--from-log-same-machine", help="--serve --from-log: the "
                                         "log is of this machine, where it prints neither the GPU's device total nor "
                                         "its name (else the calibration is refused).")] = False,
    ) -> int:
        """Will this fine-tune fit? Itemised estimate, verdict, and the OOM ladder. With --serve: will this model
        serve, with how much KV cache, beside what else. Exit 0 fits, 1 tight, 2 does not fit."""
        from sparkops import api
        from sparkops.facts.workload import merge, refusals

        problems = refusals(merge(workload, seq_len=seq_len, batch_size=batch))
        if problems:
            raise typer.BadParameter("; ".join(problems), param_hint="--workload/--seq-len/--batch")
        if not serve and (from_log is not None or from_log_line or from_log_same_machine):
            raise typer.BadParameter("--from-log / --from-log-line / --from-log-same-machine calibrate a server's plan: "
                                     "add --serve", param_hint="--from-log")
        if serve:
            if python is not None:
                from sparkops.commands._common import check_python

                check_python(python)
            res_s = api.serve_plan(workload=workload, model=model, config=config, gguf=gguf, engine=engine,
                                   beside=tuple(beside or ()), target=target, budget_gb=budget_gb, facts=facts,
                                   max_model_len=max_model_len, gpu_memory_utilization=gpu_util,
                                   kv_cache_dtype=kv_dtype, tensor_parallel=tp, concurrency=concurrency,
                                   engine_version=engine_version, python=python, offline=offline,
                                   from_log=from_log, from_log_line=from_log_line,
                                   from_log_same_machine=from_log_same_machine)
            return emit(ServeOutcome(res_s), fmt, as_json)

        res = api.plan(model=model, config=config, workload=workload, method=method, framework=framework, loop=loop,
                       grad_accum=grad_accum,
                       dtype=dtype, optimizer=optimizer, batch=batch, seq_len=seq_len, grad_checkpointing=gc,
                       attention=attention, loss=loss, lora_r=lora_r,
                       lora_targets=[t.strip() for t in lora_targets.split(",") if t.strip()] if lora_targets else None,
                       lora_dropout=lora_dropout, quant=quant, expandable_segments=expandable, target=target,
                       budget_gb=budget_gb, facts=facts, offline=offline)
        return emit(PlanOutcome(res), fmt, as_json)
