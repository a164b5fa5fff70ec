#!/usr/bin/env python3
"""The typer paths (the commands the fast path in sparkops.front does not answer), before/after a change:
python benchmarks/bench_typer_paths.py ROUNDS BEFORE_SRC [AFTER_SRC]. Fresh process each, rounds interleaved,
wall seconds; prints a markdown table with the load average (issue 16 item 5: every command lazy)."""
import os
import platform
import statistics
import subprocess
import sys
import time

rows = {"--help (typer path)": (["--help"], {"SPARKOPS_NO_FAST": "1"}),
        "plan --help": (["plan", "--help"], {}),
        "version (typer path)": (["version"], {"SPARKOPS_NO_FAST": "1"}),
        "explain G3 --format json / (base: SPARKOPS_NO_FAST explain G3)": (None, {})}
srcs = {"before": sys.argv[2], "after": sys.argv[3] if len(sys.argv) > 3 else str(__import__("pathlib").Path(__file__).resolve().parents[1] / "src")}
res = {}
for _round in range(int(sys.argv[1])):
    for name, (argv, env) in rows.items():
        for label, src in srcs.items():
            a = argv
            e = dict(env)
            if a is None:
                a = ["explain", "G3", "--format", "json"] if label == "after" else ["explain", "G3"]
                e["SPARKOPS_NO_FAST"] = "1"
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "sparkops", *a], capture_output=True,
                               env={**os.environ, **e, "PYTHONPATH": src, "COLUMNS": "100"})
            res.setdefault((name, label), []).append(time.perf_counter() - t)
            assert p.returncode == 0, (name, label, p.stderr[-300:])
print(f"machine {platform.machine()}, {os.cpu_count()} CPUs; load average at end {os.getloadavg()}")
print("| command | code | median s | min s | max s |\n|---|---|---|---|---|")
for (name, label), v in res.items():
    print(f"| {name} | {label} | {statistics.median(v):.3f} | {min(v):.3f} | {max(v):.3f} |")
