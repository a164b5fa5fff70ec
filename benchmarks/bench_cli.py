#!/usr/bin/env python3
"""Issue 23's figures in one run: how long each `spark-ops` command takes before it answers.

Usage: python benchmarks/bench_cli.py [--python PY] [--runs N] [--out DIR] [--label NAME] [--samples N]

Side by side, fresh process each time, one first run of every row (kept: what a cold page cache
or a first run after install pays), then N interleaved rounds so drift hits all rows alike:

- the interpreter floor (``python -c pass``), ``import sparkops``, ``import sparkops.api``;
- ``spark-ops --help``, ``version``, ``explain G3``, ``schema report``;
- ``preflight --quick`` (``--format lines``, and the default table), full ``preflight``, a bare
  ``import torch; torch.cuda.get_device_capability()`` and the seeds' shell preflight
  (``benchmarks/seeds_preflight.sh``) in the target python;
- ``preflight --quick`` with no bytecode for sparkops (a fresh copy of ``src/``: a first run
  after an editable or ``--no-compile`` install);
- the watch sampler's own cost per row (``bench_sampler.py``: the NVML stand-in row is our code).

Writes ``benchmarks/results/cli-<label>-<date>.md`` with the machine, its load, versions, every row
and each goal of issue 23 marked PASS / FAIL.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_preflight as bp  # noqa: E402

SEEDS = HERE / "seeds_preflight.sh"
FAST_GOAL_S = 0.15
QUICK_GOAL_GPU_S, QUICK_GOAL_CPU_S, COLD_GOAL_S = 0.36, 0.5, 1.0
SAMPLER_GOAL_MS = 0.3

FLOOR, IMPORT, IMPORT_API = "python -c pass (tool python)", "python -c 'import sparkops'", "python -c 'import sparkops.api'"
HELP, VERSION, EXPLAIN, SCHEMA = "spark-ops --help", "spark-ops version", "spark-ops explain G3", "spark-ops schema report"
QUICK_TABLE = "spark-ops preflight --quick (table)"
SEEDS_ROW = "seeds' shell preflight (benchmarks/seeds_preflight.sh)"
COLD = "preflight --quick, no sparkops bytecode (fresh copy of src/)"
DETECT = r"""
import atexit, resource, sys, time
t0 = time.perf_counter()
def said():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    sys.stderr.write("@@ wall %.3f s after the interpreter started, CPU %.3f s in the tool's process, %.3f s in "
                     "its children\n" % (time.perf_counter() - t0, me.ru_utime + me.ru_stime,
                     kids.ru_utime + kids.ru_stime))
atexit.register(said)
sys.argv = ["spark-ops", *sys.argv[1:]]
from sparkops.front import main
main(sys.argv[1:])
"""


def rows_for(python: str, tmp: Path, has_torch: bool) -> dict[str, list[str]]:
    tool = [sys.executable, "-m", "sparkops"]
    rows = {
        FLOOR: [sys.executable, "-c", "pass"],
        IMPORT: [sys.executable, "-c", "import sparkops"],
        IMPORT_API: [sys.executable, "-c", "import sparkops.api"],
        HELP: [*tool, "--help"],
        VERSION: [*tool, "version"],
        EXPLAIN: [*tool, "explain", "G3"],
        SCHEMA: [*tool, "schema", "report"],
    }
    pre = bp.preflight_rows(python, tmp)
    rows[bp.QUICK] = pre[bp.QUICK]
    rows[QUICK_TABLE] = [a for a in pre[bp.QUICK] if a not in ("--format", "lines")]
    if has_torch:
        rows[bp.FULL] = pre[bp.FULL]
        rows[bp.BARE_CAPABILITY] = pre[bp.BARE_CAPABILITY]
        rows[SEEDS_ROW] = ["bash", str(SEEDS)]
    return rows


BASELINE_ROWS = (IMPORT_API, HELP, EXPLAIN, bp.QUICK)


def measure(rows: dict[str, list[str]], runs: int, env: dict[str, str],
            envs: dict[str, dict[str, str]] | None = None) -> tuple[dict, dict, dict]:
    envs = envs or {}
    first: dict[str, float] = {}
    samples: dict[str, list[float]] = {k: [] for k in rows}
    codes: dict[str, set[int]] = {k: set() for k in rows}
    for name, argv in rows.items():
        first[name], rc, _ = bp.timed(argv, envs.get(name, env))
        codes[name].add(rc)
    for _ in range(runs):
        for name, argv in rows.items():
            dt, rc, _out = bp.timed(argv, envs.get(name, env))
            samples[name].append(dt)
            codes[name].add(rc)
    return first, samples, codes


def with_baseline(rows: dict[str, list[str]], env: dict[str, str], src: Path
                  ) -> tuple[dict[str, list[str]], dict[str, dict[str, str]]]:
    """Add the rows of BASELINE_ROWS again, run from another checkout's ``src`` (PYTHONPATH first)."""
    out, envs = dict(rows), {}
    for name in BASELINE_ROWS:
        key = f"baseline {src.parent.name or src}: {name}"
        out[key] = rows[name]
        envs[key] = {**env, "PYTHONPATH": str(src) + os.pathsep + env.get("PYTHONPATH", "")}
    return out, envs


def cold_runs(python: str, tmp: Path, env: dict[str, str], n: int) -> list[float]:
    """``preflight --quick`` from a fresh copy of src/ (no __pycache__), ``n`` times, each a new copy."""
    out = []
    for i in range(n):
        src = tmp / f"cold{i}"
        shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        argv = [sys.executable, "-m", "sparkops", "preflight", "--quick", "--python", python, "--offline",
                "--config", str(tmp), "--format", "lines", "--report", str(tmp / "cold.json")]
        dt, _rc, _ = bp.timed(argv, {**env, "PYTHONPATH": str(src) + os.pathsep + env.get("PYTHONPATH", "")})
        out.append(dt)
    return out


def one_quick_run(python: str, tmp: Path, env: dict[str, str]) -> str:
    p = subprocess.run([sys.executable, "-c", DETECT, "preflight", "--quick", "--python", python, "--offline",
                        "--config", str(tmp), "--format", "lines", "--report", str(tmp / "d.json")],
                       capture_output=True, text=True, env=env)
    return next((ln[3:] for ln in p.stderr.splitlines() if ln.startswith("@@ ")), "?")


def cpu_rounds(python: str, tmp: Path, env: dict[str, str], n: int, src: Path | None
               ) -> dict[str, list[tuple[float, float, float]]]:
    """``preflight --quick`` (lines) ``n`` times, alternating with the baseline ``src`` when given:
    (wall after the interpreter started, CPU in the tool's process, CPU in its children) of each
    run. CPU in the process is what the quick path's own work costs, less sensitive to load than wall."""
    import re

    envs = {"this tree": env}
    if src is not None:
        envs[f"baseline {src.parent.name or src}"] = {**env, "PYTHONPATH": str(src) + os.pathsep + env.get("PYTHONPATH", "")}
    out: dict[str, list[tuple[float, float, float]]] = {k: [] for k in envs}
    for _ in range(n):
        for name, e in envs.items():
            m = re.match(r"wall ([0-9.]+) s .*CPU ([0-9.]+) s in the tool's process, ([0-9.]+) s", one_quick_run(python, tmp, e))
            if m:
                out[name].append((float(m.group(1)), float(m.group(2)), float(m.group(3))))
    return out


def versions() -> str:
    code = ("import importlib.metadata as m\nfor d in ('typer','pydantic','rich','PyYAML','psutil','nvidia-ml-py'):\n"
            "    try: print(d, m.version(d))\n    except Exception: print(d, '-')")
    return ", ".join(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split("\n")[:-1])


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def has_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=shutil.which("python3") or sys.executable, help="target interpreter")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cold", type=int, default=3, help="no-bytecode --quick runs (default 3)")
    ap.add_argument("--samples", type=int, default=200, help="sampler rows per NVML path (0: skip)")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--label", default=socket.gethostname())
    ap.add_argument("--baseline-src", type=Path, help="another checkout's src/ (the code before): its rows "
                    "for import sparkops.api, --help, explain G3 and preflight --quick run interleaved with these")
    ap.add_argument("--no-torch-rows", action="store_true", help="skip full preflight, the bare torch import and "
                    "the seeds' script (the rows that import torch)")
    args = ap.parse_args()
    env = dict(os.environ)
    env.pop("SPARKOPS_NO_FAST", None)
    tmp = Path(tempfile.mkdtemp())
    started = time.monotonic()
    load0 = os.getloadavg()
    tv = bp.target_versions(args.python)
    has_torch = bool(tv)
    rows = rows_for(args.python, tmp, has_torch and not args.no_torch_rows)
    envs: dict[str, dict[str, str]] = {}
    if args.baseline_src:
        rows, base_envs = with_baseline(rows, env, args.baseline_src.resolve())
        envs.update(base_envs)
    first, samples, codes = measure(rows, max(1, args.runs), env, envs)
    cold = cold_runs(args.python, tmp, env, args.cold) if args.cold else []
    used = one_quick_run(args.python, tmp, env)
    cpu = cpu_rounds(args.python, tmp, env, max(1, args.runs), args.baseline_src.resolve() if args.baseline_src else None)
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in samples.items()}
    report = json.loads((tmp / "f.json").read_text()) if (tmp / "f.json").exists() else {}
    gpu = has_gpu()
    quick_goal = QUICK_GOAL_GPU_S if gpu else QUICK_GOAL_CPU_S

    goals: list[tuple[str, str, str, bool | None]] = []
    q = med[bp.QUICK]
    goals.append((f"preflight --quick median ({'GPU machine' if gpu else 'no-GPU machine'})", f"<= {quick_goal} s",
                  f"{q:.3f} s", q <= quick_goal))
    if SEEDS_ROW in med:
        goals.append(("preflight --quick vs the seeds' shell preflight, same run", ">= 20x",
                      f"{med[SEEDS_ROW] / q:.1f}x ({med[SEEDS_ROW]:.2f} s vs {q:.3f} s)", med[SEEDS_ROW] / q >= 20))
    if cold:
        c = statistics.median(cold)
        goals.append(("preflight --quick, first run without bytecode", f"<= {COLD_GOAL_S} s",
                      f"{c:.3f} s (median of {len(cold)})", c <= COLD_GOAL_S))
    for row in (HELP, VERSION, EXPLAIN, SCHEMA):
        goals.append((row, f"<= {FAST_GOAL_S} s", f"{med[row]:.3f} s", med[row] <= FAST_GOAL_S))
    goals.append(("import sparkops does no work", f"<= floor + 0.01 s ({med[FLOOR]:.3f} s)",
                  f"{med[IMPORT]:.3f} s", med[IMPORT] <= med[FLOOR] + 0.01))
    if bp.FULL in med:
        r = med[bp.FULL] / med[bp.BARE_CAPABILITY]
        goals.append(("preflight full vs one bare torch import + capability, same run", "<= 1.0x",
                      f"{r:.2f}x ({med[bp.FULL]:.2f} s vs {med[bp.BARE_CAPABILITY]:.2f} s)", r <= 1.0))
    sampler_lines: list[str] = []
    if args.samples:
        import bench_sampler as bs

        results = bs.sampler_results(max(5, args.samples))
        sampler_lines = [*bs.TABLE_HEAD, *bs.table_rows(results)]
        ours = next((r for name, r, _ in results if name.startswith("NVML stand-in") and r), None)
        if ours is not None:
            goals.append(("watch sampler's own cost per row (NVML stand-in: our code + /proc)",
                          f"<= {SAMPLER_GOAL_MS} ms CPU", f"{ours['cpu']:.3f} ms", ours["cpu"] <= SAMPLER_GOAL_MS))

    now = datetime.now(timezone.utc)  # noqa: UP017
    lines = [
        f"# spark-ops command timings on {args.label} ({now:%Y-%m-%d %H:%M} UTC)", "",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()}), GPU: "
        f"{report.get('identity', {}).get('gpu_name') or ('present' if gpu else 'none')}; Linux {platform.release()}",
        f"- load average at start {load0[0]:.2f}, at end {load1[0]:.2f} (other work shares this machine when > 0.5)",
        f"- tool python: {sys.executable} {sys.version.split()[0]}; {versions()}",
        f"- target python: {args.python} (torch, CUDA, python: {tv or 'no torch'})",
        f"- command: `python benchmarks/bench_cli.py {' '.join(sys.argv[1:])}`; "
        f"{time.monotonic() - started:.0f} s in all",
        f"- {args.runs} interleaved rounds after one first run of each row; fresh process each; wall seconds",
        "- bytecode: " + ("NOT written (PYTHONDONTWRITEBYTECODE / -B): every run compiles the modules it imports from "
                          "source unless they were byte-compiled beforehand (python -m compileall), as pip does at "
                          "install" if sys.flags.dont_write_bytecode else "written and reused after the first run"),
        f"- one more preflight --quick (lines): {used}",
        "", "## Goals (issue 23)", "", "| goal | target | measured | result |", "|---|---|---|---|",
    ]
    lines += [f"| {g} | {t} | {m} | {'PASS' if ok else 'FAIL'} |" for g, t, m, ok in goals]
    lines += ["", "## preflight --quick (lines): CPU in the tool's process", "",
              f"{args.runs} runs each, alternating; seconds (median, min); wall from when the interpreter had started", "",
              "| code | CPU in process | CPU min | CPU in children | wall | runs |", "|---|---|---|---|---|---|"]
    for name, got in cpu.items():
        if got:
            lines.append(f"| {name} | {statistics.median(c for _w, c, _k in got):.3f} | {min(c for _w, c, _k in got):.3f} | "
                         f"{statistics.median(k for _w, _c, k in got):.3f} | {statistics.median(w for w, _c, _k in got):.3f} | "
                         f"{len(got)} |")
    lines += ["", "## Every row", "", "| command | median s | min s | max s | first run s | exit codes |",
              "|---|---|---|---|---|---|"]
    for k, v in samples.items():
        lines.append(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {max(v):.3f} | {first[k]:.3f} | {sorted(codes[k])} |")
    if cold:
        lines.append(f"| {COLD} | {statistics.median(cold):.3f} | {min(cold):.3f} | {max(cold):.3f} | - | - |")
    if sampler_lines:
        lines += ["", "## Watch sampler cost per row", "", *sampler_lines]
    if report:
        lines += ["", f"Full run: verdict {report.get('verdict')}, platform {report.get('platform')}"]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"cli-{args.label}-{now:%Y%m%d}.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
