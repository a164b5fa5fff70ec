#!/usr/bin/env python3
"""The GPU part of one monitor row, ours only: ``sampler.read_nvml`` against an instant stand-in NVML
binding (no driver: what is left is our Python), this checkout beside a baseline git revision, in one
process, rounds interleaved so machine load hits both alike.

Usage: python benchmarks/bench_nvml_cells.py [--baseline REV] [--rounds N] [--rows N] [--out DIR]
Writes benchmarks/results/nvml-cells-<arch>-<date>.md with the machine and its load average.
The baseline's probes/nvml.py and monitor/sampler.py are read with ``git show REV:path`` and loaded
under other names; the rest of the package is this checkout's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_sampler import StandInNvml  # noqa: E402

from sparkops.monitor import sampler as current  # noqa: E402


def _module(name: str, source: str) -> ModuleType:
    spec = importlib.util.spec_from_loader(name, loader=None)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = mod
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)  # noqa: S102 - our own file at another revision
    return mod


def baseline(rev: str) -> ModuleType:
    show = lambda path: subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True,  # noqa: E731
                                       capture_output=True, text=True).stdout
    _module("baseline_nvml", show("src/sparkops/probes/nvml.py"))
    text = show("src/sparkops/monitor/sampler.py").replace(
        "from sparkops.probes import _run, early, nvidia_smi, nvml",
        "from sparkops.probes import _run, early, nvidia_smi\nimport baseline_nvml as nvml")
    return _module("baseline_sampler", text)


def per_row_us(mod: ModuleType, nv: StandInNvml, rows: int) -> float:
    c0 = time.process_time()
    for _ in range(rows):
        mod.read_nvml(nv, "h")
    return (time.process_time() - c0) / rows * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="HEAD")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    old, nv = baseline(args.baseline), StandInNvml()
    assert old.read_nvml(nv, "h") == current.read_nvml(nv, "h"), "the two revisions give different cells"
    for mod in (old, current):
        per_row_us(mod, nv, 200)  # warm-up
    got: dict[str, list[float]] = {"baseline": [], "this checkout": []}
    load0 = os.getloadavg()
    for _ in range(args.rounds):
        got["baseline"].append(per_row_us(old, nv, args.rows))
        got["this checkout"].append(per_row_us(current, nv, args.rows))
    load1 = os.getloadavg()
    now = datetime.now()
    lines = [f"# GPU cells of one monitor row, our code only ({now:%Y-%m-%d %H:%M})", "",
             f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
             f"load average {load0[0]:.2f} before, {load1[0]:.2f} after",
             f"- `sampler.read_nvml` on an instant stand-in binding (benchmarks/bench_sampler.py's), no driver; "
             f"{args.rounds} interleaved rounds of {args.rows} rows; baseline = `{args.baseline}`", "",
             "| code | CPU µs/row, median of rounds | min | max |", "|---|---|---|---|"]
    for name, xs in got.items():
        lines.append(f"| {name} | {statistics.median(xs):.1f} | {min(xs):.1f} | {max(xs):.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"nvml-cells-{platform.machine()}-{now:%Y%m%d}.md"
    path.write_text(text, encoding="utf-8")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
