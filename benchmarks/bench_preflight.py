#!/usr/bin/env python3
"""Measure preflight wall time beside a bare torch import + CUDA init, side by side, one run.

Usage: python benchmarks/bench_preflight.py [--python PY] [--runs N] [--out DIR]
Writes benchmarks/results/preflight-<host>-<date>.md with the machine, versions and the medians.
Each sample is a fresh process (what a user pays), interleaved so drift hits all rows alike.
benchmarks/suite.py imports the pieces (rows, interleaved timing, breakdown) for its own table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

BREAKDOWN = r"""
import sys, time
t0 = time.perf_counter()
from sparkops import api
from pathlib import Path
t1 = time.perf_counter()
opts = api.CollectOptions(depth="quick", python=sys.argv[1], offline=True, config_paths=(Path(sys.argv[2]),),
                          counter_window_s=0.1)
facts = api.collect(opts)
t2 = time.perf_counter()
rep = api.build_report(facts)
t3 = time.perf_counter()
print(f"import api        {t1 - t0:.3f} s")
print(f"collect (all)     {t2 - t1:.3f} s")
for name, r in sorted(facts.probes.items(), key=lambda kv: -kv[1].duration_s):
    print(f"  probe {name:<10} {r.duration_s:.3f} s {'ok' if r.ok else r.reason}")
print(f"judge + report    {t3 - t2:.3f} s")
"""


BARE_CAPABILITY = "bare: python -c 'import torch; torch.cuda.get_device_capability()'"
BARE_IMPORT = "bare: python -c 'import torch'"
QUICK = "spark-ops preflight --quick"
FULL = "spark-ops preflight (full)"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, p.returncode, p.stdout + p.stderr


def preflight_rows(python: str, tmp: Path) -> dict[str, list[str]]:
    """The command lines compared: two bare torch starts, preflight --quick and full (reports in ``tmp``)."""
    tool = [sys.executable, "-m", "sparkops"]
    common = ["--python", python, "--offline", "--config", str(tmp), "--format", "lines"]
    return {
        BARE_CAPABILITY: [python, "-c", "import torch; torch.cuda.get_device_capability()"],
        BARE_IMPORT: [python, "-c", "import torch"],
        QUICK: [*tool, "preflight", "--quick", *common, "--report", str(tmp / "q.json")],
        FULL: [*tool, "preflight", *common, "--report", str(tmp / "f.json")],
    }


def measure_interleaved(rows: dict[str, list[str]], runs: int, env: dict[str, str]
                        ) -> tuple[dict[str, list[float]], dict[str, set[int]]]:
    """Wall time of each row, one warm-up each (page cache), then ``runs`` interleaved rounds so drift
    hits all rows alike. Fresh process each time: what a user pays."""
    samples: dict[str, list[float]] = {k: [] for k in rows}
    codes: dict[str, set[int]] = {k: set() for k in rows}
    for argv in rows.values():
        timed(argv, env)
    for _ in range(runs):
        for name, argv in rows.items():
            dt, rc, _out = timed(argv, env)
            samples[name].append(dt)
            codes[name].add(rc)
    return samples, codes


def target_versions(python: str) -> str:
    """torch, CUDA and Python versions of the target interpreter ('' without torch)."""
    return subprocess.run([python, "-c", "import torch,sys;print(torch.__version__, torch.version.cuda, "
                           "sys.version.split()[0])"], capture_output=True, text=True).stdout.strip()


def quick_breakdown(python: str, tmp: Path) -> str:
    """Where a --quick run spends its time: one in-process run (import, each probe, judge)."""
    probe = subprocess.run([sys.executable, "-c", BREAKDOWN, python, str(tmp)], capture_output=True, text=True)
    return probe.stdout.strip() or probe.stderr.strip()[-2000:]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=shutil.which("python3") or sys.executable,
                    help="target interpreter (the one with torch)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    env = dict(os.environ)
    tmp = Path(tempfile.mkdtemp())
    samples, codes = measure_interleaved(preflight_rows(args.python, tmp), args.runs, env)
    report = json.loads((tmp / "f.json").read_text()) if (tmp / "f.json").exists() else {}
    med = {k: statistics.median(v) for k, v in samples.items()}
    bare = med[BARE_CAPABILITY]
    ver = target_versions(args.python)
    gpu = report.get("identity", {}).get("gpu_name")
    lines = [
        f"# preflight timing on {socket.gethostname()} ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",  # noqa: UP017
        "",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, GPU: {gpu}, platform judged: {report.get('platform')}",
        f"- target python: {args.python} (torch, CUDA, python: {ver or 'no torch'})",
        f"- tool python: {sys.version.split()[0]}; dgx-spark-ops {report.get('tool_version')}",
        f"- {args.runs} interleaved runs per row after one warm-up; fresh process each; wall time in seconds",
        "",
        "| command | median s | min s | max s | exit codes | ratio to bare import+CUDA init |",
        "|---|---|---|---|---|---|",
    ]
    for k, v in samples.items():
        lines.append(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {max(v):.3f} | {sorted(codes[k])} | {med[k] / bare:.2f} |")
    lines += ["", f"Verdict of the full run: {report.get('verdict')}; checks: ",
              "```", json.dumps(report.get("checks", {}), indent=1), "```"]
    lines += ["", "Where `--quick` spends its time (one in-process run; probes run concurrently):", "```",
              quick_breakdown(args.python, tmp), "```"]
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"preflight-{platform.machine()}-{datetime.now(timezone.utc):%Y%m%d}.md"  # noqa: UP017
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
