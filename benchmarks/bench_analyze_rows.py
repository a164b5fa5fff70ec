#!/usr/bin/env python3
"""``spark-ops thermal analyze`` on a long log: wall time and peak RSS, streamed.

Usage: python benchmarks/bench_analyze_rows.py [--rows 1000000] [--runs 3] [--dir DIR] [--out DIR] [--tag TAG]
Writes benchmarks/results/analyze-rows-<arch>-<date>[-TAG].md (best and median of the runs, the load average before
and after: on a shared machine the load decides much of the wall time). Goal (issue 17): a million rows in <= 10 s
and <= 150 MB RSS on a 2-core machine (before: 65-77 s, up to 1.5 GB).

The log repeats tests/fixtures/raw/thermal/gb10_normal_plateau.csv's rows (all 16 columns of this
tool's own format) with timestamps one second apart. Each run is a fresh ``python -m sparkops
thermal analyze --json`` process (peak RSS from wait4); a second line times the reader alone
(``LogStream`` with no judging) in this process, to split reading from judging.
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


def run_child(log: Path) -> tuple[float, float, int]:
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sparkops", "thermal", "analyze", "--json", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def reader_only(log: Path) -> tuple[float, int]:
    sys.path.insert(0, str(ROOT / "src"))
    from sparkops.monitor.csvlog import LogStream

    t0 = time.perf_counter()
    n = sum(1 for _ in LogStream(log).samples())
    return time.perf_counter() - t0, n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tag", default="", help="suffix of the result file (keeps an earlier record of the day)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    log = args.dir / f"sparkops-bench-{args.rows}-rows.csv"
    t0 = time.perf_counter()
    make_log(log, args.rows)
    gen_s = time.perf_counter() - t0
    ncols = len(SOURCE.read_text().splitlines()[0].split(","))
    size = log.stat().st_size
    load_before = os.getloadavg()
    runs = [run_child(log) for _ in range(args.runs)]
    read_s, n = reader_only(log)
    load = os.getloadavg()[0]
    log.unlink()
    now = datetime.now(timezone.utc)  # noqa: UP017
    arch = platform.machine()
    lines = [f"# thermal analyze on {args.rows} rows (vm, {now:%Y-%m-%d %H:%M} UTC)", "",
             f"- machine: {arch}, {os.cpu_count()} CPUs (shared with other jobs; load average (1/5/15 min) "
             f"{'/'.join(f'{x:.1f}' for x in load_before)} before the runs, {load:.1f} at the end), "
             f"python {platform.python_version()}",
             f"- log: {size} bytes, {args.rows} rows of {ncols} columns, generated in {gen_s:.1f} s",
             "- goal: <= 10 s wall, <= 150 MB peak RSS", "",
             "| run | wall s | peak RSS MB | exit |", "|---|---|---|---|"]
    lines += [f"| {i + 1} | {w:.1f} | {r:.0f} | {rc} |" for i, (w, r, rc) in enumerate(runs)]
    walls = [w for w, _r, _rc in runs]
    lines += ["", f"best wall {min(walls):.1f} s, median {statistics.median(walls):.1f} s; peak RSS max "
              f"{max(r for _w, r, _rc in runs):.0f} MB"]
    lines += ["", f"Reader alone (LogStream, both passes, no judging), in this process: {read_s:.1f} s for {n} samples "
              f"({read_s / max(n, 1) * 1e6:.1f} µs a row); the rest of the wall time is the judging (Detector.feed)."]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    dest = args.out / f"analyze-rows-{arch}-{now:%Y%m%d}{'-' + args.tag if args.tag else ''}.md"
    dest.write_text(text)
    sys.stdout.write(text + f"wrote {dest}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
