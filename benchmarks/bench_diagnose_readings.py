#!/usr/bin/env python3
"""What the harness-only readings cost a ``diagnose`` call (issue 18, round 18ag).

Usage:
  python benchmarks/bench_diagnose_readings.py [--rounds 5] [--out FILE.md]

Over the CV's default sets (293 reports, benchmarks/diagnose_learn.py ``SETS``), in one process and one run, times
per case (a) ``learned.text_features`` with every yes/no reading (what ``_learned`` computed before round 18ag, and
what the CV harness still computes) vs with ``learned.WEIGHED`` only (what the shipped path computes up front now),
and (b) a whole ``diagnose_text`` call on the path before (every reading up front, the gate reading from them) vs the
shipped path (gate readings only when a gated gotcha would be answered). The two arms alternate within each round
(ABBA order) so drift on a shared machine falls on both; the median over rounds of each arm's mean per case is
printed, with the machine and its load average. The answers of the two paths are compared too (they must agree).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import diagnose_learn as dl  # noqa: E402

import sparkops.diagnose.learned as learned  # noqa: E402
from sparkops.diagnose import diagnose_text  # noqa: E402
from sparkops.diagnose.reading import line_roles  # noqa: E402
from sparkops.diagnose.rules import load  # noqa: E402
from sparkops.diagnose.text import from_text  # noqa: E402

REAL_FEATURES = learned.text_features
REAL_GATE = learned.gate_holds


def _before() -> None:
    """The path before round 18ag: every reading up front, the gate reading from them."""
    learned.text_features = lambda lines, roles, readings=None: REAL_FEATURES(lines, roles)
    learned.gate_holds = lambda g, lines, roles: (not learned.GATES.get(g)) or any(
        REAL_FEATURES(lines, roles)[r] for r in learned.GATES[g])


def _after() -> None:
    learned.text_features, learned.gate_holds = REAL_FEATURES, REAL_GATE


def _cpu() -> str:
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu ?"


def _per_case(fn, items) -> float:
    t0 = time.perf_counter()
    for it in items:
        fn(it)
    return (time.perf_counter() - t0) / len(items) * 1e3  # ms per case


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    kb = load()
    reports = [(c["set"] + "/" + c["id"], c["text"]) for c in dl.load_sets(list(dl.SETS))]
    read = []
    for key, text in reports:
        inp = from_text(text, key, kb.text_limits)
        read.append((inp.lines, line_roles(inp.lines)))
    diagnose_text(reports[0][1], kb=kb)  # warm: imports, compiled patterns
    feats: dict[str, list[float]] = {"all readings": [], "WEIGHED only": []}
    calls: dict[str, list[float]] = {"before": [], "shipped": []}
    for r in range(args.rounds):
        order = ("all readings", "WEIGHED only") if r % 2 == 0 else ("WEIGHED only", "all readings")
        for arm in order:
            asked = None if arm == "all readings" else learned.WEIGHED
            feats[arm].append(_per_case(lambda lr, asked=asked: REAL_FEATURES(lr[0], lr[1], asked), read))
        order = ("before", "shipped") if r % 2 == 0 else ("shipped", "before")
        for arm in order:
            _before() if arm == "before" else _after()
            calls[arm].append(_per_case(lambda kt: diagnose_text(kt[1], source=kt[0], kb=kb), reports))
        _after()
    _before()
    before = {k: diagnose_text(t, source=k, kb=kb).model_dump() for k, t in reports}
    _after()
    differ = sum(before[k] != diagnose_text(t, source=k, kb=kb).model_dump() for k, t in reports)
    load1 = os.getloadavg() if hasattr(os, "getloadavg") else ("?", "?", "?")
    out = [f"Machine: {platform.machine()}, {os.cpu_count()} logical CPUs, {_cpu()}, "
           f"Python {platform.python_version()}; load average at the end {load1[0]:.2f} / {load1[1]:.2f} / "
           f"{load1[2]:.2f}. {len(reports)} reports (the CV's default sets), {args.rounds} rounds, ABBA order.",
           "", "| what is timed | arm | ms per case, median of rounds | rounds (ms per case) |", "|---|---|---:|---|"]
    for name, arms in (("learned.text_features", feats), ("diagnose_text (whole call)", calls)):
        for arm, xs in arms.items():
            out.append(f"| {name} | {arm} | {statistics.median(xs):.3f} | {', '.join(f'{x:.3f}' for x in xs)} |")
    out += ["", f"Answers that differ between the two paths (Diagnosis compared whole): {differ} of {len(reports)}."]
    text = "\n".join(out) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
