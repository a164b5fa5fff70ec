"""Where ``preflight --quick``'s time goes, phase by phase and thread by thread (issue 23).

Each run is a fresh process that drives the real front door (``front.prestart`` then
``front.fast_preflight``, as ``spark-ops preflight --quick`` does) with timestamps around the
phases, and records the CPU each probe thread and the main thread spent (``time.thread_time``):
on a quick run the process is CPU-bound (its CPU ≈ its wall), so CPU is what a cut must remove.
``--profile`` adds one cProfile run (tottime and cumulative tops). Numbers are medians over
``--runs`` fresh processes; the machine and its load go into the header.

    python benchmarks/quick_timeline.py --runs 7 --out benchmarks/results --label x86_64-2core
"""

from __future__ import annotations

import os
import sys
import time

# A child run imports nothing else before its clock starts: a module this script imported first
# (argparse, subprocess, statistics...) would be one the tool's run no longer pays for.

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")


def child(argv: list[str], profile: bool) -> None:
    """One run in this process: print a JSON line of marks (s since start) and CPU per part."""
    t0, p0 = time.perf_counter(), time.process_time()
    import json

    marks: list[tuple[float, str]] = []
    cpu: dict[str, float] = {}

    def mark(name: str) -> None:
        marks.append((time.perf_counter() - t0, name))

    import importlib
    import threading

    from sparkops import front

    main0 = time.thread_time()
    front.prestart(argv)
    mark("prestart (children, NVML thread)")
    lite = os.environ.get("SPARKOPS_NO_LITE", "").strip() in ("", "0")  # the front end's choice (sparkops.core.lite)
    c = time.thread_time()
    if lite:
        from sparkops.core import modeling

        modeling.use_lite()
        cpu["main: choose the lite model runtime"] = time.thread_time() - c
        mark("chose the lite model runtime")
    else:
        import pydantic.fields  # noqa: F401 - what creating any model class imports (pydantic.types, annotated_types...)
        import pydantic.main  # noqa: F401
        from pydantic._internal import _model_construction as construction
        cpu["main: import pydantic"] = time.thread_time() - c
        mark("imported pydantic")
        trace_pydantic(construction, cpu, threading)
    import sparkops.probes as probes

    real_import = importlib.import_module

    def traced_import(name: str, *a: object, **kw: object) -> object:
        if name not in probes.PROBES.values():
            return real_import(name, *a, **kw)
        c0 = time.thread_time()
        mod = real_import(name, *a, **kw)
        cpu[f"probe {name.rsplit('.', 1)[-1]}: import"] = time.thread_time() - c0
        if not getattr(mod, "_timeline_traced", False):
            real_collect = mod.collect

            def collect(opts: object, _real=real_collect, _name=name) -> object:
                c1 = time.thread_time()
                mark(f"  [{threading.current_thread().name}] start")
                try:
                    return _real(opts)
                finally:
                    mark(f"  [{threading.current_thread().name}] end")
                    cpu[f"probe {_name.rsplit('.', 1)[-1]}: collect"] = time.thread_time() - c1
            mod.collect = collect
            mod._timeline_traced = True
        return mod

    importlib.import_module = traced_import
    c = time.thread_time()
    import sparkops.commands._preflight_run  # noqa: F401
    import sparkops.facts.workload  # noqa: F401
    cpu["main: import facts models"] = time.thread_time() - c
    mark("imported facts models")
    c = time.thread_time()
    import sparkops.api as api
    cpu["main: import api (knowledge, probes, redact)"] = time.thread_time() - c
    mark("imported api")

    def wrap(attr: str, label: str) -> None:
        real = getattr(api, attr)

        def timed(*a: object, **kw: object) -> object:
            mark(f"{label} start")
            c = time.thread_time()
            try:
                return real(*a, **kw)
            finally:
                cpu[f"main: {label}"] = cpu.get(f"main: {label}", 0.0) + time.thread_time() - c
                mark(f"{label} end")
        setattr(api, attr, timed)

    wrap("knowledge", "knowledge load")
    wrap("_collect", "collect (probes joined, judging modules imported meanwhile)")
    wrap("redact_model", "redaction pass")
    wrap("build_report", "judge + report model")
    wrap("write_report", "write env-report.json")
    if profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
    code = front.fast_preflight(argv, lite=lite)
    if profile:
        prof.disable()
        for order in ("tottime", "cumulative"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(order).print_stats(30)
            sys.stderr.write(s.getvalue())
    mark("end")
    cpu["main thread, all"] = time.thread_time() - main0
    cpu["process, all threads"] = time.process_time() - p0
    from sparkops.core import modeling

    print(json.dumps({"code": code, "wall": time.perf_counter() - t0, "marks": marks, "cpu": cpu,
                      "runtime": modeling.runtime(), "pydantic": "pydantic" in sys.modules}))


def trace_pydantic(construction: object, cpu: dict[str, float], threading: object) -> None:
    """Charge pydantic's own work to two rows, on whichever thread it runs: creating model classes
    (ModelMetaclass.__new__, outside any schema build) and building a class's validator and
    serializer (complete_model_class, deferred to a class's first use by ``defer_build``)."""
    local = threading.local()  # type: ignore[attr-defined]
    real_new, real_complete = construction.ModelMetaclass.__new__, construction.complete_model_class  # type: ignore[attr-defined]
    rows = ("pydantic (any thread): model class creation", "pydantic (any thread): schema builds")

    def charged(row: str, fn: object) -> object:
        def run(*a: object, **kw: object) -> object:
            if getattr(local, "inside", False):  # nested: the outer call's row has it
                return fn(*a, **kw)  # type: ignore[operator]
            local.inside, c = True, time.thread_time()
            try:
                return fn(*a, **kw)  # type: ignore[operator]
            finally:
                local.inside = False
                cpu[row] = cpu.get(row, 0.0) + time.thread_time() - c
        return run

    construction.ModelMetaclass.__new__ = charged(rows[0], real_new)  # type: ignore[attr-defined]
    construction.complete_model_class = charged(rows[1], real_complete)  # type: ignore[attr-defined]


def machine() -> str:
    import platform

    gpu = "GPU: present" if os.path.exists("/dev/nvidiactl") else "no GPU"
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {gpu}; Python {platform.python_version()}"


def main() -> int:
    import argparse
    import json
    import platform
    import statistics
    import subprocess

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", default=None, help="folder for quick-timeline-LABEL-DATE.md")
    ap.add_argument("--label", default=platform.node() or "machine")
    ap.add_argument("--profile", action="store_true", help="one more run under cProfile (stderr)")
    ap.add_argument("--pydantic", action="store_true", help="the quick path on pydantic (SPARKOPS_NO_LITE=1), "
                    "as before the lite model runtime")
    ap.add_argument("rest", nargs="*", help="extra preflight options (e.g. --offline --python PY)")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "SPARKOPS_NO_LITE": "1" if args.pydantic else ""}
    load0 = os.getloadavg()[0]
    runs = []
    for i in range(args.runs + 1):  # the first warms the page cache and bytecode; not counted
        p = subprocess.run([sys.executable, __file__, "--child", "--", *args.rest], env=env,
                           capture_output=True, text=True, timeout=120)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if not line:
            sys.stderr.write(p.stderr[-2000:])
            return 1
        if i:
            runs.append(json.loads(line[-1]))
    if args.profile:
        p = subprocess.run([sys.executable, __file__, "--child", "--profile", "--", *args.rest], env=env,
                           capture_output=True, text=True, timeout=120)
        profile_text = p.stderr
    med = statistics.median
    lines = [f"# preflight --quick, phase by phase, on {args.label} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             "", f"- machine: {machine()}; load average at start {load0:.2f}, at end {os.getloadavg()[0]:.2f}",
             f"- command: `python benchmarks/quick_timeline.py {' '.join(sys.argv[1:])}`",
             f"- {len(runs)} fresh processes after one warm-up; medians; wall from the interpreter's first line "
             f"(add `python -c pass` for the whole command)", "",
             f"- model runtime: {sorted({str(r.get('runtime')) for r in runs})}; pydantic imported: "
             f"{sorted({r.get('pydantic') for r in runs})}", "",
             f"wall median {med(r['wall'] for r in runs):.3f} s, min {min(r['wall'] for r in runs):.3f} s; exit codes "
             f"{sorted({r['code'] for r in runs})}", "", "## CPU by part (thread_time, median ms)", "",
             "The two `pydantic (any thread)` rows cut across the others (they are inside the import, load, "
             "probe and judge rows where they happen); every other row is its own CPU.", "",
             "| part | CPU ms |", "|---|---:|"]
    keys = sorted({k for r in runs for k in r["cpu"]}, key=lambda k: -med(r["cpu"].get(k, 0.0) for r in runs))
    lines += [f"| {k} | {med(r['cpu'].get(k, 0.0) for r in runs) * 1000:.1f} |" for k in keys]
    lines += ["", "## Timeline of the median-wall run (ms since the interpreter's first line)", "", "```"]
    typical = sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]
    lines += [f"{t * 1000:8.1f}  {name}" for t, name in sorted(typical["marks"])]
    lines += ["```"]
    if args.profile:
        lines += ["", "## One run under cProfile (slower than the others)", "", "```", profile_text.strip()[:20000], "```"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"quick-timeline-{args.label}-{time.strftime('%Y%m%d', time.gmtime())}.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


def preflight_argv(rest: list[str]) -> list[str]:
    return ["preflight", "--quick", "--format", "lines", "--report", os.devnull, *rest]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # a measured run: no argparse (see the imports above)
        flags = sys.argv[2:sys.argv.index("--")] if "--" in sys.argv else sys.argv[2:]
        child(preflight_argv(sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []), "--profile" in flags)
        sys.exit(0)
    sys.exit(main())
