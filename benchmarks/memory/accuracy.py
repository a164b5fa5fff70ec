"""The memory planner's accuracy: estimate vs measured peak, on our own GPU measurements and on
the public calibration set, beside what ``accelerate estimate-memory``'s training rule says.

    python benchmarks/memory/accuracy.py [--measured benchmarks/memory/results/h200-*.jsonl]
        [--calibration ../shared/reference/memory-calibration.jsonl] [--out benchmarks/results/memory-accuracy.md]

The compared quantity is what was measured: ``torch.cuda.max_memory_allocated`` (tensors only), so
the estimator's allocated peak is used (no allocator slack, no CUDA context). Points whose
measurement cannot be mapped onto the estimator (unknown model, unsupported method) are listed,
not dropped silently. Nothing is tuned here: the estimator's coefficients are in
``src/sparkops/knowledge/planner.yaml`` with the reason for each.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from sparkops.planner import architecture  # noqa: E402
from sparkops.planner.estimate import estimate  # noqa: E402
from sparkops.planner.run import build_run  # noqa: E402

CALIBRATION = ROOT.parent / "shared" / "reference" / "memory-calibration.jsonl"


@dataclass
class Point:
    id: str
    source: str  # "device" | "public"
    label: str
    measured: float  # bytes
    estimated: float | None
    accelerate: float | None
    note: str = ""

    @property
    def error(self) -> float | None:
        return None if self.estimated is None else (self.estimated - self.measured) / self.measured


def accelerate_rule(params: int, method: str, dtype: str) -> float | None:
    """``accelerate estimate-memory``'s "Training using Adam" column, as a user would read it.

    It knows no LoRA and no activations: max(model, grads, optimizer, step) over the whole model;
    fp32: 4 x fp32 size (16 B/param); bf16/fp16 mixed precision: 2 x fp32 size (8 B/param);
    int4/int8 training: "N/A". (huggingface/accelerate src/accelerate/commands/estimate.py)
    """
    if method == "qlora":
        return None
    return params * (16.0 if dtype == "fp32" else 8.0)


# ------------------------------------------------------------------ public calibration rows

FRAMEWORKS = {"lit-gpt": "litgpt", "torchtune": "torchtune", "LLaMA-Factory (HF Trainer)": "llama-factory",
              "HF transformers+PEFT custom loop": "hf", "HF Trainer + PEFT (Qwen finetune.py)": "hf",
              "Hugging Face + FA2": "hf"}


def _loss(row: dict[str, Any], fw: str) -> str | None:
    text = (row.get("loss_impl") or "").lower()
    if "chunked" in text:
        return "chunked"
    if "qwen" in text:
        return "qwen_v1"
    if "forcausallmloss" in text or "standard" in text:
        return "hf" if fw != "torchtune" else "hf"
    return None


def _targets(text: str | None) -> list[str] | None:
    if not text:
        return None
    t = text.replace(" ", "").lower()
    if t in ("alllinear", "all-linear", "all"):
        return ["all-linear"]
    names = [x if x.endswith("_proj") else f"{x}_proj" for x in t.split(",") if x]
    return names


def _optimizer(text: str) -> str | None:
    """Only what the row states beyond "AdamW": the framework's preset knows whether its AdamW is fused."""
    t = text.lower()
    if "8bit" in t:
        return "adamw_8bit"
    if "paged" in t:
        return "paged_adamw_32bit"
    return None


def _dropout(row: dict[str, Any]) -> float | None:
    m = re.search(r"dropout (\d*\.\d+)", f"{row.get('source', '')} {row.get('notes', '')}")
    return float(m.group(1)) if m else None


def measured_view(row: dict[str, Any]) -> str:
    """Which of the estimator's quantities the row measured.

    ``allocated``: torch's tensor counters (max_memory_allocated, active bytes); ``reserved``:
    max_memory_reserved (tensors + allocator slack); ``device``: "tool not stated" tables
    (nvidia-smi-like "GPU memory" / "VRAM"): tensors + slack + CUDA context.
    """
    w = row.get("what_was_measured", "").lower()
    if "max_memory_allocated" in w or "active_bytes" in w or "peak memory active" in w:
        return "allocated"
    if "reserved" in w:
        return "reserved"
    return "device"


def public_points(path: Path) -> tuple[list[Point], list[str]]:
    points: list[Point] = []
    skipped: list[str] = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        rid = row["id"]
        if row.get("measurement_kind") != "peak":
            skipped.append(f"{rid}: {row.get('measurement_kind')} (a capacity statement, not a measured peak)")
            continue
        fw = FRAMEWORKS.get(row.get("framework", ""), "hf")
        loop = "plain" if "custom loop" in row.get("framework", "") else None
        model = row["model"].split(" (")[0]
        try:
            arch = architecture.resolve(model)
        except architecture.ArchitectureError as e:
            skipped.append(f"{rid}: {e}")
            continue
        dtype = "fp32" if row["dtype"].startswith("fp32") else "bf16"
        try:
            run = build_run(method=row["method"], framework=fw, dtype=dtype, optimizer=_optimizer(row["optimizer"]),
                            batch=row["batch"], seq_len=row["seq_len"], grad_checkpointing=row["grad_checkpointing"],
                            attention=(row.get("attention") or "sdpa").replace("flash_attention_2", "flash"),
                            loss=_loss(row, fw), lora_r=row.get("lora_rank"), lora_targets=_targets(row.get("lora_targets")),
                            lora_dropout=_dropout(row) if row["method"] != "full" else None,
                            bnb_keeps_input="bitsandbytes 0.41" in row.get("source", ""), loop=loop)
        except Exception as e:  # noqa: BLE001 - a row the estimator cannot express is reported, not fatal
            skipped.append(f"{rid}: {e}")
            continue
        est = estimate(arch, run)
        view = measured_view(row)
        value = {"allocated": est.peak_allocated,
                 "reserved": est.peak_allocated + est.terms["allocator_slack"],
                 "device": est.peak_allocated + est.terms["allocator_slack"] + est.terms["cuda_context"]}[view]
        label = (f"{model} {row['method']} b{row['batch']} s{row['seq_len']}"
                 f"{' gc' if row['grad_checkpointing'] else ''} [{row.get('framework')}] ({view})")
        points.append(Point(rid, "public", label, row["measured_peak_gb"] * 1e9, value,
                            accelerate_rule(arch.params_total, row["method"], dtype), note=row.get("confidence", "")))
    return points, skipped


# ------------------------------------------------------------------ our GPU measurements

def device_points(paths: list[Path], catalog: dict[str, dict]) -> tuple[list[Point], list[str]]:
    points: list[Point] = []
    skipped: list[str] = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            rid = row.get("id", "?")
            meas = row.get("measured") or {}
            peak = meas.get("peak_allocated_bytes")
            if row.get("error") or not peak:
                err = row.get("error") or {}
                skipped.append(f"{rid}: not measured ({err.get('error', 'no peak')}: {str(err.get('message', ''))[:120]})")
                continue
            arch = architecture.from_config(row.get("hf_config") or catalog[row["model"]]["config"], id=row["model"],
                                            name=row["model"], source="catalog")
            lora = row.get("lora") or {}
            run = build_run(method=row["method"], framework="hf", dtype=row.get("dtype", "bf16"),
                            optimizer=row["optimizer"], batch=row["batch"], seq_len=row["seq_len"],
                            grad_checkpointing=row["grad_checkpointing"], attention=row["attention"], loss="hf",
                            lora_r=lora.get("r"), lora_targets=_as_list(lora.get("targets")),
                            lora_dropout=lora.get("dropout"), loop=row.get("loop", "plain"),
                            grad_accum=row.get("grad_accum", 1))
            est = estimate(arch, run)
            label = (("[trainer] " if row.get("loop") == "trainer" else "") + f"{row['model']} {row['method']}{'/' + row['dtype'] if row.get('dtype') == 'fp32' else ''} "
                     f"b{row['batch']} s{row['seq_len']}{' gc' if row['grad_checkpointing'] else ''} "
                     f"{row['attention']} {row['optimizer']}"
                     + (f" r{lora.get('r')} {','.join(_as_list(lora.get('targets')) or [])}"
                        f"{' do' + str(lora.get('dropout')) if lora.get('dropout') else ''}" if lora else ""))
            points.append(Point(rid, "device", label, float(peak), est.peak_allocated,
                                accelerate_rule(arch.params_total, row["method"], row.get("dtype", "bf16"))))
    return points, skipped


def _as_list(t: Any) -> list[str] | None:
    if t is None:
        return None
    return [t] if isinstance(t, str) else list(t)


# ------------------------------------------------------------------ the table

def stats(points: list[Point]) -> dict[str, float]:
    errs = [p.error for p in points if p.error is not None]
    if not errs:
        return {}
    return {"n": len(errs), "median_abs": statistics.median(abs(e) for e in errs),
            "within_15": sum(abs(e) <= 0.15 for e in errs) / len(errs), "worst_under": min(errs),
            "worst_over": max(errs)}


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def markdown(points: list[Point], skipped: list[str], env: dict[str, Any]) -> str:
    out = ["# Memory planner accuracy", "",
           f"Generated {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by `benchmarks/memory/accuracy.py`. "  # noqa: UP017
           "Compared quantity: peak `torch.cuda.max_memory_allocated` (GB = 1e9 bytes); the estimate is the "
           "planner's allocated peak (tensors only: no allocator slack, CUDA context or host process).", ""]
    if env:
        out += ["Device measurements: " + ", ".join(f"{k} {v}" for k, v in env.items() if v), ""]
    goals = "Goals: median |error| ≤ 8 %, ≥ 90 % of points within ±15 %, no under-prediction worse than −10 %."
    out += [goals, ""]
    for source, title in (("device", "Our measurements (real training steps)"), ("public", "Public calibration set")):
        pts = [p for p in points if p.source == source]
        if not pts:
            continue
        st = stats(pts)
        out += [f"## {title}", ""]
        if st:
            out += [f"n = {st['n']}: median |error| {st['median_abs'] * 100:.1f} %, within ±15 %: "
                    f"{st['within_15'] * 100:.0f} %, worst under-prediction {_pct(st['worst_under'])}, "
                    f"worst over-prediction {_pct(st['worst_over'])}", ""]
            acc = [p for p in pts if p.accelerate is not None]
            if acc:
                aerr = [(p.accelerate - p.measured) / p.measured for p in acc]  # type: ignore[operator]
                out += [f"accelerate's training rule on the {len(acc)} points it covers: median |error| "
                        f"{statistics.median(abs(e) for e in aerr) * 100:.1f} %, worst under-prediction "
                        f"{_pct(min(aerr))}", ""]
        out += ["| id | configuration | measured GB | estimate GB | error | accelerate GB | accelerate error |",
                "|---|---|---:|---:|---:|---:|---:|"]
        for p in pts:
            acc_gb = f"{p.accelerate / 1e9:.2f}" if p.accelerate is not None else "N/A"
            acc_err = _pct((p.accelerate - p.measured) / p.measured) if p.accelerate is not None else "N/A"
            est = f"{p.estimated / 1e9:.2f}" if p.estimated is not None else "—"
            out.append(f"| {p.id} | {p.label} | {p.measured / 1e9:.2f} | {est} | "
                       f"{_pct(p.error) if p.error is not None else '—'} | {acc_gb} | {acc_err} |")
        out.append("")
    if skipped:
        out += ["## Not compared", ""] + [f"- {s}" for s in skipped] + [""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", nargs="*", type=Path, default=sorted((ROOT / "benchmarks/memory/results").glob("*.jsonl")))
    ap.add_argument("--calibration", type=Path, default=CALIBRATION)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/memory-accuracy.md")
    args = ap.parse_args(argv)
    import yaml

    cat = {m["id"]: m for m in yaml.safe_load((ROOT / "src/sparkops/knowledge/models.yaml").read_text())["models"]}
    points, skipped = device_points(list(args.measured), cat)
    env: dict[str, Any] = {}
    for path in args.measured:
        for line in path.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("env"):
                e = row["env"]
                env = {"GPU": e.get("gpu_name"), "torch": e.get("torch"), "transformers": e.get("transformers"),
                       "peft": e.get("peft"), "bitsandbytes": e.get("bitsandbytes")}
                break
    if args.calibration.exists():
        pub, sk = public_points(args.calibration)
        points += pub
        skipped += sk
    text = markdown(points, skipped, env)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
