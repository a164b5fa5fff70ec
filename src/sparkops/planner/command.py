"""``spark-ops plan``: registered on the main app; heavy imports happen inside the command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

EXIT = {"fits": 0, "tight": 1, "does-not-fit": 2}


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        model: Annotated[str | None, typer.Option("--model", "-m", help="Catalog name, alias or HF id (llama-3.1-70b).")] = None,
        config: Annotated[str | None, typer.Option("--config", help="A config.json, a model folder, or an HF id in the local HF cache.")] = None,
        workload: Annotated[str | None, typer.Option("--workload", "-w", help='Free text: "qlora 70b seq 8192 bs 1 gc".')] = None,
        method: Annotated[str | None, typer.Option(help="full | lora | qlora")] = None,
        framework: Annotated[str | None, typer.Option(help="hf | trl | unsloth | torchtune | axolotl | litgpt (their real defaults)")] = None,
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
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable result.")] = False,
    ) -> int:
        """Will this fine-tune fit? Itemised estimate, verdict, and the OOM ladder. Exit 0 fits, 1 tight, 2 does not fit."""
        from sparkops import api
        from sparkops.workload import merge, refusals

        problems = refusals(merge(workload, seq_len=seq_len, batch_size=batch))
        if problems:
            raise typer.BadParameter("; ".join(problems), param_hint="--workload/--seq-len/--batch")
        res = api.plan(model=model, config=config, workload=workload, method=method, framework=framework,
                       dtype=dtype, optimizer=optimizer, batch=batch, seq_len=seq_len, grad_checkpointing=gc,
                       attention=attention, loss=loss, lora_r=lora_r,
                       lora_targets=[t.strip() for t in lora_targets.split(",") if t.strip()] if lora_targets else None,
                       lora_dropout=lora_dropout, quant=quant, expandable_segments=expandable, target=target,
                       budget_gb=budget_gb, facts=facts)
        if as_json:
            sys.stdout.write(res.model_dump_json(indent=2) + "\n")
        else:
            from sparkops.planner.render import render_plan

            sys.stdout.write(render_plan(res))
        return EXIT[res.verdict]
