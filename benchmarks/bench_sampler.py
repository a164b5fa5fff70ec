#!/usr/bin/env python3
"""Measure what one monitor row costs: CPU time (ours and our nvidia-smi children's) and wall time.

Usage: python benchmarks/bench_sampler.py [--samples N] [--out DIR]
Writes benchmarks/results/sampler-<arch>-<date>.md. Paths measured:
  - NVML (real driver), when NVML initialises here;
  - NVML through a stand-in binding: our own Python cost per row (reading code + /proc), a lower
    bound for the real path, measurable on a machine without a GPU;
  - nvidia-smi fallback: the real tool when on PATH, else tests/fixtures/bin/nvidia-smi-gb10 (a shell
    script, so its child CPU says little about the real tool; ours does).
CPU per row = time.process_time() delta (all threads of this process, the NVML worker included);
children = os.times() children user+system (the nvidia-smi calls, reaped by the runner).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from sparkops.monitor.sampler import Sampler  # noqa: E402

FAKE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "bin" / "nvidia-smi-gb10"


class StandInNvml:
    """Answers like a GB10 under load, instantly: what is left is our own per-row work."""

    NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL, NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 0, 1, 1, 0

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetHandleByIndex(self, i: int) -> str: return "h"
    def nvmlDeviceGetTemperature(self, h: str, s: int) -> int: return 71
    def nvmlDeviceGetPowerUsage(self, h: str) -> int: return 100_250
    def nvmlDeviceGetClockInfo(self, h: str, c: int) -> int: return 2418
    def nvmlDeviceGetUtilizationRates(self, h: str) -> SimpleNamespace: return SimpleNamespace(gpu=98)
    def nvmlDeviceGetPerformanceState(self, h: str) -> int: return 0
    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int: return 0
    def nvmlDeviceGetViolationStatus(self, h: str, p: int) -> SimpleNamespace:
        return SimpleNamespace(violationTime=50_284_264_713_999)
    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=400721, usedGpuMemory=96581 << 20)]
    def nvmlSystemGetProcessName(self, pid: int) -> str: return "python"


def measure(sampler: Sampler, n: int) -> dict[str, float]:
    for _ in range(3):  # warm-up: imports, page cache, first spawn
        sampler.sample()
    cpu, child, wall = [], [], []
    for _ in range(n):
        t0, c0, k0 = time.perf_counter(), time.process_time(), os.times()
        row = sampler.sample()
        k1, c1, t1 = os.times(), time.process_time(), time.perf_counter()
        cpu.append((c1 - c0) * 1000)
        child.append(((k1.children_user - k0.children_user) + (k1.children_system - k0.children_system)) * 1000)
        wall.append((t1 - t0) * 1000)
    assert row["timestamp"]
    return {"cpu": statistics.mean(cpu), "cpu_p95": sorted(cpu)[int(0.95 * (n - 1))],
            "child": statistics.mean(child), "wall": statistics.median(wall), "wall_p95": sorted(wall)[int(0.95 * (n - 1))],
            "gpu_ok": float(row["power.draw [W]"] is not None)}


Result = tuple[str, "dict[str, float] | None", str]  # (path, figures or None, note)


def sampler_results(n: int) -> list[Result]:
    """CPU and wall cost per row on each sampler path this machine has (``n`` rows per NVML path)."""
    results: list[Result] = []
    real = Sampler(os.environ, use_nvml=True)
    if real.source == "nvml":
        results.append(("NVML (real driver)", measure(real, n), ""))
    else:
        results.append(("NVML (real driver)", None, "; ".join(real.notes)))
    real.close()

    stand_in = Sampler({}, nvml_module=StandInNvml())  # type: ignore[arg-type]
    results.append(("NVML stand-in binding (our code + /proc only)", measure(stand_in, n), ""))
    stand_in.close()

    env = {**os.environ, "SPARKOPS_NO_NVML": "1"}
    tool = shutil.which("nvidia-smi")
    label = f"nvidia-smi fallback ({tool})"
    if not tool:
        d = Path(tempfile.mkdtemp())
        (d / "nvidia-smi").symlink_to(FAKE)
        env["PATH"] = f"{d}{os.pathsep}{env.get('PATH', '')}"
        label = "nvidia-smi fallback (fake tests/fixtures/bin/nvidia-smi-gb10, /bin/sh)"
    smi = Sampler(env)
    results.append((label, measure(smi, max(5, n // 4)), "3 nvidia-smi calls per row"))
    smi.close()
    return results


TABLE_HEAD = ["| path | CPU ms/row | CPU p95 | child CPU ms/row | wall ms/row | wall p95 | GPU cells read |",
              "|---|---|---|---|---|---|---|"]


def table_rows(results: list[Result]) -> list[str]:
    lines = []
    for name, r, note in results:
        if r is None:
            lines.append(f"| {name} | - | - | - | - | - | unavailable: {note[:120]} |")
        else:
            lines.append(f"| {name} | {r['cpu']:.3f} | {r['cpu_p95']:.3f} | {r['child']:.2f} | {r['wall']:.3f} | "
                         f"{r['wall_p95']:.3f} | {'yes' if r['gpu_ok'] else 'no'}{'; ' + note if note else ''} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    n = max(5, args.samples)
    results = sampler_results(n)
    now = datetime.now()
    lines = [f"# sampler cost per row on {platform.node() or 'host'} ({now:%Y-%m-%d %H:%M})", "",
             f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}",
             f"- {n} rows per NVML path, {max(5, n // 4)} for nvidia-smi, after 3 warm-up rows",
             "- CPU ms = this process (all threads); child ms = nvidia-smi processes; wall = median", "",
             *TABLE_HEAD, *table_rows(results)]
    lines += ["", "At the default 5 s interval a row's CPU cost divided by 5000 ms is the sampler's share of one core."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"sampler-{platform.machine()}-{now:%Y%m%d}.md"
    path.write_text(text)
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
