#!/usr/bin/env python3
"""What ``preflight --quick`` cannot avoid paying, each part alone in a fresh process (issue 23).

Usage: python benchmarks/bench_quick_floor.py [--python PY] [--runs N] [--out DIR] [--label NAME]

``--quick``'s goal (0.36 s on the device H200) is only reachable if its unavoidable parts fit in it.
This measures those parts side by side, interleaved, fresh process each (what a user pays):

- the tool interpreter's floor (``python -c pass``);
- NVML's first answer (``nvmlInit`` + device count + one handle + its name), the GPU probe's floor;
- the target interpreter's quick probe alone (``_target_script.py quick``), the target probe's floor;
- the import of each heavy dependency alone (pydantic, PyYAML, psutil, typer, rich) and of the
  tool's layers (facts models, checks, report), which is what import weight costs;
- pydantic's plugin discovery alone (``entry_points(group="pydantic")``: every installed distribution's
  metadata, at the first validator a process builds) and ``--quick`` with plugins off, to see its share;
- the /proc scan with the facts models imported (compare with the models' import alone);
- ``preflight --quick`` itself, for the comparison in the same run.

The critical path cannot be shorter than the slowest of the parts that must run one after the other
(the interpreter, then the longest of NVML and the target child, which run in parallel), so the
table ends with that floor. Writes ``benchmarks/results/quick-floor-<label>-<date>.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_preflight as bp  # noqa: E402

TARGET_SCRIPT = ROOT / "src" / "sparkops" / "probes" / "_target_script.py"
NVML_FIRST_ANSWER = ("import pynvml; pynvml.nvmlInit(); n = pynvml.nvmlDeviceGetCount(); "
                     "h = pynvml.nvmlDeviceGetHandleByIndex(0) if n else None; "
                     "h and pynvml.nvmlDeviceGetName(h); pynvml.nvmlShutdown()")
FLOOR, NVML, TARGET, QUICK = ("python -c pass (tool python)", "NVML first answer (init, count, handle, name)",
                              "target's quick probe alone (_target_script.py quick)", "spark-ops preflight --quick")
IMPORTS = {
    "import pydantic": "import pydantic",
    "import yaml (PyYAML)": "import yaml",
    "import psutil": "import psutil",
    "import typer": "import typer",
    "import rich.console": "import rich.console",
    "import sparkops.facts.model (pydantic models)": "import sparkops.facts.model",
    "import sparkops.checks": "import sparkops.checks",
    "import sparkops.report": "import sparkops.report",
    "import sparkops.api": "import sparkops.api",
    # what pydantic does at its first validator: look for plugins in every installed distribution's entry points
    "pydantic plugin discovery (entry_points(group='pydantic'))":
        "from importlib.metadata import entry_points; entry_points(group='pydantic')",
    "import sparkops.facts.model + the /proc scan": "import os, sparkops.facts.model; "
        "from sparkops.probes.processes import proc_infos, scan; scan(proc_infos(), os.getpid(), 1 << 30, ('vllm',))",
}
NO_PLUGINS = "spark-ops preflight --quick, PYDANTIC_DISABLE_PLUGINS=__all__"


def has_gpu() -> bool:
    return bool(shutil.which("nvidia-smi")) or Path("/dev/nvidiactl").exists()


def rows_for(python: str, tmp: Path, gpu: bool) -> dict[str, list[str]]:
    rows = {FLOOR: [sys.executable, "-c", "pass"]}
    if gpu:
        rows[NVML] = [sys.executable, "-c", NVML_FIRST_ANSWER]
    rows[TARGET] = [python, str(TARGET_SCRIPT), "quick", '["flash-attn", "bitsandbytes"]']
    rows.update({name: [sys.executable, "-c", code] for name, code in IMPORTS.items()})
    rows[QUICK] = bp.preflight_rows(python, tmp)[bp.QUICK]
    rows[NO_PLUGINS] = ["env", "PYDANTIC_DISABLE_PLUGINS=__all__", *rows[QUICK]]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=shutil.which("python3") or sys.executable, help="target interpreter")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--label", default=socket.gethostname())
    args = ap.parse_args()

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    gpu = has_gpu()
    load0 = os.getloadavg()
    started = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows = rows_for(args.python, tmp, gpu)
        samples, codes = bp.measure_interleaved(rows, args.runs, env)
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    parallel = max(med.get(NVML, 0.0), med.get(TARGET, 0.0))
    floor = med[FLOOR] + max(0.0, parallel - med[FLOOR])  # both children start after the interpreter is up

    lines = [
        f"# What preflight --quick cannot avoid, on {args.label} ({started:%Y-%m-%d %H:%M} UTC)",
        "",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, GPU: {'present' if gpu else 'none'}; "
        f"Linux {platform.release()}",
        f"- load average at start {load0[0]:.2f}, at end {load1[0]:.2f}",
        f"- tool python: {sys.executable} {platform.python_version()}; bytecode written: "
        f"{not sys.flags.dont_write_bytecode and not os.environ.get('PYTHONDONTWRITEBYTECODE')}",
        f"- target python: {args.python}",
        f"- command: `python benchmarks/bench_quick_floor.py {' '.join(sys.argv[1:])}`",
        f"- {args.runs} interleaved rounds, fresh process each, wall seconds",
        "",
        "| part | median s | min s | max s | exit codes |",
        "|---|---|---|---|---|",
    ]
    for name, v in samples.items():
        if v:
            lines.append(f"| {name} | {statistics.median(v):.3f} | {min(v):.3f} | {max(v):.3f} | {sorted(codes[name])} |")
    lines += [
        "",
        f"Floor of the critical path (interpreter, then the slower of NVML and the target child in parallel): "
        f"**{floor:.3f} s**; preflight --quick measured {med[QUICK]:.3f} s in the same run, so "
        f"{med[QUICK] - floor:.3f} s is the tool's own work (imports, models, judging, rendering) not hidden "
        "behind the children.",
    ]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"quick-floor-{args.label}-{started:%Y%m%d}.md"
    path.write_text(text)
    print(text)
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
