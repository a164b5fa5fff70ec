"""``preflight --quick`` on the lite model runtime against the same tree on pydantic (SPARKOPS_NO_LITE=1).

Fresh process each, alternating, one warm-up round not counted; wall of the whole command and the
CPU of the process and its children (rusage). The tool python is this interpreter.

    python benchmarks/bench_lite_ab.py --rounds 15 -- --offline --python /usr/bin/python3
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("rest", nargs="*", help="extra preflight options")
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "sparkops", "preflight", "--quick", "--format", "lines", "--report", os.devnull,
           *args.rest]
    got: dict[str, list[tuple[float, float]]] = {"lite": [], "pydantic (SPARKOPS_NO_LITE=1)": []}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as cwd:
        for i in range(args.rounds + 1):
            for mode in got:
                env = {**os.environ, "SPARKOPS_NO_LITE": "" if mode == "lite" else "1"}
                r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
                subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, check=False, timeout=120)
                wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
                if i:
                    got[mode].append((wall, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime))
    med = statistics.median
    print(f"{args.rounds} alternating rounds, load average {load0:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"command: {' '.join(cmd[1:])}")
    print("| runtime | wall median s | wall min s | CPU median s (process + children) |\n|---|---:|---:|---:|")
    for mode, rows in got.items():
        print(f"| {mode} | {med(w for w, _c in rows):.3f} | {min(w for w, _c in rows):.3f} | "
              f"{med(c for _w, c in rows):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
