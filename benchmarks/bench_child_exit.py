#!/usr/bin/env python3
"""How much of a torch child's wall time is the interpreter's teardown: ``import torch`` + the
capability query, ending normally vs with ``os._exit(0)`` (what the live target probe does once its
result line is out). Fresh processes, interleaved. Usage: python benchmarks/bench_child_exit.py [--python PY] [--runs N]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import subprocess
import sys
import time

BODY = "import torch; torch.cuda.get_device_capability() if torch.cuda.is_available() else None"
ROWS = {"ends normally": BODY, "os._exit(0) after the query": "import os; " + BODY + "; os._exit(0)"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=shutil.which("python3") or sys.executable)
    ap.add_argument("--runs", type=int, default=12)
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in ROWS}
    for _ in range(args.runs):
        for name, code in ROWS.items():
            t = time.perf_counter()
            subprocess.run([args.python, "-c", code], check=True, stderr=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - t)
    print(f"# torch child: teardown cost ({platform.machine()}, {args.runs} interleaved rounds, {args.python})")
    print("| row | median s | min s | max s |\n|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f} | {max(ts):.3f} |")


if __name__ == "__main__":
    main()
