#!/usr/bin/env python3
"""The benchmark suite: one command that measures and records, on whatever machine it runs.

    python benchmarks/suite.py [--python PY] [--out DIR] [--runs N] [--quick-only]

Side by side, in one run, so every timing is a ratio between rows measured under the same conditions:

1. preflight: ``spark-ops preflight --quick`` and full mode beside a bare
   ``python -c "import torch; torch.cuda.get_device_capability()"`` and beside the seeds' shell
   preflight (``benchmarks/seeds_preflight.sh``: two torch imports plus nvidia-smi); fresh process
   each, one warm-up each, interleaved rounds (``bench_preflight.py``'s timing);
2. bandwidth: ``spark-ops bandwidth`` end to end, then in ONE child process of the target python the
   probe's own measurement (``_measure_script.measure``, sized as the tool sizes it), a best-effort
   copy (a large preallocated ``copy_``, 2 x 4 GB when memory allows) and the seeds' clone probe
   (verbatim: 4 GB cloned 20 times), each with its peak allocated memory, probe and best-effort
   alternating round by round;
3. the monitor sampler's CPU cost per sample (``bench_sampler.py``).

Writes ``benchmarks/results/suite-<host>-<date>.md``: machine, versions, date, every row, and each
goal of issue 7 marked PASS / FAIL / skipped with the reason. Without a GPU (or torch) the rows that
need one say "skipped: no GPU"; ``--quick-only`` runs only what needs neither (preflight --quick
beside the seeds' shell script, and the sampler). Finishes in well under 5 minutes on an H200.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
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
sys.path.insert(0, str(ROOT / "src"))

import bench_preflight as bp  # noqa: E402
import bench_sampler as bs  # noqa: E402

SEEDS = HERE / "seeds_preflight.sh"
SEEDS_ROW = "seeds' shell preflight (benchmarks/seeds_preflight.sh)"
MEASURE_SCRIPT = ROOT / "src" / "sparkops" / "bandwidth" / "_measure_script.py"
CHILD_TIMEOUT_S = 240

# Runs in the target python (torch): the probe's measurement, a best-effort copy and the seeds' clone
# probe in one process, probe and best-effort alternating; prints one JSON object.
BANDWIDTH_CHILD = r'''
import importlib.util, json, sys, time
spec = importlib.util.spec_from_file_location("measure_script", sys.argv[1])
ms = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ms)
cfg, rounds, best_cap = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try:
    import torch
except Exception as exc:
    print(json.dumps({"skipped": "no GPU: torch does not import (%s)" % exc})); sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({"skipped": "no GPU: torch %s sees no CUDA device" % torch.__version__})); sys.exit(0)
torch.cuda.init()
free, total = torch.cuda.mem_get_info()
GB = 1e9

def events():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

def best_effort(nbytes):
    """A large preallocated copy_, timed like the probe (events, warm-up), many iterations per rep."""
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    n = nbytes // 4
    src = torch.empty(n, dtype=torch.float32, device="cuda"); src.fill_(1.0)
    dst = torch.empty_like(src); dst.fill_(0.0)
    for _ in range(3):
        dst.copy_(src)
    e0, e1 = events()
    e0.record(); dst.copy_(src); e1.record(); e1.synchronize()
    inner = max(1, int(10.0 / max(e0.elapsed_time(e1), 1e-3)))
    gbs = []
    for _ in range(20):
        e0.record()
        for _ in range(inner):
            dst.copy_(src)
        e1.record(); e1.synchronize()
        gbs.append(2 * n * 4 * inner / (e0.elapsed_time(e1) / 1e3) / GB)
    peak = torch.cuda.max_memory_allocated()
    del src, dst
    torch.cuda.synchronize(); torch.cuda.empty_cache()
    gbs.sort()
    return {"bytes_per_buffer": n * 4, "gbs_median": gbs[len(gbs) // 2], "gbs_max": gbs[-1], "peak_allocated_bytes": peak,
            "iterations_per_rep": inner}

def seeds_clone():
    """The seeds' clone probe, verbatim (plus its peak memory and the whole snippet's wall time)."""
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    w0 = time.time()
    x = torch.randn(1_000_000_000, device="cuda", dtype=torch.float32); torch.cuda.synchronize(); t0=time.time()
    for _ in range(20): y = x.clone()
    torch.cuda.synchronize(); dt=time.time()-t0; gbps=(x.numel()*4*2*20)/dt/1e9
    wall = time.time() - w0
    peak = torch.cuda.max_memory_allocated()
    del x, y
    torch.cuda.synchronize(); torch.cuda.empty_cache()
    return {"gbs": gbps, "timed_s": dt, "wall_s": wall, "peak_allocated_bytes": peak}

best_bytes = min(best_cap, int(0.4 * free / 2))
best_bytes -= best_bytes % (2 << 20)
probe, best = [], []
for _ in range(rounds):
    t0 = time.perf_counter()
    p = ms.measure(cfg)
    p["call_s"] = time.perf_counter() - t0
    probe.append(p)
    best.append(best_effort(best_bytes))
seeds = seeds_clone() if free > 13 * GB else {"skipped": "only %.1f GB free: the seeds' probe needs 12 GB" % (free / GB)}
print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "free_bytes": free,
                  "total_bytes": total, "probe": probe, "best_effort": best, "seeds_clone": seeds}))
'''


# --------------------------------------------------------------------------- helpers
def run(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int | None, str, str, float]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return None, out, f"timed out after {timeout:g} s", time.perf_counter() - t0
    except OSError as exc:
        return None, "", str(exc), time.perf_counter() - t0


def gpu_line() -> str:
    if not shutil.which("nvidia-smi"):
        return "no GPU (nvidia-smi not found)"
    rc, out, err, _ = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], 20)
    return out.strip().replace("\n", "; ") if rc == 0 and out.strip() else f"no GPU ({(err or out).strip()[:120]})"


def median(xs: list[float]) -> float:
    return statistics.median(xs)


class Goals:
    """Issue 7's goals, each PASS / FAIL / skipped with the measured value."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str]] = []

    def check(self, goal: str, target: str, value: str, ok: bool) -> None:
        self.rows.append((goal, target, value, "PASS" if ok else "FAIL"))

    def skip(self, goal: str, target: str, why: str) -> None:
        self.rows.append((goal, target, "-", f"skipped: {why}"))

    def table(self) -> list[str]:
        return ["| goal | target | measured | result |", "|---|---|---|---|",
                *(f"| {g} | {t} | {v} | {r} |" for g, t, v, r in self.rows)]


# --------------------------------------------------------------------------- sections
def preflight_section(python: str, runs: int, quick_only: bool, has_torch: bool, goals: Goals) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="suite-preflight-"))
    try:
        return _preflight_section(python, runs, quick_only, has_torch, goals, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _preflight_section(python: str, runs: int, quick_only: bool, has_torch: bool, goals: Goals,
                       tmp: Path) -> list[str]:
    rows = bp.preflight_rows(python, tmp)
    keep = [bp.QUICK] if quick_only else [bp.QUICK, bp.FULL] + ([bp.BARE_CAPABILITY, bp.BARE_IMPORT] if has_torch else [])
    rows = {k: v for k, v in rows.items() if k in keep}
    rows[SEEDS_ROW] = ["bash", str(SEEDS)]
    env = {**os.environ, "PYTHON": python}
    samples, codes = bp.measure_interleaved(rows, runs, env)
    med = {k: median(v) for k, v in samples.items()}
    bare = med.get(bp.BARE_CAPABILITY)
    lines = ["## Preflight wall time", "",
             f"{runs} interleaved rounds after one warm-up of each row; a fresh process each time; seconds.", "",
             "| command | median s | min s | max s | exit codes | x bare import+CUDA init | x `--quick` |",
             "|---|---|---|---|---|---|---|"]
    for k, v in samples.items():
        ratio = f"{med[k] / bare:.2f}" if bare else "skipped: no torch"
        lines.append(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {max(v):.3f} | {sorted(codes[k])} | {ratio} | "
                     f"{med[k] / med[bp.QUICK]:.1f} |")
    if not has_torch:
        lines += ["", f"The bare torch rows are skipped: {python} has no torch (no GPU to judge either)."]
    full_report = json.loads((tmp / "f.json").read_text()) if (tmp / "f.json").exists() else {}
    speedup = med[SEEDS_ROW] / med[bp.QUICK]
    if has_torch:
        goals.check("preflight --quick vs the seeds' shell preflight (2 torch imports + nvidia-smi)", ">= 20x faster",
                    f"{speedup:.1f}x ({med[SEEDS_ROW]:.2f} s vs {med[bp.QUICK]:.2f} s)", speedup >= 20)
    else:
        goals.skip("preflight --quick vs the seeds' shell preflight", ">= 20x faster",
                   f"no torch in {python}: the seeds' imports fail at once ({speedup:.1f}x measured, not meaningful)")
    if bare and bp.FULL in med:
        r = med[bp.FULL] / bare
        goals.check("preflight full vs one bare torch import + CUDA init", "<= 1.2x", f"{r:.2f}x ({med[bp.FULL]:.2f} s "
                    f"vs {bare:.2f} s)", r <= 1.2)
    else:
        goals.skip("preflight full vs one bare torch import + CUDA init", "<= 1.2x",
                   "--quick-only" if quick_only else f"no torch in {python}")
    if full_report:
        n = len(full_report.get("checks", {}))
        goals.check("gotchas judged by full preflight (the seeds' script judges 5)", "10", str(n), n == 10)
        lines += ["", f"Full run: verdict {full_report.get('verdict')}, platform {full_report.get('platform')}; checks:",
                  "```", json.dumps(full_report.get("checks", {}), indent=1), "```"]
    lines += ["", "Where `--quick` spends its time (one in-process run; probes run concurrently):", "```",
              bp.quick_breakdown(python, tmp), "```"]
    return lines


def bandwidth_section(python: str, rounds: int, goals: Goals) -> list[str]:
    from sparkops.bandwidth import probe
    from sparkops.knowledge import load

    lines = ["## Device memory bandwidth", ""]
    goal_names = [("probe copy vs best-effort copy, same run", ">= 98%"),
                  ("probe peak allocated", "<= 2 GB (seeds' clone probe: ~12 GB)"),
                  ("probe GPU time", "< 2 s")]
    rc, out, err, wall = run([sys.executable, "-m", "sparkops", "bandwidth", "--python", python, "--json"], 180)
    try:
        tool = json.loads(out)
    except ValueError:
        tool = {"status": "failed", "reason": (err or out).strip()[-300:] or f"exit {rc}"}
    if tool.get("status") != "measured":
        why = tool.get("reason", "")
        kind = tool.get("kind")
        label = {"no_torch": "no torch", "no_gpu": "no GPU", "not_found": "no target python"}.get(
            kind, "no GPU" if "no CUDA" in why else tool.get("status", "failed"))
        lines += [f"`spark-ops bandwidth`: {tool.get('status')} (exit {rc}, {wall:.1f} s): {why}", "",
                  f"skipped: {label}: the side-by-side rows need a measurement here."]
        for g, t in goal_names:
            goals.skip(g, t, f"{label} ({why[:100]})")
        return lines
    m = tool["measurement"]
    lines += [f"`spark-ops bandwidth --python {python}` end to end: exit {rc}, {wall:.1f} s wall (collect + torch "
              f"import + measure); buffers {m['buffers']} x {m['buffer_bytes'] / 2**20:.0f} MiB ({m['sizing']}); "
              f"peak allocated {m['peak_allocated_bytes'] / 1e9:.3f} GB; {m['gpu_time_s']:.3f} s GPU time; "
              f"G5 {tool['G5']['status']}: {tool['G5']['summary']}", ""]
    settings = load().thresholds.bandwidth
    config = probe.script_config(settings, tool.get("free_memory_bytes"))
    crc, cout, cerr, cwall = run([python, "-c", BANDWIDTH_CHILD, str(MEASURE_SCRIPT), json.dumps(config), str(rounds),
                                  str(4 * 10**9)], CHILD_TIMEOUT_S)
    try:
        res = json.loads(cout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        lines.append(f"the side-by-side child failed (exit {crc}): {(cerr or cout).strip()[-500:]}")
        for g, t in goal_names:
            goals.skip(g, t, "the side-by-side child failed")
        return lines
    if "skipped" in res:
        lines.append(f"skipped: {res['skipped']}")
        for g, t in goal_names:
            goals.skip(g, t, res["skipped"])
        return lines
    probes = [p for p in res["probe"] if p.get("methods")]
    if not probes:
        reason = res["probe"][0].get("refused") or res["probe"][0].get("error")
        lines.append(f"the probe did not measure in the child: {reason}")
        for g, t in goal_names:
            goals.skip(g, t, f"probe: {reason}")
        return lines
    by = {name: [next(x["gbs_median"] for x in p["methods"] if x["method"] == name) for p in probes]
          for name in ("copy", "read")}
    best = res["best_effort"]
    best_copy = median([b["gbs_median"] for b in best])
    seeds = res["seeds_clone"]
    per_round_best = ", ".join(f"{b['gbs_median']:.0f}" for b in best)
    probe_peak = max(p["peak_allocated_bytes"] for p in probes)
    gpu_time = max(p["gpu_time_s"] for p in probes)
    lines += [f"One child process of {python} ({res['device']}, torch {res['torch']}, "
              f"{res['free_bytes'] / 2**30:.1f} GiB free at start), {len(probes)} rounds of probe then best-effort; "
              f"the seeds' clone probe last; {cwall:.1f} s wall for the whole child. GB/s = 1e9 bytes/s; copies "
              "count bytes read + written, the read method bytes read.", "",
              "| method | GB/s (median of rounds) | per round | peak allocated | GPU / timed s | vs best-effort copy |",
              "|---|---|---|---|---|---|",
              f"| probe: copy (`dst.copy_(src)`, {probes[0]['buffers']} x {probes[0]['buffer_bytes'] / 2**20:.0f} MiB) | "
              f"{median(by['copy']):.1f} | {', '.join(f'{x:.0f}' for x in by['copy'])} | {probe_peak / 1e9:.3f} GB | "
              f"{gpu_time:.3f} (whole probe) | {median(by['copy']) / best_copy:.1%} |",
              f"| probe: read (`torch.sum(src)`) | {median(by['read']):.1f} | {', '.join(f'{x:.0f}' for x in by['read'])} "
              f"| (same buffers) | (same run) | {median(by['read']) / best_copy:.1%} |",
              f"| best-effort copy (`dst.copy_(src)`, 2 x {best[0]['bytes_per_buffer'] / 1e9:.2f} GB, "
              f"{best[0]['iterations_per_rep']} copies/rep, best {max(b['gbs_max'] for b in best):.0f}) | {best_copy:.1f} | "
              f"{per_round_best} | {max(b['peak_allocated_bytes'] for b in best) / 1e9:.2f} GB "
              "| - | 100% |"]
    if "skipped" in seeds:
        lines.append(f"| seeds' clone probe | skipped: {seeds['skipped']} | | | | |")
    else:
        lines.append(f"| seeds' clone probe (4 GB `x.clone()` x 20, verbatim) | {seeds['gbs']:.1f} | - | "
                     f"{seeds['peak_allocated_bytes'] / 1e9:.2f} GB | {seeds['timed_s']:.3f} timed, {seeds['wall_s']:.2f} "
                     f"with randn | {seeds['gbs'] / best_copy:.1%} |")
    ratio = median(by["copy"]) / best_copy
    goals.check("probe copy vs best-effort copy, same run", ">= 98%", f"{ratio:.1%} ({median(by['copy']):.0f} vs "
                f"{best_copy:.0f} GB/s)", ratio >= 0.98)
    goals.check("probe peak allocated", "<= 2 GB (seeds' clone probe: ~12 GB)", f"{probe_peak / 1e9:.3f} GB"
                + ("" if "skipped" in seeds else f" (seeds' clone: {seeds['peak_allocated_bytes'] / 1e9:.1f} GB)"),
                probe_peak <= 2e9)
    goals.check("probe GPU time", "< 2 s", f"{gpu_time:.3f} s (wall in the child incl. freeing: "
                f"{max(p['call_s'] for p in probes):.2f} s)", gpu_time < 2.0)
    return lines


def sampler_section(n: int) -> list[str]:
    results = bs.sampler_results(n)
    return ["## Sampler cost per sample", "",
            f"{n} rows per NVML path, {max(5, n // 4)} for nvidia-smi, after 3 warm-up rows; CPU ms = this process "
            "(all threads), child = nvidia-smi processes, wall = median.", "", *bs.TABLE_HEAD, *bs.table_rows(results)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=shutil.which("python3") or sys.executable,
                    help="target interpreter (the one with torch); default python3 on PATH")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--runs", type=int, default=5, help="interleaved preflight rounds (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="probe / best-effort rounds (default 3)")
    ap.add_argument("--samples", type=int, default=200, help="sampler rows per NVML path (default 200)")
    ap.add_argument("--quick-only", action="store_true",
                    help="only what needs no torch and no GPU: preflight --quick beside the seeds' script, the sampler")
    args = ap.parse_args()
    started = time.perf_counter()
    now = datetime.now(timezone.utc)  # noqa: UP017 (py3.10 target)
    from sparkops import __version__

    versions = bp.target_versions(args.python)
    has_torch = bool(versions)
    goals = Goals()
    body = preflight_section(args.python, max(1, args.runs), args.quick_only, has_torch, goals)
    body += [""]
    if args.quick_only:
        body += ["## Device memory bandwidth", "", "skipped: --quick-only"]
    else:
        body += bandwidth_section(args.python, max(1, args.rounds), goals)
    body += [""] + sampler_section(max(5, args.samples if not args.quick_only else min(args.samples, 50)))
    head = [f"# benchmark suite on {socket.gethostname()} ({now:%Y-%m-%d %H:%M} UTC)", "",
            f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
            f"- GPU: {gpu_line()}",
            f"- target python: {args.python} (torch, CUDA, python: {versions or 'no torch'})",
            f"- tool: dgx-spark-ops {__version__} on python {platform.python_version()}",
            f"- command: `python benchmarks/suite.py {' '.join(sys.argv[1:])}`".rstrip(),
            f"- total wall time: {time.perf_counter() - started:.0f} s", "",
            "## Goals (issue 7)", "", *goals.table(), ""]
    text = "\n".join(head + body) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    host = re.sub(r"[^A-Za-z0-9_.-]+", "-", socket.gethostname()) or "host"
    path = args.out / f"suite-{host}-{now:%Y%m%d}.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
