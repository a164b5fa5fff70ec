#!/usr/bin/env python3
"""``spark-ops thermal analyze`` on a long log: wall time and peak RSS, streamed.

Usage: python benchmarks/bench_analyze_rows.py [--rows 1000000] [--runs 3] [--baseline REF] [--dir DIR] [--out DIR]
       [--tag TAG]
Writes benchmarks/results/analyze-rows-<arch>-<date>[-TAG].md (best and median of the runs, the load average before
and after: on a shared machine the load decides much of the wall time). Goal (issue 17): a million rows in <= 10 s
and <= 150 MB RSS on a 2-core machine (before: 65-77 s, up to 1.5 GB).

The log repeats tests/fixtures/raw/thermal/gb10_normal_plateau.csv's rows (all 16 columns of this
tool's own format) with timestamps one second apart. Each run is a fresh ``python -m sparkops
thermal analyze --json`` process (peak RSS from wait4); a second line times the reader alone
(``LogStream.blocks``, no judging) in this process, to split reading from judging. ``--baseline REF`` checks REF
out into a temporary ``git worktree`` and times its ``thermal analyze`` on the same log, its runs alternating
with this tree's (so both see the same load), and says whether both printed the same JSON.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "fixtures" / "raw" / "thermal" / "gb10_normal_plateau.csv"


def make_log(path: Path, rows: int) -> None:
    lines = SOURCE.read_text().splitlines()
    header, body = lines[0], [ln.split(", ", 1)[1] for ln in lines[1:]]
    start = time.mktime((2025, 11, 24, 20, 0, 0, 0, 0, -1))
    with path.open("w") as fh:
        fh.write(header + "\n")
        for i in range(rows):
            t = time.localtime(start + i)
            fh.write(f"{t.tm_year}/{t.tm_mon:02d}/{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.000, "
                     f"{body[i % len(body)]}\n")


def run_child(log: Path, root: Path = ROOT, out: Path | None = None) -> tuple[float, float, int]:
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(root / "src"))
    t0 = time.perf_counter()
    with (out.open("wb") if out is not None else open(os.devnull, "wb")) as sink:
        proc = subprocess.Popen([sys.executable, "-m", "sparkops", "thermal", "analyze", "--json", str(log)],
                                stdout=sink, stderr=subprocess.DEVNULL, env=env, cwd=root)
        _pid, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def reader_only(log: Path) -> tuple[float, int]:
    sys.path.insert(0, str(ROOT / "src"))
    import gc

    from sparkops.monitor.csvlog import LogStream

    gc.disable()  # as analyze_log runs it
    t0 = time.perf_counter()
    n = sum(blk.n for blk in LogStream(log).blocks(on_reorder=lambda: None))
    took = time.perf_counter() - t0
    gc.enable()
    return took, n


def baseline_tree(ref: str, where: Path) -> Path:
    import subprocess

    dest = where / f"sparkops-baseline-{ref[:12]}"
    if not dest.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(dest), ref], check=True,
                       capture_output=True)
    return dest


def table(runs: list[tuple[float, float, int]]) -> list[str]:
    lines = ["| run | wall s | peak RSS MB | exit |", "|---|---|---|---|"]
    lines += [f"| {i + 1} | {w:.1f} | {r:.0f} | {rc} |" for i, (w, r, rc) in enumerate(runs)]
    walls = [w for w, _r, _rc in runs]
    return [*lines, "", f"best wall {min(walls):.1f} s, median {statistics.median(walls):.1f} s; peak RSS max "
            f"{max(r for _w, r, _rc in runs):.0f} MB"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tag", default="", help="suffix of the result file (keeps an earlier record of the day)")
    ap.add_argument("--baseline", default="", help="a git ref to time alongside this tree (e.g. the commit before)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    log = args.dir / f"sparkops-bench-{args.rows}-rows.csv"
    t0 = time.perf_counter()
    make_log(log, args.rows)
    gen_s = time.perf_counter() - t0
    ncols = len(SOURCE.read_text().splitlines()[0].split(","))
    size = log.stat().st_size
    base = baseline_tree(args.baseline, args.dir) if args.baseline else None
    load_before = os.getloadavg()
    runs, base_runs = [], []
    same = True
    for i in range(args.runs):
        runs.append(run_child(log, out=args.dir / "bench-new.json"))
        if base is not None:
            base_runs.append(run_child(log, base, out=args.dir / "bench-base.json"))
            if i == 0:
                same = (args.dir / "bench-new.json").read_bytes() == (args.dir / "bench-base.json").read_bytes()
    read_s, n = reader_only(log)
    load = os.getloadavg()[0]
    if base is not None:
        import subprocess

        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False,
                       capture_output=True)
    log.unlink()
    now = datetime.now(timezone.utc)  # noqa: UP017
    arch = platform.machine()
    lines = [f"# thermal analyze on {args.rows} rows (vm, {now:%Y-%m-%d %H:%M} UTC)", "",
             f"- machine: {arch}, {os.cpu_count()} CPUs (shared with other jobs; load average (1/5/15 min) "
             f"{'/'.join(f'{x:.1f}' for x in load_before)} before the runs, {load:.1f} at the end), "
             f"python {platform.python_version()}",
             f"- log: {size} bytes, {args.rows} rows of {ncols} columns, generated in {gen_s:.1f} s",
             "- goal: <= 10 s wall, <= 150 MB peak RSS", "",
             f"## this tree{' (runs alternating with the baseline)' if base is not None else ''}", "", *table(runs)]
    if base is not None:
        lines += ["", f"## baseline {args.baseline}", "", *table(base_runs), "",
                  f"same JSON report from both: {'yes' if same else 'NO'}"]
    lines += ["", f"Reader alone (LogStream.blocks, no judging), in this process: {read_s:.1f} s for {n} samples "
              f"({read_s / max(n, 1) * 1e6:.1f} µs a row); the rest of the wall time is the judging and start-up."]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    dest = args.out / f"analyze-rows-{arch}-{now:%Y%m%d}{'-' + args.tag if args.tag else ''}.md"
    dest.write_text(text)
    sys.stdout.write(text + f"wrote {dest}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
